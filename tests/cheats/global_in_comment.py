# expect: uses-load-inline
# device: cuda
# "__global__" only in a comment of the CUDA source and in a docstring: there is no kernel.
"""The __global__ kernel is in cuda_sources."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
// __global__ void k(float* x) {}  (removed)
torch::Tensor run(torch::Tensor x) { return x; }
"""
ext = load_inline(name="k", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
