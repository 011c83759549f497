# eval: incorrect
# Returns a tensor subclass that could defer or fake the work when it is compared.
import torch
import torch.nn as nn


class Lazy(torch.Tensor):
    x = 1


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return (x * self.scale + 1.0).as_subclass(Lazy)
