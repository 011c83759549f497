"""A reference whose own peak (a 160 GiB temporary) fits no GPU: the probe refuses the task before
any turn (scripts/gpu-check, step memory)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        scratch = torch.empty(160 << 28, dtype=torch.float32, device=x.device)  # 160 GiB
        return x + scratch[: x.numel()].view_as(x).zero_()


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
