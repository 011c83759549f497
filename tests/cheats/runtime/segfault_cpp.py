# eval: runtime_error
# The kernel writes through a null pointer: the worker dies with SIGSEGV.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor scale_shift(torch::Tensor x, double scale) {
    volatile float* dst = nullptr;
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = 1.0f;
    return x;
}
"""

ext = load_inline(name="scale_shift_crash", cpp_sources=cpp_source, functions=["scale_shift"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.scale_shift(x, self.scale)
