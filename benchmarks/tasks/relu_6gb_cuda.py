# An honest vectorised ReLU: float4 loads and stores, a grid-stride loop, 64-bit indices.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu4_kernel(const float4* __restrict__ in, float4* __restrict__ out, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        float4 v = in[i];
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        out[i] = v;
    }
}

__global__ void relu_tail_kernel(const float* __restrict__ in, float* __restrict__ out, long long start,
                                 long long n) {
    long long i = start + blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(in[i], 0.f);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    long long n = x.numel();
    long long n4 = n / 4;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (n4 > 0) {
        const int threads = 256;
        int blocks = (int)std::min<long long>((n4 + threads - 1) / threads, 132LL * 32);
        relu4_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                                 reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
    }
    long long rest = n - n4 * 4;
    if (rest > 0) {
        relu_tail_kernel<<<1, 256, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), n4 * 4, n);
    }
    return out;
}
"""
cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu = load_inline(name="relu_6gb_vec4", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.relu = relu

    def forward(self, x):
        return self.relu.relu_cuda(x.contiguous())
