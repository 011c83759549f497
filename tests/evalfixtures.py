"""Shared fixtures for the evaluator tests: a tiny task, the cheat files, one build cache.

Compiles are expensive (30-90 s each on a small machine), so the C++ candidates are built
once per test session into one cache folder and every test reads the same results.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kevin_agent.evaluate import EvalSettings, LocalEvaluator
from kevin_agent.task import load_task

CHEATS = Path(__file__).parent / "cheats"
RUNTIME = CHEATS / "runtime"

TASK_SOURCE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale + 1.0


def get_inputs():
    return [torch.randn(128, 512)]


def get_init_inputs():
    return [2.0]
'''


def runtime_source(name: str) -> str:
    return (RUNTIME / f"{name}.py").read_text(encoding="utf-8")


def write_task(folder: Path, source: str = TASK_SOURCE, name: str = "scale_task.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(source, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def eval_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kevin-eval")


@pytest.fixture(scope="session")
def scale_task(eval_root):
    return load_task(write_task(eval_root / "task"))


@pytest.fixture(scope="session")
def cpu_settings(eval_root) -> EvalSettings:
    return EvalSettings(device="cpu", cache_dir=eval_root / "builds", warmup_runs=2, timed_runs=10,
                        run_timeout_s=240, compile_timeout_s=600, parallel_compiles=3)


@pytest.fixture(scope="session")
def cpu_evaluator(scale_task, cpu_settings) -> LocalEvaluator:
    evaluator = LocalEvaluator(scale_task, cpu_settings)
    evaluator.probe()
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="session")
def cpp_batch(cpu_evaluator):
    """compile error, segfault, honest, honest again: submitted together, three real compiles in
    parallel; the stages and the output each candidate reported, with the time they came."""
    names = ["compile_error", "segfault_cpp", "honest_cpp", "honest_cpp"]
    stages: list[tuple[int, str]] = []
    output: list[tuple[float, int, str]] = []
    submitted = time.monotonic()
    futures = [cpu_evaluator.submit(runtime_source(n), on_stage=lambda s, i=i: stages.append((i, s.value)),
                                    on_output=lambda text, i=i: output.append((time.monotonic(), i, text)))
               for i, n in enumerate(names)]
    results = [f.result(timeout=900) for f in futures]
    return (dict(zip(["compile_error", "segfault_cpp", "honest_cpp", "honest_cpp_again"], results)), stages,
            (submitted, output))


RUNTIME_CHEATS = ["wrong_values", "never_written", "modifies_input", "cached_output", "returns_input",
                  "torch_compute", "try_fallback", "patch_perf_counter", "patch_compare", "lazy_subclass",
                  "late_thread", "constant_output"]


@pytest.fixture(scope="session")
def python_batch(cpu_evaluator, scale_task, cpu_settings):
    """Run-time cheats that need no compiler (the evaluator does not rely on the static checks),
    and plain-PyTorch candidates with the operator audit off (it is on by default): the honest one,
    and two that write on the worker's pipe."""
    results = dict(zip(RUNTIME_CHEATS, cpu_evaluator.evaluate([runtime_source(n) for n in RUNTIME_CHEATS])))
    no_audit = LocalEvaluator(scale_task, cpu_settings.model_copy(update={"op_audit": False}))
    plain = ["honest_python", "garbles_the_pipe", "dies_mid_message"]
    results.update(zip(plain, no_audit.evaluate([runtime_source(n) for n in plain])))
    no_audit.close()
    return results
