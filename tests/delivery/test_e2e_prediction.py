"""Amdahl's prediction for kernels installed together, where one kernel's modules lie inside another's:
a norm kernel installed at every norm beside a decoder layer's kernel runs only at the final norm,
since the layers' own norms are inside the layer kernel and never called (measured on the H200: the
prediction counted the nine norms' 15% beside the layers' 98% and said 1.65x for a model measured at
1.35x, where the norms that run make it 1.40x)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kevin_agent.config import EvalSettings
from kevin_agent.delivery.e2e import _result
from kevin_agent.model.jobs import E2ERun
from kevin_agent.model.records import ModelProfile, ModuleProfile
from kevin_agent.results.records import KernelEffect

LAYERS = [f"layers.{i}" for i in range(2)]
INNER_NORMS = [f"{layer}.{norm}" for layer in LAYERS for norm in ("input_layernorm", "post_attention_layernorm")]
SHARES = {"layers.0": 0.48, "layers.1": 0.48, "norm": 0.02, **{p: 0.04 for p in INNER_NORMS}}


def _profile() -> ModelProfile:
    modules = [ModuleProfile.model_construct(path=path, share=share) for path, share in SHARES.items()]
    return ModelProfile.model_construct(modules=modules, device_name="test")


def _effects() -> list[KernelEffect]:
    return [KernelEffect(kernel_file="layers_kevin.py", module="layers.* x2", members=LAYERS, share=0.96,
                         module_speedup=1.4),
            KernelEffect(kernel_file="norm_kevin.py", module="layers.0.input_layernorm x5",
                         members=INNER_NORMS + ["norm"], share=0.18, module_speedup=4.0)]


def _measured(effects: list[KernelEffect]):
    runs = [E2ERun(forward_ms=1.0, speedup=1.3, ratios=[1.3])]
    return _result(SimpleNamespace(given="model.py"), EvalSettings(device="cpu", compare_compile=False),
                   _profile(), effects, effects, runs, runs, rounds=1, wall_s=0.0)


def test_a_kernel_inside_another_kept_one_counts_only_where_it_runs():
    layers, norm = effects = _effects()
    result = _measured(effects)
    # the norms inside the layers never run beside the layer kernel: the final norm's share alone
    assert norm.share == pytest.approx(0.02) and layers.share == pytest.approx(0.96)
    assert result.share == pytest.approx(0.98)
    assert result.predicted == pytest.approx(1 / (1 - 0.98 + 0.96 / 1.4 + 0.02 / 4.0))


def test_alone_a_kernel_counts_every_member():
    _, norm = _effects()
    result = _measured([norm])
    assert result.share == pytest.approx(0.18)
    assert result.predicted == pytest.approx(1 / (1 - 0.18 + 0.18 / 4.0))


def _rounds(*ratios: list[float]):
    effect = KernelEffect(kernel_file="norm_kevin.py", module="norm", members=["norm"], share=0.02, module_speedup=4.0)
    runs = [E2ERun(forward_ms=1.0, speedup=sorted(r)[len(r) // 2], ratios=r) for r in ratios]
    return _result(SimpleNamespace(given="model.py"), EvalSettings(device="cpu", compare_compile=False),
                   _profile(), [effect], [effect], runs, runs, rounds=len(runs), wall_s=0.0)


def test_the_speedup_is_the_median_of_the_interval_it_is_printed_with():
    """Two rounds whose own medians (1.3x and 1.0x: their median 1.15x) lie on either side of where
    most of the pooled ratios are: the speedup said is the pooled median, inside the interval beside it."""
    result = _rounds([1.3] * 21, [0.99] * 19 + [1.0] * 30)
    low, high = result.speedup_interval
    assert result.speedup == 1.0 and low <= result.speedup <= high and not result.slower


def test_slower_only_where_the_whole_interval_is_below_one():
    within_noise = _rounds([0.97, 0.98, 0.99, 1.01, 1.02] * 8)
    assert within_noise.speedup < 1.0 and within_noise.speedup_interval[1] >= 1.0 and not within_noise.slower
    beyond = _rounds([0.90, 0.91, 0.92, 0.93, 0.94] * 8)
    assert beyond.speedup_interval[1] < 1.0 and beyond.slower
