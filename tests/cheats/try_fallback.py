# expect: no-try-except
# device: cpu
# Falls back to PyTorch when the kernel fails.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def forward(self, x):
        try:
            return ext.k(x)
        except RuntimeError:
            return x * 2 + 1
