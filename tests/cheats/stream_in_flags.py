# expect: no-streams
# device: cuda
# The stream API hides in a macro defined on the compiler's command line.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void k(float* x) {}
torch::Tensor run(torch::Tensor x) {
    cudaStream_t s; MAKE_SIDE_STREAM(&s);
    k<<<1, 1, 0, s>>>(x.data_ptr<float>());
    return x;
}
"""
ext = load_inline(name="k", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src, functions=["run"],
                  extra_cuda_cflags=["-DMAKE_SIDE_STREAM=cudaStreamCreate"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
