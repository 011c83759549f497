"""CUDA kernels that misbehave on purpose, and the candidates that use them, for tests/evaluate/test_gpu.py.

The kernels are built once per test session into one extension; each candidate imports that
prebuilt module instead of compiling its own copy (a build takes about a minute), so these
candidates exercise the evaluator's run-time protection with the static checks out of the
way. ``static_twin`` names the file in tests/cheats that shows the static side of each trick.
"""

from __future__ import annotations

from dataclasses import dataclass

EXT_NAME = "kevin_gpu_tricks"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>

__global__ void add_k(const float* a, const float* b, float* o, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = a[i] + b[i];
}
__global__ void nowrite_k(const float* a, const float* b, float* o, long n) {}
__global__ void illegal_k(const float* a, const float* b, float* o, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i + (1L << 36)] = a[i];  // 256 GiB past the output: never mapped
}
__global__ void half_k(const float* a, const float* b, float* o, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = __half2float(__hadd(__float2half(a[i]), __float2half(b[i])));
}
__global__ void const_k(float* o, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = 1.0f;
}
__global__ void spin_k(long long cycles) {
    // A loop without side effects may be assumed to end and be removed: the sleep (inline
    // asm) keeps it, and cycles < 0 never leaves it.
    long long start = clock64();
    while (true) {
        if (cycles >= 0 && clock64() - start >= cycles) break;
        __nanosleep(100);
    }
}

static int blocks(long n) { return (int)((n + 255) / 256); }

torch::Tensor launch(int which, torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors (got ", a.device(), ")");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32, "expects float32");
    auto out = torch::empty_like(a);
    long n = a.numel();
    auto s = at::cuda::getCurrentCUDAStream();
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    if (which == 0) add_k<<<blocks(n), 256, 0, s>>>(pa, pb, po, n);
    if (which == 1) nowrite_k<<<blocks(n), 256, 0, s>>>(pa, pb, po, n);
    if (which == 2) illegal_k<<<blocks(n), 256, 0, s>>>(pa, pb, po, n);
    if (which == 3) half_k<<<blocks(n), 256, 0, s>>>(pa, pb, po, n);
    if (which == 4) const_k<<<blocks(n), 256, 0, s>>>(po, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) { return launch(0, a, b); }
torch::Tensor add_nowrite(torch::Tensor a, torch::Tensor b) { return launch(1, a, b); }
torch::Tensor add_illegal(torch::Tensor a, torch::Tensor b) { return launch(2, a, b); }
torch::Tensor add_half(torch::Tensor a, torch::Tensor b) { return launch(3, a, b); }
torch::Tensor constant(torch::Tensor a, torch::Tensor b) { return launch(4, a, b); }
torch::Tensor add_inplace(torch::Tensor a, torch::Tensor b) {
    long n = a.numel();
    add_k<<<blocks(n), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), a.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return a;
}
void spin(int64_t cycles) {
    spin_k<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(cycles);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
// The whole answer on a stream of the pool, which first waits for the current one: right once the
// device is synchronised, yet nothing of it runs on the stream the call is timed on.
torch::Tensor add_side(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    long n = a.numel();
    auto side = at::cuda::getStreamFromPool();
    cudaEvent_t ready;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, at::cuda::getCurrentCUDAStream().stream());
    cudaStreamWaitEvent(side.stream(), ready, 0);
    cudaEventDestroy(ready);
    spin_k<<<1, 1, 0, side.stream()>>>(100000);
    add_k<<<blocks(n), 256, 0, side.stream()>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
// The legacy default stream (no stream argument): right when called eagerly, outside any graph a
// capture on another stream makes.
torch::Tensor add_legacy(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    long n = a.numel();
    add_k<<<blocks(n), 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
void segfault() {
    volatile int* p = nullptr;
    *p = 1;
}
"""

CPP_SOURCE = """
torch::Tensor add(torch::Tensor a, torch::Tensor b);
torch::Tensor add_nowrite(torch::Tensor a, torch::Tensor b);
torch::Tensor add_illegal(torch::Tensor a, torch::Tensor b);
torch::Tensor add_half(torch::Tensor a, torch::Tensor b);
torch::Tensor constant(torch::Tensor a, torch::Tensor b);
torch::Tensor add_inplace(torch::Tensor a, torch::Tensor b);
void spin(int64_t cycles);
torch::Tensor add_side(torch::Tensor a, torch::Tensor b);
torch::Tensor add_legacy(torch::Tensor a, torch::Tensor b);
void segfault();
"""

FUNCTIONS = ["add", "add_nowrite", "add_illegal", "add_half", "constant", "add_inplace", "spin", "add_side",
             "add_legacy", "segfault"]

HEADER = '''import sys
sys.path.insert(0, {ext_dir!r})
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import {ext}
ext = {ext}
'''

CLASS = '''

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, a, b):
{body}
'''


@dataclass
class Trick:
    name: str
    body: str
    """forward()'s body, indented 8 spaces."""
    status: str
    """The status the evaluator must give."""
    reason: str
    """A piece of the error text (or of a flag) that names the reason."""
    static_twin: str = ""
    """tests/cheats/<name>.py: the same trick as the static checks see it."""
    init: str = "        self.calls = 0"
    module_level: str = ""


def source(trick: Trick, ext_dir: str) -> str:
    head = HEADER.format(ext_dir=ext_dir, ext=EXT_NAME) + trick.module_level
    return head + CLASS.format(init=trick.init, body=trick.body)


HONEST = Trick("honest (prebuilt kernel)", "        return ext.add(a, b)", "correct", "")

TRICKS = [
    Trick("output never written", "        return ext.add_nowrite(a, b)", "incorrect", "got nan"),
    Trick("inputs changed in place", "        return ext.add_inplace(a, b).clone()", "incorrect",
          "modified input 0 in place"),
    Trick("output cached across calls",
          "        if self.calls == 0:\n            self.cache = ext.add(a, b)\n        self.calls += 1\n"
          "        return self.cache.clone()", "incorrect", "trial 2 of 5"),
    Trick("work on a side stream",
          "        out = ext.add(a, b)\n        with torch.cuda.stream(self.side):\n"
          "            ext.spin(4000000)\n        return out", "check_failed",
          "[no-streams] work ran outside the stream", "side_stream", init="        self.side = torch.cuda.Stream()"),
    Trick("output computed on a side stream", "        return ext.add_side(a, b)", "check_failed",
          "[no-streams] work ran outside the stream", "stream_in_source"),
    Trick("PyTorch op in ModelNew", "        return torch.add(a, b)", "check_failed", "aten::add",
          "torch_matmul"),
    Trick("torch.nn.functional in ModelNew", "        return F.hardtanh(ext.add(a, b), -1e30, 1e30)",
          "check_failed", "aten::hardtanh", "functional_alias"),
    Trick("try/except fallback to PyTorch",
          "        try:\n            return ext.add(a.double(), b)\n        except RuntimeError:\n"
          "            return a + b", "check_failed", "aten::add", "try_fallback"),
    Trick("thread finishes the work later",
          "        out = torch.empty_like(a)\n"
          "        threading.Thread(target=lambda: (time.sleep(0.5), out.copy_(ext.add(a, b)))).start()\n"
          "        return out", "incorrect", "got nan", "threads"),
    Trick("patch torch.cuda.Event", "        return ext.add(a, b)", "check_failed", "torch.cuda.Event",
          "patch_event_setattr", module_level="torch.cuda.Event = lambda *a, **k: None\n"),
    Trick("patch torch.cuda.synchronize", "        return ext.add(a, b)", "check_failed",
          "torch.cuda.synchronize", "patch_sync", module_level="torch.cuda.synchronize = lambda *a, **k: None\n"),
    Trick("patch time.perf_counter", "        return ext.add(a, b)", "check_failed", "time.perf_counter",
          "patch_perf_counter", module_level="time.perf_counter = lambda: 0.0\n"),
    Trick("patch the C sync under torch.cuda", "        return ext.add(a, b)", "check_failed",
          "_cuda_synchronize", "patch_sync",
          module_level="setattr(torch._C, '_cuda_synchronize', lambda: None)\n"),
    Trick("return an input", "        return a", "incorrect", "shares memory with input 0"),
    Trick("return a view of an input", "        return b.view(-1).view(b.shape)", "incorrect",
          "shares memory with input 1"),
    Trick("lazy tensor subclass", "        return ext.add(a, b).as_subclass(Lazy)", "incorrect",
          "torch.Tensor subclass", "lazy_subclass",
          module_level="\n\nclass Lazy(torch.Tensor):\n    x = 1\n"),
    Trick("fp16 shortcut (__half)", "        return ext.add_half(a, b)", "incorrect", "differ beyond atol"),
    Trick("constant output", "        return ext.constant(a, b)", "incorrect", "differ beyond atol"),
]

# Correct, but not capturable in a CUDA graph: the "in a CUDA graph" column says so, nothing else changes.
NOT_CAPTURABLE = [
    Trick("synchronises inside forward", "        out = ext.add(a, b)\n        torch.cuda.synchronize()\n"
          "        return out", "correct", "not capturable: "),
    Trick("launches on the legacy default stream", "        return ext.add_legacy(a, b)", "correct",
          "not capturable: "),
]

# Crashes and hangs: each must cost only its own candidate.
ISOLATION = [
    Trick("illegal memory access", "        return ext.add_illegal(a, b)", "runtime_error", "illegal memory access"),
    Trick("kernel that never ends", "        ext.spin(-1)\n        return ext.add(a, b)", "timeout",
          "timed out"),
    Trick("host-side segfault", "        ext.segfault()\n        return ext.add(a, b)", "runtime_error",
          "SIGSEGV"),
    Trick("out of memory (10 TB)",
          "        big = torch.empty(10 * 2**40, dtype=torch.uint8, device=a.device)\n"
          "        return ext.add(a, b)", "runtime_error", "out of memory"),
]

COMPILE_HANG = '''import os
import tempfile

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The compiler opens a FIFO nobody writes and blocks for ever, inside nvcc.
fifo = os.path.join(tempfile.mkdtemp(), "never-written.h")
os.mkfifo(fifo)
source = '#include "' + fifo + '"\\n__global__ void k(float* x) {}\\n'
ext = load_inline(name="hangs", cpp_sources="", cuda_sources=source, functions=[])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a
'''
