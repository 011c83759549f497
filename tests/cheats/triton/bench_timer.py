# expect: no-timers
# device: cuda
# language: triton
# Times its own block sizes with Triton's benchmark at the first call: timing is the evaluator's.
import torch
import torch.nn as nn
import triton
import triton.language as tl
import triton.testing


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.block = None

    def launch(self, x, out, block):
        n = x.numel()
        scale_shift_kernel[(triton.cdiv(n, block),)](x, out, n, self.scale, BLOCK=block)

    def forward(self, x):
        out = torch.empty_like(x)
        if self.block is None:
            times = {b: triton.testing.do_bench(lambda b=b: self.launch(x, out, b)) for b in (1024, 4096)}
            self.block = min(times, key=times.get)
        self.launch(x, out, self.block)
        return out
