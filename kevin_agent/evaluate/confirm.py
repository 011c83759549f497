"""The parent's side of a confirmation (``headtohead`` is the worker's): ``EvaluatorConfirmation.confirm``
(the evaluator's ``confirm``), the fresh seed, the time limit of the head-to-head timing, and the
words for a kernel that took the worker down.

``confirm`` builds the kernels (cache hits: the run built them), runs them all in
one worker that shares the device while it checks and has it alone while it times, and follows
the ``kernel <i>`` lines the worker writes: a crash, a hang or a rebinding of the harness is the
last named kernel's, which is dropped with the reason; the others are confirmed again without it.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import EvalSettings
from ..results import Confirmation, Confirmed, MemoryUse
from .gate import DeviceGate, GaveUp, Holding
from .jobs import INTERRUPTED, KERNEL, Assignment, WorkerReply
from .pool import Limit, StageClock, WorkerProcess, WorkerRun, WorkerSet
from .reference import ReferenceData, moved_inputs, scaled_limit, stage_limit
from .warm import WarmPool

if TYPE_CHECKING:
    from .evaluator import _Build

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
    return scaled_limit(settings, calls, ref.call_s, [moved_inputs("timing", settings, ref)])


def what_happened(run: WorkerRun, limit: Limit | None) -> str:
    """Why a confirmation worker ended without verdicts, in words."""
    stage = run.stage.value if run.stage is not None else "its start"
    if run.timed_out and limit is not None:
        return (f"timed out after {limit.seconds:.3g} s during {stage}, the stage's limit ({limit.how}); "
                "the worker was killed")
    if run.reply is not None and run.reply.error:
        return run.reply.error
    return f"{run.died()} during {stage}"


class EvaluatorConfirmation:
    """``LocalEvaluator.confirm``: the second look at the run's best kernels. A part of the
    evaluator, kept here beside its helpers; it uses the evaluator's builds, gate and workers."""

    settings: EvalSettings
    reference: ReferenceData | None
    device_name: str
    gate: DeviceGate
    pool: WarmPool
    scratch: Path
    _aborted: threading.Event
    _workers: WorkerSet

    # The evaluator's own, in evaluator.py.
    _ensure_probed: Callable[[], None]
    _built: Callable[..., _Build]
    _job: Callable[..., dict]
    _env: Callable[[Path | None], dict[str, str]]
    _limit: Callable[[str], Limit]
    _answer: Callable[[Holding], Callable[[str], dict]]

    def confirm(self, sources: Sequence[str]) -> Confirmation:
        """Verify ``sources`` again on fresh seeds and time them head to head with the reference,
        all in one worker (``headtohead``): one verdict per source, in order. A kernel that takes
        the worker down is dropped with the reason, and the others are confirmed again without it."""
        self._ensure_probed()
        seed = fresh_seed(self.settings)
        verdicts: list[Confirmed | None] = [None] * len(sources)
        builds: list[_Build] = []
        used: MemoryUse | None = None
        try:
            for i, source in enumerate(sources):
                builds.append(self._built(source, StageClock(), None))
                if not builds[-1].ok:
                    verdicts[i] = Confirmed(error=f"it no longer builds: {builds[-1].error}")
            while todo := [i for i, v in enumerate(verdicts) if v is None]:
                reply, error, named = self._confirm_in_worker([builds[i] for i in todo], seed)
                if reply is not None:
                    used = reply.memory
                    for i, verdict in zip(todo, reply.confirmed):
                        verdicts[i] = verdict
                elif named is None:
                    for i in todo:
                        verdicts[i] = Confirmed(error=f"the confirmation failed: {error}")
                else:
                    verdicts[todo[named]] = Confirmed(error=error)
        except GaveUp:
            pass
        kernels = [v if v is not None else Confirmed(error=INTERRUPTED) for v in verdicts]
        return Confirmation(kernels=kernels, seed=seed, device_name=self.device_name, memory=used)

    def _confirm_in_worker(self, builds: list[_Build], seed: int) -> tuple[WorkerReply | None, str, int | None]:
        """One confirmation worker for ``builds``: its reply (the verdicts, its peak memory), or
        why it ended without them and the kernel it named last (None: no kernel, or none named)."""
        timing = timing_limit(self.settings, self.reference, len(builds))
        job = {**self._job("confirm"), "seed": seed, "budget_s": timing.seconds / 2,
               "kernels": [Assignment(candidate_path=str(b.folder / "candidate.py"), build_dir=str(b.folder))
                           for b in builds]}
        named = [""]

        def on_line(line: str) -> None:
            if line.startswith(KERNEL):
                named[0] = line[len(KERNEL):]

        def limit(phase: str) -> Limit:
            if phase == "timing":
                return timing
            return self._limit(phase) if phase in ("load", "correctness") else self.pool.prep_limit

        if self._aborted.is_set():
            raise GaveUp()
        worker = WorkerProcess(job, env=self._env(self.scratch / "extensions"), root=self.scratch)
        self._workers.add(worker)
        holding = Holding(self.gate, lambda: self._aborted.is_set() or not worker.alive())
        try:
            holding.share()
            exceeded = worker.follow(limit=limit, answer=self._answer(holding), on_line=on_line)
            run = worker.result(exceeded)
        finally:
            holding.release()
            worker.remove()
            self._workers.discard(worker)
        if self._aborted.is_set():
            raise GaveUp()
        if run.reply is not None and run.reply.confirmed is not None:
            return run.reply, "", None
        error = what_happened(run, exceeded)
        return None, error, int(named[0]) if named[0].isdigit() else None
