"""The activation of a transformer MLP: add the linear layer's bias, then the exact
(erf) GELU. Written as two PyTorch ops, it reads and writes the activations twice."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(features))
        nn.init.uniform_(self.bias, -0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias)


rows = 256
features = 4096


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return [features]
