# expect: none
# device: cpu
# language: triton
# eval: incorrect
# Runs its kernel on the first call only and hands back that output ever after: the trials' fresh
# inputs get the first call's answer.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.out = None

    def forward(self, x):
        if self.out is None:
            self.out = torch.empty_like(x)
            n = x.numel()
            scale_shift_kernel[(triton.cdiv(n, 4096),)](x, self.out, n, self.scale, BLOCK=4096)
        return self.out.clone()
