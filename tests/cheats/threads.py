# expect: no-threads
# device: cpu
# Work on a thread the timer does not wait for.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])

import threading


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        threading.Thread(target=lambda: out.copy_(ext.k(x))).start()
        return out
