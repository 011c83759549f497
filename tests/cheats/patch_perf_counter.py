# expect: no-timers
# device: cpu
# Patches time.perf_counter (also a monkeypatch).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])

import time

time.perf_counter = lambda: 0.0


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.k(x)
