# expect: none
# device: cuda
# An honest CUDA candidate: the element-wise add in the inline-CUDA format.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
cpp_source = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"

add = load_inline(name="add", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["add_cuda"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add = add

    def forward(self, a, b):
        out = self.add.add_cuda(a.contiguous(), b.contiguous())
        torch.cuda.synchronize()
        return out.view(a.shape)
