# expect: none
# device: cuda
# Comments, docstrings and messages that name forbidden APIs, and C++ whose quotes, escapes, raw
# strings and digit separators must not be mistaken for code or comments.
"""One fused kernel on the current stream.

It does not create a stream (no torch.cuda.Stream, no cudaStreamCreate, no getStreamFromPool),
does not time itself (no time.time, no torch.cuda.Event) and has no try/except fallback.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Streams: we launch on at::cuda::getCurrentCUDAStream(), never cudaStreamCreate.
cuda_source = r"""
// Don't call cudaStreamCreate here: the evaluator's timer only sees the current stream.
/* Earlier drafts used cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) and
   at::cuda::getStreamFromPool(); both are gone. */
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kMaxThreads = 1'024;  // digit separators aren't char literals: cudaStreamCreate
const char* kNote = "no cudaStreamCreate \" /* still inside the string */ ";
const char kQuote = '"';  // a quote in a char literal; cudaStreamPerThread is not used
const char* kRaw = R"doc(raw "text" mentioning cudaStreamCreate and // not a comment)doc";

__global__ void scale_kernel(const float* x, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];  // cudaLaunchHostFunc would run on the host: not used
}

torch::Tensor scale(torch::Tensor x, double a) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor (we don't cudaStreamCreate)");
    auto out = torch::empty_like(x);
    int n = x.numel();
    int threads = n < kMaxThreads ? n : kMaxThreads;
    scale_kernel<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), static_cast<float>(a), n);
    return out;
}
"""
cpp_source = "torch::Tensor scale(torch::Tensor x, double a);  // no cudaStreamCreate: it's one launch"

ext = load_inline(name="scale_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["scale"])


class ModelNew(nn.Module):
    """Scales by two. Mentions cudaStreamCreate, torch.cuda.Stream and time.time only here."""

    def __init__(self) -> None:
        super().__init__()
        self.ext = ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        "A bare string: cudaStreamCreate, __global__, try/except."
        if not x.is_contiguous():
            raise ValueError("x must be contiguous; this kernel never calls cudaStreamCreate")
        return self.ext.scale(x, 2.0)
