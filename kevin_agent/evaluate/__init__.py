"""Evaluation of candidates outside the tool's process: compile, correctness, timing.

``LocalEvaluator`` implements ``protocols.Evaluator``; ``worker`` is the process each
candidate runs in; ``correctness`` and ``timing`` document the protocol and its tolerances.
"""

from __future__ import annotations

from pathlib import Path

from ..checks import run_checks
from ..results import CheckResult, EvalResult, Stage, Status
from ..task import Task, load_task
from .evaluator import LocalEvaluator, detect_device
from .settings import EvalSettings, default_cache_dir

__all__ = [
    "EvalSettings",
    "LocalEvaluator",
    "default_cache_dir",
    "detect_device",
    "evaluate_candidate_file",
]


def evaluate_candidate_file(
    task: Task | str | Path,
    candidate: str | Path,
    settings: EvalSettings,
    *,
    class_name: str = "Model",
    skip_checks: bool = False,
) -> tuple[CheckResult, EvalResult]:
    """Static checks, then (when they pass) a full evaluation of one candidate file.

    Raises ``TaskError`` / ``EnvironmentUnavailable`` when the task cannot be built; a bad
    candidate gives a failed ``EvalResult`` (``check_failed`` when a rule is broken).
    """
    if not isinstance(task, Task):
        task = load_task(task, class_name)
    source = Path(candidate).read_text(encoding="utf-8")
    check = run_checks(source, settings.device)
    evaluator = LocalEvaluator(task, settings)
    try:
        if not check.passed and not skip_checks:
            return check, EvalResult(status=Status.CHECK_FAILED, stage=Stage.CHECK, error=check.summary(),
                                     device=settings.device, device_name=evaluator.device_name)
        evaluator.probe()
        return check, evaluator.evaluate([source])[0]
    finally:
        evaluator.close()
