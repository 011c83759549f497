"""A bf16 model's outputs with a kernel, compared where rounding compounds over layers: beyond any
fixed tolerance in a few elements, yet as close to the model in float32 as the model's own."""

from __future__ import annotations

import torch

from kevin_agent.model.worker import outputs
from kevin_agent.model.worker.loading import LoadedModel
from kevin_agent.model.worker.whole_model import _float32_forward


class Norm(torch.nn.Module):
    def __init__(self, dim: int, exact: bool = False) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.exact = exact

    def forward(self, x):
        if self.exact:  # as a fused kernel computes it: in float32, rounded once at the end
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight.float()).to(x.dtype)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Stack(torch.nn.Module):
    def __init__(self, dim: int = 256, layers: int = 6, exact: bool = False) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(layers))
        self.norms = torch.nn.ModuleList(Norm(dim, exact) for _ in range(layers))

    def forward(self, x):
        for linear, norm in zip(self.layers, self.norms):
            x = x + norm(torch.nn.functional.gelu(linear(x)))
        return {"hidden": x, "steps": len(self.layers)}


def _models():
    torch.manual_seed(0)
    plain = Stack().to(torch.bfloat16).eval()
    fused = Stack(exact=True).to(torch.bfloat16).eval()
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(64, 256).to(torch.bfloat16)
    return plain, fused, x


def test_a_more_exact_kernel_in_bf16_is_within_the_models_own_rounding(tmp_path):
    plain, fused, x = _models()
    loaded = LoadedModel(module=None, model=plain, inputs=[x], path="m.py", device="cpu")
    out = _float32_forward(loaded)
    assert out is not None and out["hidden"].dtype == torch.float32
    # carried to the other worker as the model's outputs are, and read back there
    outputs.save(out, str(tmp_path / "outputs.pt.float32"))
    truth = outputs.load(str(tmp_path / "outputs.pt.float32"))
    with torch.no_grad():
        want = outputs.flatten(plain(x))
        got = fused(x)
    # the two differ beyond the strict bf16 tolerance somewhere, as a real model's do ...
    diff = (got["hidden"].float() - want[0][1].float()).abs()
    assert float(diff.max()) > 0.02
    # ... yet the fused one is no further from float32 than the model itself
    note = outputs.within_rounding(got, want, truth)
    assert "within the model's own bfloat16 rounding" in note and "output.hidden" in note


def test_a_wrong_kernel_is_not_excused_as_rounding():
    plain, fused, x = _models()
    loaded = LoadedModel(module=None, model=plain, inputs=[x], path="m.py", device="cpu")
    truth = outputs.flatten(_float32_forward(loaded))
    with torch.no_grad():
        want = outputs.flatten(plain(x))
        got = fused(x)
    wrong = {"hidden": got["hidden"] + 0.05, "steps": got["steps"]}
    assert outputs.within_rounding(wrong, want, truth) == ""
    other = {"hidden": got["hidden"], "steps": 7}  # a plain value that differs is never rounding
    assert outputs.within_rounding(other, want, truth) == ""


def test_a_float32_model_has_no_second_opinion():
    torch.manual_seed(0)
    model = Stack(layers=1).eval()
    loaded = LoadedModel(module=None, model=model, inputs=[torch.randn(4, 256)], path="m.py", device="cpu")
    assert _float32_forward(loaded) is None
