# expect: no-streams
# device: cuda
# A backslash-newline splits the identifier; the compiler joins the lines again.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void k(float* x) {}
torch::Tensor run(torch::Tensor x) {
    cudaStream_t s; cudaStream\
Create(&s);
    k<<<1, 1, 0, s>>>(x.data_ptr<float>());
    return x;
}
"""
ext = load_inline(name="k", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
