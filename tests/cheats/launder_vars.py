# expect: no-torch-compute
# device: cpu
# Rebinds an attribute through vars() under a computed name, out of the syntax tree's sight.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def forward(self, x):
        vars(self)["se" + "en"] = ext.k(x)
        return self.seen.add(1.0)
