# expect: uses-triton
# device: cpu
# language: triton
# A C++ load_inline answer given where Triton was asked for: refused before it is built.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor scale_shift(torch::Tensor x, double s) {
    auto out = torch::empty_like(x);
    auto* xp = x.data_ptr<float>();
    auto* op = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) op[i] = xp[i] * s + 1.0;
    return out;
}
"""
ext = load_inline(name="scale_shift_cpp", cpp_sources=src, functions=["scale_shift"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.scale_shift(x, self.scale)
