#!/usr/bin/env python3
"""What the installed guard costs per call, beside a bare call of the kernel, from one run.

Usage: python benchmarks/guard_cost.py [--device cpu|cuda] [--rows 8] [--dim 256] [--calls 2000]
       [--rounds 15] [--json PATH]

A small RMSNorm kernel (C++ on the CPU, CUDA on the GPU, built by load_inline into
TORCH_EXTENSIONS_DIR or torch's default folder) is installed into a one-layer model the way a
delivered kernel module installs it (``kevin_agent/model/worker/guard.py``, whose text every
delivered module carries), admitted at the family ``float32[n0,<dim>]``. At a launch-bound size
(a few rows) the script times, per call, in interleaved rounds:

  extension       the extension's function itself (``ext.row_norm(x, w, eps)``)
  kernel module   the kernel's ``ModelNew`` called directly
  custom op       ``torch.ops.kevin.<name>``, what a compiled or exported graph calls
  guarded         the model's module with the kernel installed (the guard's checks, then the kernel)
  falls back      the guarded module at a call it does not admit (float64), then the original forward
  original        the module's original forward (eager PyTorch), uninstalled

Times are the host's: the mean of ``--calls`` back-to-back calls, synchronized once at the end of
each batch (on CUDA, a launch-bound kernel's cost is what the host spends launching it), the median
over rounds. The guard's own cost is "guarded" minus "kernel module".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.model.worker.guard import KernelSource, install_kernel, kernel_calls, uninstall_kernel  # noqa: E402

CPU_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor row_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t d = xc.size(-1);
    const int64_t rows = xc.numel() / d;
    const float* xp = xc.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float ss = 0.0f;
        for (int64_t j = 0; j < d; ++j) ss += xp[r * d + j] * xp[r * d + j];
        const float inv = 1.0f / std::sqrt(ss / d + static_cast<float>(eps));
        for (int64_t j = 0; j < d; ++j) op[r * d + j] = xp[r * d + j] * inv * wp[j];
    }
    return out;
}
"""

ext = load_inline(name="kevin_guard_cost_cpu", cpp_sources=source, functions=["row_norm"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return ext.row_norm(x, self.weight, self.eps)
'''

CUDA_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void row_norm_kernel(const float* x, const float* w, float* out, int64_t d, float eps) {
    const int64_t row = blockIdx.x;
    __shared__ float partial[256];
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) { float v = x[row * d + j]; ss += v * v; }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / d + eps);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[row * d + j] = x[row * d + j] * inv * w[j];
}

torch::Tensor row_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t d = xc.size(-1);
    const int64_t rows = xc.numel() / d;
    // on the current stream: a CUDA graph captures only the work queued there
    row_norm_kernel<<<rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), weight.data_ptr<float>(), out.data_ptr<float>(), d,
                                   static_cast<float>(eps));
    return out;
}
"""
cpp_source = "torch::Tensor row_norm(torch::Tensor x, torch::Tensor weight, double eps);"

ext = load_inline(name="kevin_guard_cost_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["row_norm"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return ext.row_norm(x, self.weight, self.eps)
'''


class RowNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class Layer(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = RowNorm(dim)


def per_call_us(fn, calls: int, sync) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def check_graphs(layer: Layer, x: torch.Tensor, want: torch.Tensor) -> dict[str, str]:
    """The installed kernel captured in a CUDA graph, and in torch.compile's CUDA graphs
    (mode="reduce-overhead", fullgraph=True): the same outputs as the original forward?"""
    out = {}
    with torch.no_grad():
        static = x.clone()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            layer.norm(static)  # warm-up outside the capture, on its stream
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            captured = layer.norm(static)
        static.copy_(x * 2)
        graph.replay()
        torch.cuda.synchronize()
        ok = torch.allclose(captured, layer.norm.forward.original(x * 2), atol=1e-5, rtol=1e-5)
        out["torch.cuda.graph replay"] = "same outputs" if ok else "DIFFERENT outputs"
        torch._dynamo.reset()
        compiled = torch.compile(layer.norm, mode="reduce-overhead", fullgraph=True)
        results = [compiled(x).clone() for _ in range(4)]
        ok = all(torch.allclose(r, want, atol=1e-5, rtol=1e-5) for r in results)
        out["torch.compile reduce-overhead"] = "same outputs" if ok else "DIFFERENT outputs"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    layer = Layer(args.dim).to(device).eval()
    source = KernelSource("guard_cost", CUDA_KERNEL if device.type == "cuda" else CPU_KERNEL)
    guard = install_kernel(layer, "norm", source, [args.dim], signatures=[f"float32[n0,{args.dim}]"],
                           device=device.type, training=False)
    x = torch.randn(args.rows, args.dim, device=device)
    wide = x.double()
    with torch.no_grad():
        want = guard.original(x)
        torch.testing.assert_close(layer.norm(x), want)  # builds (or loads) the kernel, and checks it
        kernel, weight, eps = guard.kernel, layer.norm.weight, layer.norm.eps
        ext = source.load().forward.__globals__["ext"]
        op, slot = guard.op, guard.slot
        torch.testing.assert_close(op(slot, 0, [x], [weight])[0], want)
        variants = {
            "extension": lambda: ext.row_norm(x, weight, eps),
            "kernel module": lambda: kernel(x),
            "custom op": lambda: op(slot, 0, [x], [weight]),
            "guarded": lambda: layer.norm(x),
            "falls back": lambda: layer.norm(wide),
            "original": lambda: guard.original(x),
        }
        for fn in variants.values():  # warm-up
            per_call_us(fn, max(10, args.calls // 20), sync)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                times[name].append(per_call_us(variants[name], args.calls, sync))
    graphs = check_graphs(layer, x, want) if device.type == "cuda" else {}
    calls = kernel_calls(layer)["norm"]
    uninstall_kernel(layer, "norm")
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"guard cost on {name}, float32[{args.rows},{args.dim}], {args.calls} calls x {args.rounds} rounds "
          f"(median of rounds, us per call)")
    for variant, us in medians.items():
        spread = f"{min(times[variant]):.2f}-{max(times[variant]):.2f}"
        print(f"  {variant:<14} {us:8.2f} us   (rounds {spread})")
    print(f"  the guard's own cost (guarded - kernel module): {medians['guarded'] - medians['kernel module']:.2f} us; "
          f"kernel calls {calls['kernel']}, original {calls['original']}")
    for what, outcome in graphs.items():
        print(f"  {what}: {outcome}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": name, "rows": args.rows, "dim": args.dim, "calls": args.calls,
                                         "rounds": args.rounds, "median_us": medians, "rounds_us": times,
                                         "graphs": graphs}, indent=1))


if __name__ == "__main__":
    main()
