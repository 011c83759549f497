# eval: incorrect
# The same answer whatever the input.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()

    def forward(self, x):
        return torch.full_like(x, 1.0)
