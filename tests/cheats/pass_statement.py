# expect: no-pass
# device: cpu
# The paper's format check rejects pass.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def forward(self, x):
        if x.numel() == 0:
            pass
        return ext.k(x)
