"""The parent's side of a confirmation (``headtohead`` is the worker's): the fresh seed, the time
limit of the head-to-head timing, and the words for a kernel that took the worker down.

``LocalEvaluator.confirm`` builds the kernels (cache hits: the run built them), runs them all in
one worker that shares the device while it checks and has it alone while it times, and follows
the ``kernel <i>`` lines the worker writes: a crash, a hang or a rebinding of the harness is the
last named kernel's, which is dropped with the reason; the others are confirmed again without it.
"""

from __future__ import annotations

import secrets

from ..config import EvalSettings
from .pool import Limit, WorkerRun
from .reference import ReferenceData, stage_limit

FRESH_OFFSET = 1_000_000
"""The fresh seeds start this far above the run's seed (the run's sets use seed + 0 .. seed + 1001 + trials)."""


def fresh_seed(settings: EvalSettings) -> int:
    """A base seed for the fresh inputs, drawn anew for each confirmation."""
    return settings.seed + FRESH_OFFSET + secrets.randbelow(1 << 30)


def timing_limit(settings: EvalSettings, ref: ReferenceData | None, kernels: int) -> Limit:
    """How long the head-to-head timing may run: the floor plus ``stage_time_factor`` times the
    reference's own time per timed call, for every call of every round at most, capped at
    ``run_timeout_s``."""
    if ref is None:
        return stage_limit("timing", settings, None)
    per_round = kernels + 1 + (1 if settings.compare_compile else 0)
    calls = per_round * (settings.confirm_rounds + settings.warmup_runs) + settings.timed_runs
    floor, factor, cap = settings.stage_floor_s, settings.stage_time_factor, settings.run_timeout_s
    seconds = floor + factor * calls * ref.call_s
    how = (f"stage_floor_s {floor:g} s + stage_time_factor {factor:g} x {calls} calls x {ref.call_s * 1e3:.3g} ms, "
           "the reference's own time per call")
    if seconds > cap:
        return Limit(cap, f"{how}, capped at run_timeout_s = {cap:g} s")
    return Limit(seconds, how)


def what_happened(run: WorkerRun, limit: Limit | None) -> str:
    """Why a confirmation worker ended without verdicts, in words."""
    stage = run.stage.value if run.stage is not None else "its start"
    if run.timed_out and limit is not None:
        return (f"timed out after {limit.seconds:.3g} s during {stage}, the stage's limit ({limit.how}); "
                "the worker was killed")
    if run.reply is not None and run.reply.error:
        return run.reply.error
    return f"{run.died()} during {stage}"
