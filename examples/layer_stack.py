"""A small stack of transformer-style layers, as a whole model: an input projection, then three
layers, each an RMSNorm and a sigmoid-gated GELU on a residual branch: x + act(norm(x)).

Two computations are worth a kernel, each repeated in every layer: the norm (six PyTorch
operators, each a pass over the activations with a temporary of its own, where a fused loop reads
each row twice and writes it once) and the activation (three operators where one loop does it).
`kevin-opt profile` shows each as one group (`layers.*.norm x3`): one task, one run and one kernel
that goes into all three layers, each on its own weights. The input projection is one library
GEMM, which a kernel at best matches.

`kevin-opt profile examples/layer_stack.py --device cpu` ranks them; the scripted responses, one
file per group, are in `examples/layer_stack_responses/` (hand-written, labelled as such).
"""

import torch
import torch.nn as nn


class RowNorm(nn.Module):
    """RMSNorm over the last dimension, with a learned per-channel weight."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class QuickGELU(nn.Module):
    """GELU approximated by a sigmoid gate, x * sigmoid(1.702 x), as CLIP uses it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class LayerStack(nn.Module):
    def __init__(self, features: int, dim: int, depth: int):
        super().__init__()
        self.embed = nn.Linear(features, dim)
        self.layers = nn.ModuleList(nn.ModuleDict({"norm": RowNorm(dim), "act": QuickGELU()}) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = x + layer["act"](layer["norm"](x))
        return x


tokens = 2048
features = 16
dim = 256
depth = 3


def get_model():
    model = LayerStack(features, dim, depth).eval()
    with torch.no_grad():
        # A trained norm's weight is not all ones: each layer's has its own values.
        for layer in model.layers:
            layer["norm"].weight.uniform_(0.5, 1.5)
    return model


def get_inputs():
    return [torch.randn(tokens, features)]
