# expect: none
# device: cpu
# A C++ source assembled from parts (a header constant, an f-string with a block size, a join)
# whose comments mention threads, streams and timers.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 64
HEADER = "#include <torch/extension.h>\n// no std::thread, no cudaStreamCreate, no timers: one plain loop\n"
BODY = f"""
// Blocks of {BLOCK} elements; it's plain C++ (no "cudaStreamCreate", no 'getStreamFromPool').
torch::Tensor double_it(torch::Tensor x) {{
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t start = 0; start < n; start += {BLOCK}) {{
        const int64_t end = start + {BLOCK} < n ? start + {BLOCK} : n;
        for (int64_t i = start; i < end; ++i) dst[i] = 2.0f * src[i];
    }}
    return out;
}}
"""

ext = load_inline(name="double_ext", cpp_sources="\n".join([HEADER, BODY]), functions=["double_it"],
                  extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.double_it(x)
