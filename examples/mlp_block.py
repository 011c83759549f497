"""A small transformer-style MLP block, as a whole model: RMSNorm, an up projection, the tanh
GELU of GPT-2 written out in PyTorch ops, a down projection, and the residual.

The GELU is its hottest module that a kernel can take whole: seven element-wise ops, each a pass
over the activations with a temporary of its own, where one fused loop reads them once. The two
projections take about as long together, but each is one library GEMM.

`kevin-opt profile examples/mlp_block.py --device cpu` ranks its modules; the README's
"Start from your model" walks from there to a kernel installed back into it.
"""

import math

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class TanhGELU(nn.Module):
    """GELU with the tanh approximation (GPT-2, minGPT's NewGELU)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class MLPBlock(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.act = TanhGELU()
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


tokens = 4096
dim = 128
hidden = 512


def get_model():
    return MLPBlock(dim, hidden).eval()


def get_inputs():
    return [torch.randn(tokens, dim)]
