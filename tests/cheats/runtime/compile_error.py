# eval: compile_error
# A C++ type error: the compiler's message must reach the result.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor scale_shift(torch::Tensor x, double scale) {
    float* dst = x;  // no conversion from Tensor to float*
    return x;
}
"""

ext = load_inline(name="scale_shift_bad", cpp_sources=cpp_source, functions=["scale_shift"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.scale_shift(x, self.scale)
