# An honest RMSNorm for the LLaMA block (hand-written for benchmarks/optimize_llama.py): one block of
# threads per row, the sum of squares in float32 (warp shuffles, then shared memory), then the row
# scaled, rounded to the input's dtype as the module rounds it, and multiplied by the weight.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename T>
__global__ void rms_norm_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ o, int d, float eps) {
    const T* row = x + (long long)blockIdx.x * d;
    T* out = o + (long long)blockIdx.x * d;
    float ss = 0.f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = to_float(row[j]);
        ss += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, off);
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < (blockDim.x >> 5) ? part[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, off);
        if (lane == 0) part[0] = ss;
    }
    __syncthreads();
    const float inv = rsqrtf(part[0] / d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        // (x.float() * rsqrt(...)).to(x.dtype) * weight: rounded to T, then the product rounded again
        T n = from_float<T>(to_float(row[j]) * inv);
        out[j] = from_float<T>(to_float(n) * to_float(w[j]));
    }
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && x.scalar_type() == weight.scalar_type(),
                "x and weight: CUDA tensors of one dtype");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int d = (int)xc.size(-1);
    const long long rows = xc.numel() / d;
    if (rows == 0) return out;
    auto stream = at::cuda::getCurrentCUDAStream();
    const int threads = 256;
    if (xc.scalar_type() == torch::kBFloat16) {
        rms_norm_rows<__nv_bfloat16><<<rows, threads, 0, stream>>>(
            reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(weight.data_ptr()),
            reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), d, (float)eps);
    } else {
        TORCH_CHECK(xc.scalar_type() == torch::kFloat32, "x: bfloat16 or float32");
        rms_norm_rows<float><<<rows, threads, 0, stream>>>(xc.data_ptr<float>(), weight.data_ptr<float>(),
                                                           out.data_ptr<float>(), d, (float)eps);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
cpp_source = "torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps);"

norm = load_inline(name="llama_block_rms_norm", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["rms_norm"])


HIDDEN = 4096
"""The block's hidden size (benchmarks/optimize_llama.py writes the one it runs): a task captured
from the model's graph builds its module with no arguments, one copied from its source with ``dim``."""


class ModelNew(nn.Module):
    def __init__(self, dim=HIDDEN, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # The weight in the input's dtype: the captured task holds it in the model's (bfloat16).
        return norm.rms_norm(x, self.weight.to(x.dtype), self.eps)
