# expect: no-torch-compute
# device: cpu
# A buffer registered under the name of a set attribute that is never really assigned.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        if torch.cuda.device_count() > 99:
            self.offsets = set()
        self.register_buffer("offsets", torch.ones(1))

    def forward(self, x):
        return self.offsets.add(ext.k(x))
