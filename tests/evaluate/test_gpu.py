"""The cuda device on a real GPU: honest kernels pass, tricks are caught, crashes stay contained.

Run by ``scripts/gpu-check`` on the GPU machine; skipped where no GPU is present. The task's
``get_inputs()`` builds CPU tensors (the KernelBench convention): the worker moves inputs and
models to the GPU, and the kernels check that they got CUDA tensors. tests/evaluate/test_gpu_timing.py holds
the tests of the timing itself.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from ..evalfixtures import CHEATS, write_task
from ..gpufixtures import ADD_TASK, gpu_settings, report_row
from ..gpu_tricks import COMPILE_HANG, HONEST, ISOLATION, TRICKS, source
from kevin_agent.checks import run_checks
from kevin_agent.evaluate import LocalEvaluator
from kevin_agent.results import Stage, Status
from kevin_agent.task import load_task

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@contextmanager
def evaluator_for(task, settings):
    """An evaluator closed however the test ends: one left open keeps its warm workers (a CUDA
    context and the reference's data each) for the tests after it."""
    evaluator = LocalEvaluator(task, settings)
    try:
        yield evaluator
    finally:
        evaluator.close()


@pytest.fixture(scope="module")
def tricks_results(add_task, tricks_dir):
    with evaluator_for(add_task, gpu_settings()) as evaluator:
        evaluator.probe()
        sources = [source(HONEST, tricks_dir)] + [source(t, tricks_dir) for t in TRICKS]
        yield evaluator, dict(zip([HONEST.name] + [t.name for t in TRICKS], evaluator.evaluate(sources)))


def test_probe_moves_cpu_inputs_to_the_gpu(add_task, tricks_results):
    evaluator, _ = tricks_results
    assert "NVIDIA" in evaluator.device_name and evaluator.versions().get("cuda")
    assert evaluator.versions().get("arch"), evaluator.versions()
    assert add_task.probe.inputs[0].shape == [1 << 22]


def test_honest_prebuilt_kernel_passes_every_guard(tricks_results):
    res = tricks_results[1][HONEST.name]
    report_row("honest", HONEST.name, res)
    assert res.status is Status.CORRECT, res.error
    assert res.trials_passed == 5 and res.max_abs_err is not None and res.max_abs_err <= 1e-5
    assert res.runtime.runs == 20 and res.speedup and res.speedup > 0.3


def test_the_gpu_peak_is_the_allocators_and_stays_within_the_plan(tricks_results):
    evaluator, results = tricks_results
    use = results[HONEST.name].memory
    assert use is not None and use.measured == "cuda allocator"
    assert use.footprint_bytes == evaluator.footprint.total
    fp = evaluator.footprint
    assert fp.input_bytes + fp.output_bytes <= use.peak_allocated_bytes <= use.peak_reserved_bytes
    assert use.peak_reserved_bytes <= use.planned_bytes


def test_poisoning_grows_the_allocator_by_at_most_half_of_what_is_free():
    import torch

    from kevin_agent.evaluate.worker.correctness import poison_free_blocks

    free, _ = torch.cuda.mem_get_info()
    before = torch.cuda.memory_reserved()
    try:
        poison_free_blocks("cuda", 10 * free)  # asked for more than the device has
        grown = torch.cuda.memory_reserved() - before
    finally:
        torch.cuda.empty_cache()  # half the GPU, held by this process, would starve the tests after it
    assert 0 < grown <= free // 2 + (20 << 20)


@pytest.mark.parametrize("trick", TRICKS, ids=lambda t: t.name.replace(" ", "-"))
def test_trick_is_caught_at_run_time(trick, tricks_results):
    res = tricks_results[1][trick.name]
    static = ""
    if trick.static_twin:
        twin = CHEATS / f"{trick.static_twin}.py"
        meta = twin.read_text().splitlines()[1].split(":", 1)[1].strip()
        check = run_checks(twin.read_text(), meta)
        static = ",".join(sorted({v.rule for v in check.violations})) or "passes"
    report_row("trick", trick.name, res, static)
    assert res.status.value == trick.status, (res.status, res.error)
    assert trick.reason in res.error, res.error


def test_crashes_and_hangs_cost_one_candidate_each(add_task, tricks_dir):
    honest = source(HONEST, tricks_dir)
    sources, names = [], []
    for t in ISOLATION:
        sources += [source(t, tricks_dir), honest]
        names += [t.name, f"honest after {t.name}"]
    with evaluator_for(add_task, gpu_settings(run_timeout_s=300)) as evaluator:
        results = evaluator.evaluate(sources)
    failures = []
    for t, name, res, after in zip(ISOLATION, names[::2], results[::2], results[1::2]):
        report_row("isolation", name, res)
        if res.status.value != t.status or t.reason not in res.error:
            failures.append(f"{name}: {res.status.value}: {res.error[:300]}")
        if res.status is Status.TIMEOUT and not ("stage_floor_s" in res.error and res.stage_s.device < 30):
            failures.append(f"{name}: not killed at the limit derived from the reference: {res.error[:300]}, "
                            f"{res.stage_s}")
        if after.status is not Status.CORRECT:
            failures.append(f"honest after {name}: {after.status.value}: {after.error[:300]}")
    assert not failures, "\n".join(failures)


def test_compile_that_hangs_is_killed_and_the_next_candidate_runs(add_task, tricks_dir, tmp_path):
    with evaluator_for(add_task, gpu_settings(compile_timeout_s=25, cache_dir=tmp_path / "b")) as evaluator:
        hang, after = evaluator.evaluate([COMPILE_HANG, source(HONEST, tricks_dir)])
    report_row("isolation", "compile that hangs", hang)
    assert hang.status is Status.TIMEOUT and hang.stage is Stage.COMPILE, hang.error
    assert "compile timed out" in hang.error
    assert after.status is Status.CORRECT, after.error


def test_honest_load_inline_kernel_compiles_verifies_and_pays_for_its_synchronisation(add_task):
    """The real path: a cold load_inline build, 100 timed runs, torch.compile compared. The kernel
    is the plain one-thread-per-element add, and its forward calls torch.cuda.synchronize(): the
    host waits on the GPU inside the call, no lead gets the call queued whole, and each timed run
    is counted as such and carries the wait (on the H200: 0.038 ms against eager's 0.014, where the
    same kernel without the synchronisation reads 0.016)."""
    honest = (CHEATS / "honest_cuda.py").read_text()
    with evaluator_for(add_task, gpu_settings(compare_compile=True, warmup_runs=10, timed_runs=100,
                                              run_timeout_s=300)) as evaluator:
        (res,) = evaluator.evaluate([honest])
    report_row("honest", "honest_cuda.py (load_inline)", res)
    assert res.status is Status.CORRECT, res.error
    assert res.runtime.runs == 100 and res.reference.runs == 100 and res.compiled_reference is not None
    assert res.runtime.host_waits == res.runtime.runs and res.reference.host_waits == 0
    assert res.speedup_vs_compile is not None and 0.1 < res.speedup < 1.0
    assert res.compile_s is not None
    assert not res.implausible and not [f for f in res.flags if "implausible" in f], res.flags
    assert res.floor is not None and 0 < res.floor.floor_ms < res.runtime.median_ms


SLOW_ADD_TASK = ADD_TASK.replace("        return a + b", """        out = a + b
        for _ in range(60):
            out = out * 1.0
        return out""")


def test_a_large_speedup_that_physics_allows_is_reported_as_it_is(tmp_path, tricks_dir):
    """A reference that wastes 60 launches makes an honest add far faster than it: no flag."""
    task = load_task(write_task(tmp_path, SLOW_ADD_TASK, "slow_add.py"))
    with evaluator_for(task, gpu_settings()) as evaluator:
        evaluator.probe()
        (res,) = evaluator.evaluate([source(HONEST, tricks_dir)])
    report_row("flag", "large speedup, physically plausible", res)
    assert res.status is Status.CORRECT, res.error
    assert res.speedup > 10 and not res.implausible and not res.flags, (res.speedup, res.flags)
    assert res.floor.floor_ms < res.runtime.median_ms
