"""KernelBench level 1 36_RMSNorm_ at its own size: RMS normalisation over the features of a
(112, 64, 512, 512) float32 input, 7 GiB in and 7 GiB out, with a 7 GiB temporary in the reference
(scripts/gpu-check, step memory; benchmarks/turn.py and confirm.py --kernelbench)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


batch_size = 112
features = 64
dim1 = 512
dim2 = 512


def get_inputs():
    x = torch.rand(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features]
