# The same RMSNorm in C++ for the CPU dry run of benchmarks/optimize_llama.py (float32, hand-written):
# one pass over a row for its sum of squares and one to scale it, where PyTorch makes six passes.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32, "float32 tensors");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t d = xc.size(-1);
    const int64_t rows = xc.numel() / d;
    const float* xp = xc.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float ss = 0.f;
        for (int64_t j = 0; j < d; ++j) ss += xp[r * d + j] * xp[r * d + j];
        const float inv = 1.f / std::sqrt(ss / d + static_cast<float>(eps));
        for (int64_t j = 0; j < d; ++j) op[r * d + j] = xp[r * d + j] * inv * wp[j];
    }
    return out;
}
"""

norm = load_inline(name="llama_block_rms_norm_cpu", cpp_sources=cpp_source, functions=["rms_norm"],
                   extra_cflags=["-O3"])


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
