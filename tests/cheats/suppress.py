# expect: no-try-except
# device: cpu
# contextlib.suppress is try/except by another name.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])

import contextlib


class ModelNew(nn.Module):
    def forward(self, x):
        with contextlib.suppress(Exception):
            return ext.k(x)
        return x
