"""Records of a small finished run (two trajectories x three turns), built the way the
engine stores them, for the report, delivery and JUnit tests."""

from __future__ import annotations

from pathlib import Path

from kevin_agent.results import (
    CheckResult,
    EvalResult,
    RunInfo,
    Stage,
    Status,
    TaskRef,
    TimingStats,
    TurnRecord,
    Violation,
)
from kevin_agent.task import Task, load_task

TASK_SOURCE = '''\
import torch
import torch.nn as nn


class MyRelu(nn.Module):
    """The reference: a ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
'''

# A real CPU candidate: C++ through load_inline, the format the CPU device accepts.
KERNEL_SOURCE = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}
"""

relu_ext = load_inline(name="kevin_delivery_relu", cpp_sources=cpp_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x)
'''


def timing(median: float, runs: int = 20) -> TimingStats:
    return TimingStats(
        median_ms=median, mean_ms=median * 1.02, std_ms=median * 0.05, min_ms=median * 0.9,
        max_ms=median * 1.3, p10_ms=median * 0.95, p90_ms=median * 1.1, runs=runs,
    )


def correct(trajectory: int, turn: int, speedup: float, *, vs_compile: float | None = None,
            flags: list[str] | None = None, code: str = KERNEL_SOURCE) -> TurnRecord:
    reference = 2.0
    ev = EvalResult(
        status=Status.CORRECT, stage=Stage.DONE, correct=True, trials=5, trials_passed=5,
        max_abs_err=3.2e-7, max_rel_err=1.5e-6, atol=1e-5, rtol=1e-5,
        runtime=timing(reference / speedup), reference=timing(reference),
        compiled_reference=timing(reference / speedup * vs_compile) if vs_compile else None,
        speedup=speedup, speedup_vs_compile=vs_compile, flags=flags or [],
        device="cpu", device_name="Test CPU 9000", compile_s=31.5, wall_s=40.0,
    )
    return TurnRecord(
        trajectory=trajectory, turn=turn, status=Status.CORRECT,
        feedback=f"The kernel was correct and achieved a speedup of {speedup:.2f}x.",
        code=code, summary=f"Fused loop, turn {turn}.", kernel_path=f"kernels/t{trajectory}_turn{turn}.py",
        eval=ev, generate_s=12.0, eval_s=40.0,
    )


def failed(trajectory: int, turn: int, status: Status, error: str) -> TurnRecord:
    if status is Status.CHECK_FAILED:
        check = CheckResult(passed=False, violations=[Violation(rule="no-try-except", message=error, line=3)])
        return TurnRecord(trajectory=trajectory, turn=turn, status=status, check=check,
                          feedback=f"Your kernel failed the format checks: {error}", code="class ModelNew: ...")
    stage = {Status.COMPILE_ERROR: Stage.COMPILE, Status.RUNTIME_ERROR: Stage.LOAD}.get(status, Stage.CORRECTNESS)
    ev = EvalResult(status=status, stage=stage, error=error, compile_log=f"ninja: build stopped\n{error}",
                    trials=5 if status is Status.INCORRECT else 0, device="cpu", device_name="Test CPU 9000")
    return TurnRecord(trajectory=trajectory, turn=turn, status=status, eval=ev, code="class ModelNew: ...",
                      feedback=f"Your kernel failed: {error}", generate_s=10.0, eval_s=5.0)


def sample_records() -> list[TurnRecord]:
    """Trajectory 0: compile error, 1.40x, 1.83x (flagged); trajectory 1: incorrect, 1.10x, check failed."""
    return [
        failed(0, 1, Status.COMPILE_ERROR, "error: 'blockDim' was not declared in this scope"),
        failed(1, 1, Status.INCORRECT, "max abs error 0.5 exceeds atol 1e-05"),
        correct(0, 2, 1.40, vs_compile=1.05),
        correct(1, 2, 1.10),
        correct(0, 3, 1.83, vs_compile=1.21, flags=["speedup above 10x of memory bandwidth bound"]),
        failed(1, 3, Status.CHECK_FAILED, "try/except is not allowed"),
    ]


def write_task(folder: Path, name: str = "my_relu") -> Task:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(TASK_SOURCE, encoding="utf-8")
    return load_task(path, class_name="MyRelu")


def run_info(task: Task, **changes) -> RunInfo:
    info = RunInfo(
        run_id="20250101-120000-my-relu-ab12", created_at="2025-01-01T12:00:00+00:00", status="completed",
        task=TaskRef(path=str(task.path), name=task.name, class_name=task.class_name, digest=task.digest),
        device="cpu", device_name="Test CPU 9000", backend="scripted", model="cognition-ai/Kevin-32B",
        turns=3, trajectories=2,
        versions={"python": "3.11.9", "torch": "2.13.0+cpu", "cuda": "none", "driver": "none", "kevin-opt": "0.1.0"},
    )
    return info.model_copy(update=changes)
