# expect: no-torch-compute
# device: cpu
# A torch.nn layer doing the work.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(ext.k(x))
