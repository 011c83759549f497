# expect: none
# device: cpu
# Ordinary Python bookkeeping around a kernel: sets, lists, dicts and strings whose methods share
# names with tensor ops (add, sort), a lazily built extension, and kernels named like torch ops.
import collections

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor add(torch::Tensor x, double a) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) dst[i] = src[i] + a;
    return out;
}
torch::Tensor sort(torch::Tensor x) { return x; }
"""

_ext = None
KERNELS = ["add", "sort"]
KERNELS.sort()


def get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name="bookkeeping_ext", cpp_sources=cpp_source, functions=KERNELS)
    return _ext


def describe(shape) -> str:
    parts = [str(d) for d in shape]
    parts.sort(key=len)
    return "x".join(parts)


class ModelNew(nn.Module):
    def __init__(self, offset: float = 1.0):
        super().__init__()
        self.offset = offset
        self.seen = set()
        self.seen.add("init")
        self.order = [3, 1, 2]
        self.order.sort()
        self.calls = collections.Counter()
        self.names = {"add": 0, "sort": 1}
        for name, index in self.names.items():
            self.calls[name] += index
        self.ext = get_ext()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape
        key = (n, c, str(x.dtype))
        if key not in self.seen:
            self.seen.add(key)
        history = []
        history.append(describe(x.shape))
        history.sort()
        dims = sorted([x.dim(), 2, 1])
        dims.sort(reverse=True)
        tags = {d for d in range(len(dims))}
        tags.add(len(history))
        label = ", ".join(sorted(history)) + "; " + "-".join(str(t) for t in tags)
        assert label and self.order == [1, 2, 3]
        total = 0
        for i, d in enumerate(dims):
            total += i * d
        self.calls.update(["forward"])
        out = self.ext.add(x, self.offset)
        return get_ext().sort(out) if total >= 0 else out
