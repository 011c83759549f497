"""Row softmax with a temperature, as in attention scores or a sampling head:
softmax(x / temperature) over the last dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, temperature: float = 0.7):
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / self.temperature, dim=-1)


rows = 512
cols = 1024


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [0.7]
