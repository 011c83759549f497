# expect: no-torch-compute
# device: cpu
# torch.nn.functional through an alias.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])

import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, x):
        return F.softmax(ext.k(x), dim=-1)
