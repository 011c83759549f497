# eval: correct
# An honest C++ kernel for the scale-and-shift task: one pass, no temporaries.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor scale_shift(torch::Tensor x, double scale) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "expects contiguous float32");
    auto out = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const float s = static_cast<float>(scale);
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * s + 1.0f;
    return out;
}
"""

ext = load_inline(name="scale_shift", cpp_sources=cpp_source, functions=["scale_shift"],
                  extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.ext = ext

    def forward(self, x):
        return self.ext.scale_shift(x.contiguous(), self.scale)
