# expect: none
# device: cpu
# An honest C++ candidate in the shape Kevin writes for the cpu device.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F  # imported but unused: allowed
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor scale_shift(torch::Tensor x, double a, double b) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) dst[i] = src[i] * a + b;
    return out;
}
"""

ext = load_inline(name="scale_shift_ext", cpp_sources=cpp_source, functions=["scale_shift"])


class ModelNew(nn.Module):
    def __init__(self, features: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(features, features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.ext = ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[0], x.size(1)
        x = x.contiguous().view(n, c)
        assert x.is_contiguous() and x.dim() == 2 and x.numel() > 0
        return self.ext.scale_shift(x, 2.0, 1.0).reshape(n, c)
