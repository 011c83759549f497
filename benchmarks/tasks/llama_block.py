"""A LLaMA-style decoder block as a whole model, random weights built from a config (nothing
downloaded): RMSNorm, attention (q, k, v, o projections and PyTorch's scaled-dot-product
attention), RMSNorm, and the SwiGLU MLP whose gate is a module of its own (``mlp.act``: SiLU of the
gate times the up projection, two element-wise passes a kernel fuses into one).

The size comes from the environment, so the benchmark runs the same file on the CPU at a small size
and on a GPU at a real one: LLAMA_BLOCK_HIDDEN (default 4096), LLAMA_BLOCK_SEQ (2048),
LLAMA_BLOCK_DTYPE (bfloat16); the MLP is 2.6875x the hidden size (11008 at 4096) and a head is 128
wide (32 heads at 4096). ``benchmarks/model_e2e.py`` profiles it, extracts ``mlp.act``, checks a
hand-written kernel for it, installs it and times the whole block with and without it.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

hidden = int(os.environ.get("LLAMA_BLOCK_HIDDEN", "4096"))
seq = int(os.environ.get("LLAMA_BLOCK_SEQ", "2048"))
dtype = getattr(torch, os.environ.get("LLAMA_BLOCK_DTYPE", "bfloat16"))
intermediate = int(hidden * 2.6875)
head_dim = min(128, hidden)
heads = hidden // head_dim


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(dim=-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, d))


class SiluMul(nn.Module):
    """SwiGLU's gate: SiLU of the gate projection times the up projection."""

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


class MLP(nn.Module):
    def __init__(self, dim: int, inner: int):
        super().__init__()
        self.gate = nn.Linear(dim, inner, bias=False)
        self.up = nn.Linear(dim, inner, bias=False)
        self.act = SiluMul()
        self.down = nn.Linear(inner, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x), self.up(x)))


class Block(nn.Module):
    def __init__(self, dim: int, inner: int, n_heads: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, n_heads)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = MLP(dim, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def get_model():
    torch.manual_seed(0)
    return Block(hidden, intermediate, heads).to(dtype).eval()


def get_inputs():
    return [torch.randn(1, seq, hidden).to(dtype)]
