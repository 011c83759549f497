# An honest fused SwiGLU gate for bf16 (and fp32): one pass reads the gate and the up projection and
# writes silu(gate) * up, eight bf16 values (16 bytes) per load where the tensors allow it.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + __expf(-g)) * u; }

__global__ void silu_mul_bf16x8(const uint4* __restrict__ g, const uint4* __restrict__ u, uint4* __restrict__ o,
                                long long n8) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
        uint4 gv = g[i], uv = u[i], ov;
        const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
        const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
        __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&ov);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float2 a = __bfloat1622float2(g2[k]), b = __bfloat1622float2(u2[k]);
            o2[k] = __floats2bfloat162_rn(silu_mul(a.x, b.x), silu_mul(a.y, b.y));
        }
        o[i] = ov;
    }
}

// torch builds with __CUDA_NO_BFLOAT16_CONVERSIONS__: bf16 <-> float goes through the intrinsics.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename T>
__global__ void silu_mul_scalar(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ o, long long begin,
                                long long n) {
    for (long long i = begin + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        o[i] = from_float<T>(silu_mul(to_float(g[i]), to_float(u[i])));
    }
}

torch::Tensor fused_silu_mul(torch::Tensor gate, torch::Tensor up) {
    TORCH_CHECK(gate.is_cuda() && up.is_cuda() && gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type(),
                "gate and up: CUDA tensors of one shape and dtype");
    auto g = gate.contiguous(), u = up.contiguous();
    auto out = torch::empty_like(g);
    long long n = g.numel();
    if (n == 0) return out;
    auto stream = at::cuda::getCurrentCUDAStream();
    const int threads = 256;
    const int max_blocks = at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 16;
    long long done = 0;
    if (g.scalar_type() == torch::kBFloat16) {
        bool aligned = (reinterpret_cast<uintptr_t>(g.data_ptr()) % 16 == 0) && (reinterpret_cast<uintptr_t>(u.data_ptr()) % 16 == 0)
                       && (reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0);
        long long n8 = aligned ? n / 8 : 0;
        if (n8 > 0) {
            int blocks = (int)std::min<long long>((n8 + threads - 1) / threads, max_blocks);
            silu_mul_bf16x8<<<blocks, threads, 0, stream>>>(reinterpret_cast<const uint4*>(g.data_ptr()),
                                                            reinterpret_cast<const uint4*>(u.data_ptr()),
                                                            reinterpret_cast<uint4*>(out.data_ptr()), n8);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            done = n8 * 8;
        }
        if (done < n) {
            int blocks = (int)std::min<long long>((n - done + threads - 1) / threads, max_blocks);
            silu_mul_scalar<__nv_bfloat16><<<blocks, threads, 0, stream>>>(
                reinterpret_cast<const __nv_bfloat16*>(g.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(u.data_ptr()),
                reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), done, n);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
    } else {
        TORCH_CHECK(g.scalar_type() == torch::kFloat32, "gate and up: bfloat16 or float32");
        int blocks = (int)std::min<long long>((n + threads - 1) / threads, max_blocks);
        silu_mul_scalar<float><<<blocks, threads, 0, stream>>>(g.data_ptr<float>(), u.data_ptr<float>(),
                                                               out.data_ptr<float>(), 0, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""
cpp_source = "torch::Tensor fused_silu_mul(torch::Tensor gate, torch::Tensor up);"

swiglu = load_inline(name="llama_block_silu_mul", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["fused_silu_mul"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate, up):
        return swiglu.fused_silu_mul(gate, up)
