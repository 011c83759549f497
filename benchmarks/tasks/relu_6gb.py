"""ReLU over a 6 GiB input (4096 x 393216 float32): the evaluator must verify and time it holding
little more than the task itself needs (scripts/gpu-check, step memory)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 393216)]


def get_init_inputs():
    return []
