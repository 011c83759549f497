# expect: no-torch-compute
# device: cpu
# An attribute set to a set in __init__ and to a tensor in forward.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def forward(self, x):
        self.seen = ext.k(x)
        return self.seen.add(1.0)
