"""RMSNorm as in LLaMA-style transformers: scale each row by the reciprocal of its root
mean square, then by a learned per-channel weight."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(hidden_size))
        # A trained layer's weight is not all ones: start from something less trivial.
        nn.init.uniform_(self.weight, 0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


batch_size = 512
hidden_size = 1024


def get_inputs():
    return [torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [hidden_size]
