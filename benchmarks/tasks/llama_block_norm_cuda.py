# An honest RMSNorm for the LLaMA block (hand-written for benchmarks/optimize_llama.py): one block of
# threads per row, 16-byte loads, the sum of squares in float32 (warp shuffles, then shared memory),
# then the row scaled, rounded to the input's dtype as the module rounds it, and multiplied by the weight.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
// ATen's tensor, not <torch/extension.h>: the whole C++ API in a .cu file is most of a build's time.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// VEC elements of T in one 16-byte load (bf16x8, float4).
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Pack { T v[VEC]; };

// The row sum of squares over the block: warp shuffles, then the warps' partial sums in shared memory.
__device__ __forceinline__ float block_sum(float ss) {
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
    return part[0];
}

// 16 bytes a load where the row allows it: 2-byte loads leave the memory system mostly idle (30 us for
// a [2048, 4096] bf16 row set on the H200, where the bytes alone take under 10). The second pass
// reads the row again from cache.
template <typename T, int VEC>
__global__ void rms_norm_rows_vec(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ o, int d,
                                  float eps) {
    using P = Pack<T, VEC>;
    const P* row = reinterpret_cast<const P*>(x + (long long)blockIdx.x * d);
    const P* wv = reinterpret_cast<const P*>(w);
    P* out = reinterpret_cast<P*>(o + (long long)blockIdx.x * d);
    const int n = d / VEC;
    float ss = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const P p = row[j];
#pragma unroll
        for (int e = 0; e < VEC; ++e) { float v = to_float(p.v[e]); ss += v * v; }
    }
    const float inv = rsqrtf(block_sum(ss) / d + eps);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const P p = row[j], q = wv[j];
        P r;
#pragma unroll
        for (int e = 0; e < VEC; ++e) r.v[e] = from_float<T>(to_float(from_float<T>(to_float(p.v[e]) * inv)) * to_float(q.v[e]));
        out[j] = r;
    }
}

template <typename T>
__global__ void rms_norm_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ o, int d, float eps) {
    const T* row = x + (long long)blockIdx.x * d;
    T* out = o + (long long)blockIdx.x * d;
    float ss = 0.f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = to_float(row[j]);
        ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss) / d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        // (x.float() * rsqrt(...)).to(x.dtype) * weight: rounded to T, then the product rounded again
        T n = from_float<T>(to_float(row[j]) * inv);
        out[j] = from_float<T>(to_float(n) * to_float(w[j]));
    }
}

at::Tensor rms_norm(at::Tensor x, at::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && x.scalar_type() == weight.scalar_type(),
                "x and weight: CUDA tensors of one dtype");
    auto xc = x.contiguous();
    auto out = at::empty_like(xc);
    const int d = (int)xc.size(-1);
    const long long rows = xc.numel() / d;
    if (rows == 0) return out;
    auto stream = c10::cuda::getCurrentCUDAStream();
    const int threads = 256;
    auto wc = weight.contiguous();
    auto aligned = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
    const bool vec = aligned(xc) && aligned(wc) && aligned(out);
    if (xc.scalar_type() == at::kBFloat16) {
        auto xp = reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr());
        auto wp = reinterpret_cast<const __nv_bfloat16*>(wc.data_ptr());
        auto op = reinterpret_cast<__nv_bfloat16*>(out.data_ptr());
        if (vec && d % 8 == 0) rms_norm_rows_vec<__nv_bfloat16, 8><<<rows, threads, 0, stream>>>(xp, wp, op, d, (float)eps);
        else rms_norm_rows<__nv_bfloat16><<<rows, threads, 0, stream>>>(xp, wp, op, d, (float)eps);
    } else {
        TORCH_CHECK(xc.scalar_type() == at::kFloat, "x: bfloat16 or float32");
        auto xp = xc.data_ptr<float>(), wp = wc.data_ptr<float>(), op = out.data_ptr<float>();
        if (vec && d % 4 == 0) rms_norm_rows_vec<float, 4><<<rows, threads, 0, stream>>>(xp, wp, op, d, (float)eps);
        else rms_norm_rows<float><<<rows, threads, 0, stream>>>(xp, wp, op, d, (float)eps);
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
