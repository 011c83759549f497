"""KernelBench level 1 19_ReLU at its own size: ReLU over a 6 GiB input (4096 x 393216 float32). The
evaluator must verify and time it holding little more than the task itself needs (scripts/gpu-check,
step memory; benchmarks/turn.py and confirm.py --kernelbench)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(4096, 393216)]  # as KernelBench level 1, 19_ReLU.py


def get_init_inputs():
    return []
