# expect: no-autotune-hooks
# device: cpu
# language: triton
# eval: check_failed
# The kernel writes nothing: the chosen config's pre_hook, which Triton calls before every launch,
# computes the answer with PyTorch on the kernel's arguments (the run-time audit sees aten::mul).
import torch
import torch.nn as nn
import triton
import triton.language as tl


def fill_answer(nargs):
    nargs["out_ptr"].copy_(nargs["x_ptr"] * nargs["scale"] + 1.0)


@triton.autotune(configs=[triton.Config({"BLOCK": 1024}, pre_hook=fill_answer)], key=["n_elements"])
@triton.jit
def noop_kernel(x_ptr, out_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offsets, mask=offsets < n_elements)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        noop_kernel[grid](x, out, n, self.scale)
        return out
