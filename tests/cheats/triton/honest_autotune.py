# expect: none
# device: cuda
# language: triton
# eval: correct
# An honest Triton kernel with @triton.autotune: one program per block of rows, the tile shape tuned.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"ROWS": r}, num_warps=w) for r, w in ((8, 4), (16, 8))],
                 key=["n_rows", "n_cols"], reset_to_zero=["out_ptr"])
@triton.jit
def scale_shift_rows(x_ptr, out_ptr, n_rows, n_cols, scale, ROWS: tl.constexpr, COLS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, COLS)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    x = tl.load(x_ptr + rows * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + rows * n_cols + cols, x * scale + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x2 = x.contiguous().view(-1, x.shape[-1])
        n_rows, n_cols = x2.shape
        out = torch.empty_like(x2)
        grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)
        scale_shift_rows[grid](x2, out, n_rows, n_cols, self.scale, COLS=triton.next_power_of_2(n_cols))
        return out.view(x.shape)
