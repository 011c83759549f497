# expect: no-torch-compute
# device: cpu
# The @ operator spelled as a method and as operator.matmul.
import operator

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return operator.matmul(ext.k(x).__matmul__(self.w), self.w)
