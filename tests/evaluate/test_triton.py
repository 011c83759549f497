"""--language triton through the evaluator, for real: worker processes, Triton's JIT (its interpreter
on the cpu device), the same trials, audit and re-check as for CUDA.

Each file of tests/cheats/triton says what the static checks (``expect``) and the evaluation
(``eval``) make of it. The cpu cases run everywhere through Triton's interpreter; the cuda ones
(marked ``gpu``) run the same files compiled on the GPU, in the GPU suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..evalfixtures import TASK_SOURCE, write_task
from ..gpufixtures import gpu_settings
from kevin_agent.evaluate import EvalSettings, LocalEvaluator
from kevin_agent.evaluate.worker.first_call import INTERPRETER_FLAG
from kevin_agent.registry import build_registry
from kevin_agent.results import Stage, Status
from kevin_agent.task import load_task

pytest.importorskip("triton")

TRITON = Path(__file__).parents[1] / "cheats" / "triton"


def meta(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {k.strip(): v.strip() for k, v in (line[2:].split(":", 1) for line in lines[:6]
                                              if line.startswith("# ") and ":" in line)}


FILES = sorted(TRITON.glob("*.py"))
STATIC = {p.stem: meta(p)["expect"] for p in FILES if meta(p)["expect"] != "none"}
EVALUATED = {p.stem: meta(p)["eval"] for p in FILES if "eval" in meta(p)}
HONEST = sorted(name for name, verdict in EVALUATED.items() if verdict == "correct")
SOURCE = {p.stem: p.read_text(encoding="utf-8") for p in FILES}
# A kernel Triton cannot compile (tl.arange needs compile-time bounds), and a forward that fails in
# its own Python before any kernel: the first call fails at the compile stage either way.
NOT_COMPILING = SOURCE["honest_flat"].replace("tl.arange(0, BLOCK)", "tl.arange(0, n_elements)")
FAILING_FORWARD = SOURCE["honest_flat"].replace("        x = x.contiguous()\n", "        x = x.contiguous().T\n"
                                                "        x = x.view(-1)\n")


def settings_for(device: str, root: Path) -> EvalSettings:
    if device == "cuda":
        return gpu_settings(language="triton")
    return EvalSettings(device="cpu", language="triton", cache_dir=root / "builds", warmup_runs=1, timed_runs=3,
                        correctness_trials=3, run_timeout_s=240, eval_workers=2)


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.slow])])
def verdicts(request, tmp_path_factory):
    device = request.param
    root = tmp_path_factory.mktemp(f"triton-{device}")
    task = load_task(write_task(root / "task", TASK_SOURCE))
    registry = build_registry()
    checks = {name: registry.check(source, device, language="triton") for name, source in SOURCE.items()}
    evaluator = LocalEvaluator(task, settings_for(device, root))
    try:
        evaluator.probe()
        # Every file with an ``eval`` verdict is evaluated, whatever the checks say: the run-time
        # guards must stand on their own.
        names = sorted(EVALUATED) + ["not_compiling", "failing_forward"]
        sources = [SOURCE[n] for n in sorted(EVALUATED)] + [NOT_COMPILING, FAILING_FORWARD]
        results = dict(zip(names, evaluator.evaluate(sources)))
    finally:
        evaluator.close()
    return device, checks, results


@pytest.mark.parametrize("name", sorted(STATIC))
def test_each_triton_cheat_is_refused_by_its_rule(verdicts, name):
    _, checks, _ = verdicts
    assert not checks[name].passed
    assert STATIC[name] in {v.rule for v in checks[name].violations}, checks[name].summary()


def test_five_rules_have_a_triton_cheat():
    assert len(set(STATIC.values())) >= 5
    assert {"no-torch-compute", "no-timers", "no-streams", "no-autotune-hooks", "uses-triton"} <= set(STATIC.values())


@pytest.mark.parametrize("name", HONEST)
def test_honest_triton_kernels_pass_the_checks_and_are_verified_and_timed(verdicts, name):
    device, checks, results = verdicts
    assert checks[name].passed, checks[name].summary()
    res = results[name]
    assert res.status is Status.CORRECT, res.error
    assert res.trials_passed == res.trials and res.trials >= 3
    assert res.max_abs_err is not None and res.max_abs_err <= 1e-5
    assert res.runtime.runs == (3 if device == "cpu" else 20) and res.reference.runs == res.runtime.runs
    # The first call compiled (and tuned) the kernels, a stage of its own before the trials.
    assert res.stage_s.compile > 0
    assert "Triton compiles each kernel at its first launch" in res.compile_log
    assert (INTERPRETER_FLAG in res.flags) is (device == "cpu")


def test_run_time_guards_catch_the_triton_cheats_the_checks_would(verdicts):
    _, _, results = verdicts
    for name, verdict in EVALUATED.items():
        assert results[name].status.value == verdict, (name, results[name].error)
    assert "aten::add" in results["torch_fallback"].error
    assert "aten::mul" in results["autotune_hook"].error  # the hook ran PyTorch inside forward
    # Its answer is the first call's (the compile stage's inputs): trial 1 already differs.
    assert "trial 1 of" in results["stale_output"].error and "differ beyond" in results["stale_output"].error


def test_a_kernel_triton_cannot_compile_fails_at_the_first_call_as_a_compile_error(verdicts):
    _, _, results = verdicts
    res = results["not_compiling"]
    assert res.status is Status.COMPILE_ERROR and res.stage is Stage.COMPILE
    assert "first call, which compiles the Triton kernels" in res.error and "arange" in res.error
    forward = results["failing_forward"]
    assert forward.status is Status.RUNTIME_ERROR and forward.stage is Stage.COMPILE
    assert "view" in forward.error


def test_the_build_is_the_source_written_into_kevin_opts_cache(verdicts, tmp_path):
    device, _, _ = verdicts
    settings = settings_for(device, tmp_path)
    from kevin_agent.evaluate.toolchain import triton_build

    key = triton_build.build_key(SOURCE["honest_flat"], device)
    assert key.startswith("triton-") and key != triton_build.build_key(SOURCE["honest_flat"] + "\n", device)
    env = triton_build.worker_env(settings.cache_dir, device)
    assert env["TRITON_CACHE_DIR"] == str(settings.cache_dir / "triton")
    assert ("TRITON_INTERPRET" in env) is (device == "cpu")
