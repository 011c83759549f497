# expect: no-monkeypatch
# device: cuda
# Replaces torch.cuda.Event through setattr.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = "__global__ void k(float* x) {} torch::Tensor run(torch::Tensor x) { return x; }"
ext = load_inline(name="k", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src, functions=["run"])
setattr(torch.cuda, "Ev" + "ent", object)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
