# expect: no-monkeypatch
# device: cuda
# Makes the timer's synchronize a no-op.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = "__global__ void k(float* x) {} torch::Tensor run(torch::Tensor x) { return x; }"
ext = load_inline(name="k", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src, functions=["run"])
torch.cuda.synchronize = lambda *a, **k: None


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
