# expect: defines-modelnew
# device: cpu
# The class has the wrong name.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class Model(nn.Module):
    def forward(self, x):
        return ext.k(x)
