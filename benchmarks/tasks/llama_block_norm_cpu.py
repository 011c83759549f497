# The same RMSNorm in C++ for the CPU dry runs of benchmarks/optimize_llama.py and optimize_hf_llama.py
# (float32, bf16 and fp16; hand-written): one pass over a row for its sum of squares and one to scale it, where PyTorch makes six passes.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

// Rounded as the module rounds: the row normalised in float32, cast to the input's dtype, then
// scaled by the weight in that dtype (LlamaRMSNorm's order), so bf16 and fp16 match it bit for bit.
template <typename scalar_t>
void rms_norm_rows(const scalar_t* xp, const scalar_t* wp, scalar_t* op, int64_t rows, int64_t d, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        float ss = 0.f;
        for (int64_t j = 0; j < d; ++j) {
            const float v = static_cast<float>(xp[r * d + j]);
            ss += v * v;
        }
        const float inv = 1.f / std::sqrt(ss / d + eps);
        for (int64_t j = 0; j < d; ++j) {
            const scalar_t normed = static_cast<scalar_t>(static_cast<float>(xp[r * d + j]) * inv);
            op[r * d + j] = static_cast<scalar_t>(static_cast<float>(wp[j]) * static_cast<float>(normed));
        }
    }
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.scalar_type() == weight.scalar_type(), "x and weight in one dtype");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t d = xc.size(-1);
    const int64_t rows = xc.numel() / d;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "rms_norm", [&] {
        rms_norm_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, d,
                                static_cast<float>(eps));
    });
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
