"""The cuda device on a real GPU: honest kernels pass, tricks are caught, crashes stay contained.

Run by ``scripts/gpu-check`` on the GPU machine; skipped where no GPU is present. The task's
``get_inputs()`` builds CPU tensors (the KernelBench convention): the worker moves inputs and
models to the GPU, and the kernels check that they got CUDA tensors. Each candidate's verdict
is also written to ``$GPU_CHECK_REPORT`` (JSON lines) for the script's table.
"""

from __future__ import annotations

import json
import os

import pytest

from .evalfixtures import CHEATS, write_task
from .gpu_tricks import (COMPILE_HANG, CPP_SOURCE, CUDA_SOURCE, EXT_NAME, FUNCTIONS, HONEST, ISOLATION, TRICKS,
                         source)
from kevin_agent.checks import run_checks
from kevin_agent.config import RunConfig
from kevin_agent.evaluate import EvalSettings, LocalEvaluator
from kevin_agent.results import Stage, Status
from kevin_agent.task import load_task

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

ADD_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(1 << 22), torch.randn(1 << 22)]


def get_init_inputs():
    return []
'''


def _report(kind: str, name: str, res, static: str = "") -> None:
    path = os.environ.get("GPU_CHECK_REPORT")
    if not path:
        return
    row = {"kind": kind, "name": name, "status": res.status.value, "static": static,
           "error": (res.error or "").splitlines()[-1][:160] if res.error else "",
           "flags": res.flags, "compile_s": res.compile_s, "cached": res.cached_build,
           "runtime_ms": res.runtime.median_ms if res.runtime else None,
           "reference_ms": res.reference.median_ms if res.reference else None,
           "compiled_ms": res.compiled_reference.median_ms if res.compiled_reference else None,
           "speedup": res.speedup, "speedup_vs_compile": res.speedup_vs_compile,
           "max_abs_err": res.max_abs_err, "max_rel_err": res.max_rel_err, "wall_s": res.wall_s}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def add_task(tmp_path_factory):
    return load_task(write_task(tmp_path_factory.mktemp("gpu-task"), ADD_TASK, "add_task.py"))


@pytest.fixture(scope="module")
def tricks_dir(tmp_path_factory) -> str:
    """The misbehaving kernels, built once (in this process, which never launches them)."""
    from torch.utils.cpp_extension import load_inline

    folder = tmp_path_factory.mktemp("tricks")
    load_inline(name=EXT_NAME, cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=FUNCTIONS,
                build_directory=str(folder), extra_cuda_cflags=["-O3"])
    return str(folder)


def _settings(**kw) -> EvalSettings:
    base = dict(device="cuda", cache_dir=RunConfig().cache_dir, compare_compile=False, warmup_runs=3,
                timed_runs=20, run_timeout_s=60, compile_timeout_s=600, parallel_compiles=8)
    return EvalSettings(**{**base, **kw})


@pytest.fixture(scope="module")
def tricks_results(add_task, tricks_dir):
    evaluator = LocalEvaluator(add_task, _settings())
    evaluator.probe()
    sources = [source(HONEST, tricks_dir)] + [source(t, tricks_dir) for t in TRICKS]
    return evaluator, dict(zip([HONEST.name] + [t.name for t in TRICKS], evaluator.evaluate(sources)))


def test_probe_moves_cpu_inputs_to_the_gpu(add_task, tricks_results):
    evaluator, _ = tricks_results
    assert "NVIDIA" in evaluator.device_name and evaluator.versions().get("cuda")
    assert evaluator.versions().get("arch"), evaluator.versions()
    assert add_task.probe.inputs[0].shape == [1 << 22]


def test_honest_prebuilt_kernel_passes_every_guard(tricks_results):
    res = tricks_results[1][HONEST.name]
    _report("honest", HONEST.name, res)
    assert res.status is Status.CORRECT, res.error
    assert res.trials_passed == 5 and res.max_abs_err is not None and res.max_abs_err <= 1e-5
    assert res.runtime.runs == 20 and res.speedup and res.speedup > 0.3


@pytest.mark.parametrize("trick", TRICKS, ids=lambda t: t.name.replace(" ", "-"))
def test_trick_is_caught_at_run_time(trick, tricks_results):
    res = tricks_results[1][trick.name]
    static = ""
    if trick.static_twin:
        twin = CHEATS / f"{trick.static_twin}.py"
        meta = twin.read_text().splitlines()[1].split(":", 1)[1].strip()
        check = run_checks(twin.read_text(), meta)
        static = ",".join(sorted({v.rule for v in check.violations})) or "passes"
    _report("trick", trick.name, res, static)
    assert res.status.value == trick.status, (res.status, res.error)
    if trick.name == "work on a side stream":
        # The side-stream kernel spins ~2 ms: device-wide synchronisation puts it in the time.
        assert res.runtime.median_ms > 1.0, res.runtime
        assert res.speedup < 1.0
    else:
        assert trick.reason in res.error, res.error


def test_crashes_and_hangs_cost_one_candidate_each(add_task, tricks_dir):
    honest = source(HONEST, tricks_dir)
    sources, names = [], []
    for t in ISOLATION:
        sources += [source(t, tricks_dir), honest]
        names += [t.name, f"honest after {t.name}"]
    evaluator = LocalEvaluator(add_task, _settings(run_timeout_s=20))
    results = evaluator.evaluate(sources)
    failures = []
    for t, name, res, after in zip(ISOLATION, names[::2], results[::2], results[1::2]):
        _report("isolation", name, res)
        if res.status.value != t.status or t.reason not in res.error:
            failures.append(f"{name}: {res.status.value}: {res.error[:300]}")
        if after.status is not Status.CORRECT:
            failures.append(f"honest after {name}: {after.status.value}: {after.error[:300]}")
    assert not failures, "\n".join(failures)


def test_compile_that_hangs_is_killed_and_the_next_candidate_runs(add_task, tricks_dir, tmp_path):
    evaluator = LocalEvaluator(add_task, _settings(compile_timeout_s=25, cache_dir=tmp_path / "b"))
    hang, after = evaluator.evaluate([COMPILE_HANG, source(HONEST, tricks_dir)])
    _report("isolation", "compile that hangs", hang)
    assert hang.status is Status.TIMEOUT and hang.stage is Stage.COMPILE, hang.error
    assert "compile timed out" in hang.error
    assert after.status is Status.CORRECT, after.error


def test_honest_load_inline_kernel_compiles_verifies_and_beats_eager(add_task):
    """The real path: a cold load_inline build, 100 timed runs, torch.compile compared."""
    honest = (CHEATS / "honest_cuda.py").read_text()
    evaluator = LocalEvaluator(add_task, _settings(compare_compile=True, warmup_runs=10, timed_runs=100,
                                                   run_timeout_s=300))
    (res,) = evaluator.evaluate([honest])
    _report("honest", "honest_cuda.py (load_inline)", res)
    assert res.status is Status.CORRECT, res.error
    assert res.runtime.runs == 100 and res.reference.runs == 100 and res.compiled_reference is not None
    assert res.speedup_vs_compile is not None and res.speedup > 0.5
    assert res.compile_s is not None
    assert not [f for f in res.flags if "implausible" in f], res.flags


SLOW_ADD_TASK = ADD_TASK.replace("        return a + b", """        out = a + b
        for _ in range(60):
            out = out * 1.0
        return out""")


def test_implausible_speedup_is_flagged_in_result_and_feedback(tmp_path, tricks_dir):
    """A reference that wastes 60 launches makes an honest add look >10x faster: flagged."""
    from kevin_agent.prompting import feedback_sentence

    task = load_task(write_task(tmp_path, SLOW_ADD_TASK, "slow_add.py"))
    evaluator = LocalEvaluator(task, _settings())
    evaluator.probe()
    (res,) = evaluator.evaluate([source(HONEST, tricks_dir)])
    _report("flag", "speedup above 10x", res)
    assert res.status is Status.CORRECT, res.error
    assert res.speedup > 10 and any("implausible speedup" in f for f in res.flags), res.flags
    assert "implausible speedup" in feedback_sentence(res.status, speedup=res.speedup, flags=res.flags)
