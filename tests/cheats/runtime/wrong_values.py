# eval: incorrect
# Off by 0.01 everywhere: beyond the float32 tolerance.
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale + 1.01
