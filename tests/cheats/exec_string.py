# expect: no-harness
# device: cpu
# Hides code from the static checks in a string.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def forward(self, x):
        return eval("x.relu()")
