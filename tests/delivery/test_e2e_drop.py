"""Which of several kernels the whole model's measurement drops, on synthetic measurements (the
workers' timing is test_model_multi's): a kernel its own task verified faster is dropped on speed
only where two measurements in fresh workers running both find the model faster without it (a CI
run dropped a faster kernel on one busy moment); a kernel that changes the outputs goes at once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kevin_agent.config import EvalSettings
from kevin_agent.delivery import e2e
from kevin_agent.model.jobs import E2EKernelRun, E2ERun

KERNELS = [Path("norm_kevin.py"), Path("act_kevin.py")]


def _run(*contributions: float, act_alone_match: bool = True) -> E2ERun:
    """One worker with the kernels: each kernel's ratio (the model without it over with all) the
    same in five rounds."""
    kernels = [E2EKernelRun(kernel_calls=3, ratios=[c] * 5, contribution=c) for c in contributions]
    if len(kernels) > 1:
        kernels[1].alone_match = act_alone_match
        kernels[1].alone_mismatch = "" if act_alone_match else "output differs (max abs difference 0.5)"
    return E2ERun(forward_ms=1.0, plain_ms=1.2, speedup=1.2, ratios=[1.2] * 5, kernels=kernels)


def _measure(monkeypatch, measurements: list[list[E2ERun]]):
    """``e2e.measure`` of the two kernels, each measurement's workers given in turn; the kernels
    each measurement was asked for."""
    asked = []
    left = iter(measurements)

    def rounds(model_file, jobs, settings, rounds, limit):
        asked.append([j.stem for j in jobs])
        return [E2ERun(forward_ms=1.2)] * 2, next(left)

    monkeypatch.setattr(e2e, "_rounds", rounds)
    monkeypatch.setattr(e2e, "_envelope", lambda k, s: SimpleNamespace(paths=[f"layers.{k.stem}"]))
    monkeypatch.setattr(e2e, "build_kernel", lambda k, s: Path("/nowhere"))
    monkeypatch.setattr(e2e, "read_claim", lambda k: SimpleNamespace(speedup=2.0))
    result = e2e.measure(SimpleNamespace(given="model.py", path=Path("model.py")), KERNELS,
                         EvalSettings(device="cpu", compare_compile=False), profile=None)
    return result, asked


def test_one_slower_measurement_drops_nothing_a_second_one_does_not_confirm(monkeypatch):
    result, asked = _measure(monkeypatch, [[_run(1.2, 0.9), _run(1.2, 0.9)], [_run(1.2, 1.01), _run(1.2, 0.99)]])
    assert asked == [["norm_kevin", "act_kevin"]] * 2
    assert not any(k.dropped for k in result.kernels)
    assert result.kernel_file == "norm_kevin.py, act_kevin.py"


def test_a_kernel_two_measurements_find_slower_is_dropped_with_both_numbers(monkeypatch):
    result, asked = _measure(monkeypatch, [[_run(1.2, 0.9), _run(1.2, 0.9)], [_run(1.2, 0.8), _run(1.2, 0.8)],
                                           [_run(1.2), _run(1.2)]])
    # twice with both, then the one kept measured again alone
    assert asked == [["norm_kevin", "act_kevin"]] * 2 + [["norm_kevin"]]
    act = result.kernels[1]
    assert act.dropped == "the whole model is faster without it (0.80x with it; 0.90x in the measurement before)"
    assert result.kernel_file == "norm_kevin.py"


def test_a_kernel_that_changes_the_outputs_is_dropped_at_once(monkeypatch):
    result, asked = _measure(monkeypatch, [[_run(1.2, 1.1, act_alone_match=False)] * 2, [_run(1.2), _run(1.2)]])
    assert asked == [["norm_kevin", "act_kevin"], ["norm_kevin"]]
    assert result.kernels[1].dropped.startswith("the model's outputs differ with it alone")
