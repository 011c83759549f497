"""The evaluator on the cpu device, for real: worker processes, gcc builds, timeouts, cheats."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..evalfixtures import (  # noqa: F401  (fixtures)
    TASK_SOURCE, cpp_batch, cpu_evaluator, cpu_settings, eval_root, python_batch, runtime_source,
    scale_task, write_task,
)
from kevin_agent.config import RunConfig
from kevin_agent.errors import EnvironmentUnavailable, TaskError
from kevin_agent.evaluate import memory
from kevin_agent.evaluate import EvalSettings, LocalEvaluator, detect_device
from kevin_agent.evaluate.parent.logs import trim_compile_error
from kevin_agent.workers import scrubbed_env
from kevin_agent.results import Stage, Status
from kevin_agent.task import load_task

HAS_GPU = detect_device() == "cuda"


# --- settings, environment, device ------------------------------------------------------
def test_settings_from_config_fill_device_defaults(tmp_path):
    cfg = RunConfig(correctness_trials=3, atol=1e-3, parallel_compiles=2)
    cpu = cfg.eval_settings("cpu")
    assert (cpu.warmup_runs, cpu.timed_runs, cpu.compare_compile) == (3, 20, False)
    assert (cpu.correctness_trials, cpu.atol, cpu.rtol, cpu.parallel_compiles) == (3, 1e-3, None, 2)
    cuda = cfg.eval_settings("cuda")
    assert (cuda.warmup_runs, cuda.timed_runs, cuda.compare_compile) == (10, 100, True)


def test_cache_dir_follows_kevin_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KEVIN_CACHE_DIR", str(tmp_path / "c"))
    assert EvalSettings(device="cpu").cache_dir == tmp_path / "c"
    assert RunConfig().eval_settings("cpu").cache_dir == tmp_path / "c"
    assert RunConfig(cache_dir=tmp_path / "d").eval_settings("cpu").cache_dir == tmp_path / "d"


def test_scrubbed_env_drops_credentials_and_keeps_the_toolchain():
    env = scrubbed_env({"TORCH_EXTENSIONS_DIR": "/b"}, environ={
        "PATH": "/usr/bin", "HOME": "/root", "CUDA_HOME": "/usr/local/cuda", "CXX": "g++",
        "LD_LIBRARY_PATH": "/l", "TORCH_CUDA_ARCH_LIST": "9.0", "OPENAI_API_KEY": "s", "KEVIN_API_KEY": "s",
        "HF_TOKEN": "s", "GITHUB_TOKEN": "s", "DB_PASSWORD": "s", "MY_SECRET": "s", "AWS_ACCESS_KEY_ID": "s",
    })
    assert {"PATH", "HOME", "CUDA_HOME", "CXX", "LD_LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST"} <= set(env)
    assert env["TORCH_EXTENSIONS_DIR"] == "/b"
    assert not [k for k in env if k not in ("PYTHONPATH",) and ("KEY" in k or "TOKEN" in k or "SECRET" in k
                                                                or "PASSWORD" in k or k.startswith("HF_"))]


def test_every_worker_keeps_the_same_freed_memory_unless_the_person_set_it():
    env = scrubbed_env(environ={"PATH": "/usr/bin"})
    assert env["MALLOC_TRIM_THRESHOLD_"] == env["MALLOC_MMAP_THRESHOLD_"] == str(256 << 20)
    mine = scrubbed_env(environ={"PATH": "/usr/bin", "MALLOC_TRIM_THRESHOLD_": "0"})
    assert mine["MALLOC_TRIM_THRESHOLD_"] == "0"


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_no_gpu_means_cpu_and_cuda_is_refused(tmp_path):
    assert detect_device() == "cpu"
    task = load_task(write_task(tmp_path))
    with pytest.raises(EnvironmentUnavailable) as err:
        LocalEvaluator(task, EvalSettings(device="cuda", cache_dir=tmp_path / "b")).probe()
    assert err.value.exit_code == 3


def test_trim_compile_error_keeps_the_errors_not_the_commands():
    log = "\n".join(["[1/2] c++ -MMD -I/very/long " + "-isystem x " * 200 + "main.cpp"] + ["noise"] * 50 + [
        "/b/k/main.cpp: In function 'f':", "/b/k/main.cpp:5:18: error: cannot convert 'Tensor'",
        "    5 |   float* p = x;", "      |              ^", "ninja: build stopped"])
    text = trim_compile_error(log, "/b")
    assert text.startswith("k/main.cpp:5:18: error: cannot convert") and "-isystem" not in text
    assert len(text) < 500


# --- the task probe -----------------------------------------------------------------------
def test_probe_reports_shapes_and_device(scale_task, cpu_evaluator):
    probe = scale_task.probe
    assert probe is not None
    assert probe.inputs[0].shape == [128, 512] and probe.inputs[0].dtype == "float32"
    assert probe.outputs[0].shape == [128, 512] and probe.init_inputs == ["2.0"]
    assert cpu_evaluator.device_name
    versions = cpu_evaluator.versions()
    assert versions["torch"] and versions["python"] and versions["compiler"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("return [torch.randn(128, 512)]", "raise ValueError('no data here')", "get_inputs() raised"),
        ("return [torch.randn(128, 512)]", "return torch.randn(3)", "must return a list"),
        ("return x * self.scale + 1.0", "return x @ torch.ones(3, 3)", "running Model failed"),
        ("import torch\n", "import torch\nimport not_a_module_anywhere\n", "importing the task failed"),
    ],
)
def test_bad_task_is_a_task_error_naming_the_file(tmp_path, old, new, expected):
    path = write_task(tmp_path, TASK_SOURCE.replace(old, new))
    evaluator = LocalEvaluator(load_task(path), EvalSettings(device="cpu", cache_dir=tmp_path / "b"))
    with pytest.raises(TaskError) as err:
        evaluator.probe()
    assert str(path) in err.value.message and expected in err.value.message
    assert err.value.exit_code == 2


def test_the_tool_process_imports_neither_torch_nor_the_candidate(tmp_path):
    """Run a whole evaluation from a fresh interpreter; secrets in its environment stay there."""
    task = write_task(tmp_path)
    cand = tmp_path / "cand.py"
    cand.write_text(runtime_source("honest_python"))
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from kevin_agent.evaluate import EvalSettings, LocalEvaluator\nfrom kevin_agent.task import load_task\n"
        f"ev = LocalEvaluator(load_task({str(task)!r}), EvalSettings(device='cpu', timed_runs=3, op_audit=False, "
        f"cache_dir=Path({str(tmp_path / 'b')!r})))\n"
        f"ev.probe()\nr = ev.evaluate([Path({str(cand)!r}).read_text()])[0]\n"
        "print(r.status.value, 'torch' in sys.modules, 'kevin_candidate' in sys.modules, r.error)\n"
    )
    env = {**os.environ, "OPENAI_API_KEY": "sk-x", "KEVIN_API_KEY": "k", "HF_TOKEN": "h"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:3] == ["correct", "False", "False"], out.stdout


# --- real C++ builds ----------------------------------------------------------------------
@pytest.mark.slow
def test_honest_cpp_kernel_is_correct_and_timed(cpp_batch):
    results, stages, _ = cpp_batch
    res = results["honest_cpp"]
    assert res.status is Status.CORRECT and res.correct and res.stage is Stage.DONE, res.error
    assert (res.trials, res.trials_passed) == (5, 5)
    assert res.max_abs_err is not None and res.max_abs_err <= 1e-4 and res.atol == 1e-4
    assert res.runtime.runs == 10 and res.reference.runs == 10
    assert res.runtime.min_ms <= res.runtime.p10_ms <= res.runtime.median_ms <= res.runtime.p90_ms <= res.runtime.max_ms
    # The median of the rounds' ratios, both timed in each round: near the ratio of the medians.
    assert res.speedup == pytest.approx(res.reference.median_ms / res.runtime.median_ms, rel=0.25)
    assert res.speedup > 0 and res.compile_s > 1 and not res.cached_build
    assert "scale_shift" in res.compile_log and "c++" in res.compile_log
    assert res.device == "cpu" and res.device_name
    # Stages arrive in order for this candidate (index 2).
    assert [s for i, s in stages if i == 2] == ["compile", "load", "correctness", "timing", "done"]


@pytest.mark.slow
def test_compiler_output_arrives_while_the_build_runs(cpp_batch):
    results, _, (submitted, output) = cpp_batch
    res = results["compile_error"]
    mine = [(t, text) for t, i, text in output if i == 0]
    assert mine and "".join(text for _, text in mine).strip() in res.compile_log
    # The first lines (the build's own announcement) come long before the compiler gives up.
    assert mine[0][0] - submitted < res.compile_s / 2, (mine[0][0] - submitted, res.compile_s)
    assert "cannot convert" in "".join(text for _, text in mine)


@pytest.mark.slow
def test_compile_error_carries_the_gcc_message(cpp_batch):
    res = cpp_batch[0]["compile_error"]
    assert res.status is Status.COMPILE_ERROR and res.stage is Stage.COMPILE
    assert "error: cannot convert" in res.error and "main.cpp:5" in res.error
    assert len(res.error) < 3000
    assert "cannot convert" in res.compile_log and "-isystem" in res.compile_log


@pytest.mark.slow
def test_segfault_costs_only_that_candidate(cpp_batch):
    results, _, _ = cpp_batch
    res = results["segfault_cpp"]
    assert res.status is Status.RUNTIME_ERROR and res.stage is Stage.CORRECTNESS
    assert "SIGSEGV" in res.error
    # Evaluated after the crash, in fresh workers.
    assert results["honest_cpp"].status is Status.CORRECT
    assert results["honest_cpp_again"].status is Status.CORRECT


@pytest.mark.slow
def test_identical_source_hits_the_build_cache(cpp_batch, cpu_evaluator):
    first = cpp_batch[0]["honest_cpp"]
    # The duplicate in the same call shared the one build.
    assert cpp_batch[0]["honest_cpp_again"].compile_s == first.compile_s
    start = time.monotonic()
    (again,) = cpu_evaluator.evaluate([runtime_source("honest_cpp")])
    assert again.status is Status.CORRECT, again.error
    assert again.cached_build and again.compile_s == 0.0
    assert again.wall_s < first.wall_s and time.monotonic() - start < first.compile_s


@pytest.mark.slow
def test_a_build_ninja_would_redo_is_not_taken_from_the_cache(cpp_batch, cpu_settings):
    """A stale build (a source newer than its object, another ninja's log) is rebuilt as a build,
    never in the worker that loads it, where it would run into the load stage's limit."""
    from kevin_agent.evaluate.toolchain import cache

    folder = cpu_settings.cache_dir / cache.build_key(runtime_source("honest_cpp"), "cpu")
    assert cache.is_built(folder) and cache.up_to_date(folder)
    source = next(folder.glob("*/main.cpp"))
    stat = source.stat()
    os.utime(source, (stat.st_atime, stat.st_mtime + 3600))
    try:
        assert not cache.up_to_date(folder)
    finally:
        os.utime(source, (stat.st_atime, stat.st_mtime))
    assert cache.up_to_date(folder)


# --- run-time cheats ----------------------------------------------------------------------
def test_honest_python_candidate_is_correct(python_batch):
    assert python_batch["honest_python"].status is Status.CORRECT, python_batch["honest_python"].error


def test_a_candidate_that_prints_or_writes_on_the_workers_pipe_is_judged_by_what_it_computes(python_batch):
    res = python_batch["garbles_the_pipe"]
    assert res.status is Status.CORRECT and res.stage is Stage.DONE, res.error


def test_a_candidate_that_dies_in_the_middle_of_a_message_failed_at_runtime(python_batch):
    res = python_batch["dies_mid_message"]
    assert res.status is Status.RUNTIME_ERROR and res.stage is Stage.CORRECTNESS
    assert "the worker died with SIGABRT during correctness" in res.error
    assert "an unfinished line" in res.error


def test_the_evaluations_peak_memory_is_reported_against_the_tasks_footprint(python_batch, cpu_evaluator):
    fp = cpu_evaluator.footprint
    # The scale task: one 128 x 512 float32 input, an output of the same size, no parameters.
    assert (fp.param_bytes, fp.input_bytes, fp.output_bytes) == (0, 128 * 512 * 4, 128 * 512 * 4)
    use = python_batch["honest_python"].memory
    assert use is not None and use.measured == "host resident memory"
    assert use.footprint_bytes == fp.total and use.planned_bytes == memory.planned(fp)
    # The copies of inputs and outputs at least, and far less than a copy of every set of inputs at once.
    assert 2 * fp.input_bytes <= use.peak_reserved_bytes < use.planned_bytes


def test_wrong_values_are_incorrect_with_the_error_size(python_batch):
    res = python_batch["wrong_values"]
    assert res.status is Status.INCORRECT and res.stage is Stage.CORRECTNESS
    assert res.max_abs_err == pytest.approx(0.01, rel=1e-3)
    assert "differ beyond atol=0.0001" in res.error and "trial 1 of 5" in res.error
    assert res.trials_passed == 0


def test_output_never_written_is_incorrect(python_batch):
    res = python_batch["never_written"]
    assert res.status is Status.INCORRECT and "got nan" in res.error


def test_input_modified_in_place_is_rejected(python_batch):
    res = python_batch["modifies_input"]
    assert res.status is Status.INCORRECT and "modified input 0 in place" in res.error


def test_output_cached_across_calls_is_incorrect(python_batch):
    res = python_batch["cached_output"]
    assert res.status is Status.INCORRECT and "trial 2 of 5" in res.error and res.trials_passed == 1


def test_returning_an_input_is_rejected(python_batch):
    res = python_batch["returns_input"]
    assert res.status is Status.INCORRECT and "shares memory with input 0" in res.error


@pytest.mark.parametrize(("name", "status", "reason"), [
    ("torch_compute", Status.CHECK_FAILED, "[no-torch-compute] ModelNew ran PyTorch compute operators: aten::mul"),
    ("try_fallback", Status.CHECK_FAILED, "aten::mul"),
    ("patch_perf_counter", Status.CHECK_FAILED, "[no-monkeypatch] after loading, the candidate had rebound "
                                                "time.perf_counter"),
    ("patch_compare", Status.CHECK_FAILED, "kevin_agent.evaluate.worker.correctness.compare"),
    ("lazy_subclass", Status.INCORRECT, "output is a Lazy, a torch.Tensor subclass"),
    ("late_thread", Status.INCORRECT, "got nan"),
    ("constant_output", Status.INCORRECT, "differ beyond atol"),
])
def test_run_time_guards_catch_what_the_static_checks_would(python_batch, name, status, reason):
    """Evaluated without the static checks: the worker's own guards must still reject these."""
    res = python_batch[name]
    assert res.status is status and reason in res.error, (res.status, res.error)
    assert res.speedup is None


HANG = '''
import subprocess
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        child = subprocess.Popen(["sleep", "600"])
        with open({pidfile!r}, "w") as f:
            f.write(str(child.pid))
        while True:
            x = x + 0
'''

HANG_AT_IMPORT = '''
import torch.nn as nn
while True:
    x = 1


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_hang_times_out_kills_the_group_and_the_next_candidate_runs(tmp_path, scale_task):
    pidfile = tmp_path / "child.pid"
    settings = EvalSettings(device="cpu", cache_dir=tmp_path / "b", run_timeout_s=30, compile_timeout_s=30,
                            timed_runs=3, warmup_runs=1, op_audit=False)
    evaluator = LocalEvaluator(scale_task, settings)
    hang, at_import, honest = evaluator.evaluate(
        [HANG.format(pidfile=str(pidfile)), HANG_AT_IMPORT, runtime_source("honest_python")])
    evaluator.close()
    assert hang.status is Status.TIMEOUT and hang.stage is Stage.CORRECTNESS
    assert "timed out after" in hang.error and "stage_floor_s 10 s" in hang.error
    limit = float(re.search(r"timed out after ([\d.]+) s", hang.error).group(1))
    # Killed at its limit, far nearer it than the run's timeout (30 s).
    assert limit >= 10 and 0.995 * limit <= hang.stage_s.correctness < (limit + settings.run_timeout_s) / 2
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the candidate's child process survived the timeout"
    assert at_import.status is Status.TIMEOUT and at_import.stage is Stage.COMPILE
    assert "compile_timeout_s" in at_import.error
    assert honest.status is Status.CORRECT, honest.error


# --- correctness internals ----------------------------------------------------------------
def test_tolerances_per_dtype_and_overrides():
    torch = pytest.importorskip("torch")
    from kevin_agent.evaluate.worker.correctness import Mismatch, Outcome, compare, tolerance

    assert tolerance(torch.float32, None, None) == (1e-4, 1e-4)
    assert tolerance(torch.float16, None, None) == (1e-2, 1e-2)
    assert tolerance(torch.bfloat16, None, None) == (2e-2, 2e-2)
    assert tolerance(torch.int64, 1.0, 1.0) == (0.0, 0.0)
    assert tolerance(torch.float32, 1e-3, None) == (1e-3, 1e-4)
    ref = torch.tensor([1.0, float("nan"), float("inf")])
    compare(ref.clone(), ref, None, None, Outcome())  # NaN matches NaN, equal infinities match
    half = torch.ones(4, dtype=torch.float16)
    compare(half + 0.005, half, None, None, Outcome())
    for cand, msg in [(torch.ones(3, dtype=torch.float64), "dtype"), (torch.ones(4), "shape"),
                      (torch.tensor([1.0, 0.0, float("inf")]), "differ"), ((ref, ref), "outputs")]:
        with pytest.raises(Mismatch, match=msg):
            compare(cand, ref, None, None, Outcome())
    with pytest.raises(Mismatch):
        compare(torch.tensor([1, 2]), torch.tensor([1, 3]), 10.0, 10.0, Outcome())


def test_the_comparison_reports_the_first_largest_error_and_counts_every_element_beyond_the_tolerance(monkeypatch):
    torch = pytest.importorskip("torch")
    from kevin_agent.evaluate.worker import correctness

    monkeypatch.setitem(correctness.COMPARE_CHUNK, "cpu", 3)  # pieces of three: the errors span pieces
    inf, nan = float("inf"), float("nan")
    ref = torch.tensor([1.0, nan, inf, -inf, 0.0, 2.0, 5.0, 0.0, 1.0, -0.0], dtype=torch.float32)
    cand = torch.tensor([1.0, nan, inf, -inf, 1e-5, 2.5, 5.5, 0.0, nan, 0.0], dtype=torch.float32)
    largest, at, rel, bad = correctness._errors(cand, ref, 1e-4, 1e-4)
    # NaN meets NaN, equal infinities, -0.0 and 0.0, and 1e-5 against 0 (within atol) are no errors;
    # 2.5 and 5.5 are 0.5 off (the first at index 5), NaN against 1.0 is infinitely off.
    assert (largest, at, bad) == (inf, 8, 3) and rel == inf
    largest, at, rel, bad = correctness._errors(cand[:8], ref[:8], 1e-4, 1e-4)
    assert (largest, at, bad) == (0.5, 5, 2)
    assert rel == pytest.approx(0.5 / (2.0 + 1e-4))  # relative to the reference, plus atol
    assert correctness._errors(ref[2:3], -ref[2:3], 1e-4, 1e-4)[::3] == (inf, 1)  # inf against -inf
    ints = torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4])
    assert correctness._errors(*ints, 0.0, 0.0) == (1.0, 2, 0.25, 1)
