"""The parent's side of a confirmation (``worker.confirmation`` is the worker's): ``Confirmations.confirm``
(the evaluator's ``confirm``), the fresh seeds, the time limit of the head-to-head timing, and the
words for a kernel that took a worker down.

``confirm`` builds the kernels (cache hits: the run built them) and confirms them all in each of
``confirm_workers`` workers, as many at once as fit the device's memory
(``memory.confirmations_at_once``; one that runs out of it beside others is run again alone): each
on fresh inputs of its own, sharing the device while it checks and having it alone while it times.
It follows the ``Running`` messages a worker writes: a crash, a hang or a rebinding of the harness
is the last named kernel's, which is dropped with the reason, and the others are confirmed again
without it. A kernel is confirmed where every worker verified it; its numbers are all the
workers' rounds pooled (``rounds.pooled``: one process cannot average out where its own kernels
lie, several can).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from ...config import EvalSettings
from ...results import Confirmation, Confirmed, MemoryUse
from ...task import TaskProbe
from ...workers import Limit, Message, WorkerRun, WorkerSet
from .gate import DeviceGate, GaveUp, Holding
from ..jobs import INTERRUPTED, Assignment, EvalWorker, Running, WorkerReply
from .. import memory
from ..memory import Footprint
from ..reference import ReferenceData, moved_inputs, scaled_limit, stage_limit
from ..rounds import pooled
from .builds import Build, Builds
from .warm import WarmPool

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


def _out_of_memory(outcome: tuple[WorkerReply | None, str, int | None]) -> bool:
    """Whether a confirmation worker, or a kernel in it, failed for want of device memory."""
    reply, error, _ = outcome
    if reply is None:
        return memory.is_out_of_memory(error)
    return any(not v.verified and memory.is_out_of_memory(v.error) for v in reply.confirmed or [])


class ConfirmationHost(Protocol):
    """What a confirmation uses of the evaluator it belongs to."""

    settings: EvalSettings
    reference: ReferenceData | None
    device_name: str
    gate: DeviceGate
    pool: WarmPool
    scratch: Path
    builds: Builds
    workers_running: WorkerSet
    footprint: Footprint | None
    """The task's own device memory (the probe's), for how many confirmation workers fit at once."""
    capacity_bytes: int | None

    @property
    def aborted(self) -> bool: ...
    def probe(self) -> TaskProbe: ...
    def job(self, mode: str) -> dict: ...
    def env(self, build_folder: Path | None) -> dict[str, str]: ...
    def limit(self, phase: str) -> Limit: ...
    def answer(self, holding: Holding) -> Callable[[str], Message]: ...


class Confirmations:
    """The second look at a run's best kernels, for one evaluator (``LocalEvaluator.confirm``):
    it builds them through the evaluator's builds and runs them in workers under its gate."""

    def __init__(self, host: ConfirmationHost) -> None:
        self.host = host

    def confirm(self, sources: Sequence[str]) -> Confirmation:
        """Verify ``sources`` again on fresh seeds and time them head to head with the reference in
        each of ``confirm_workers`` workers (``worker.confirmation``): one verdict per source, in order,
        over all the workers' rounds. A kernel that takes a worker down is dropped with the reason,
        and the others are confirmed again without it."""
        host = self.host
        host.probe()
        seeds = [fresh_seed(host.settings) for _ in range(host.settings.confirm_workers)]
        verdicts: list[Confirmed | None] = [None] * len(sources)
        builds: list[Build] = []
        used: MemoryUse | None = None
        try:
            for i, source in enumerate(sources):
                builds.append(host.builds.get(source))
                if not builds[-1].ok:
                    verdicts[i] = Confirmed(error=f"it no longer builds: {builds[-1].error}")
            while todo := [i for i, v in enumerate(verdicts) if v is None]:
                outcomes = self._confirm_in_workers([builds[i] for i in todo], seeds)
                failed = next((o for o in outcomes if o[0] is None and o[2] is not None), None) or next(
                    (o for o in outcomes if o[0] is None), None)
                if failed is None:
                    replies = [o[0] for o in outcomes]
                    used = max((r.memory for r in replies if r.memory is not None),
                               key=lambda m: m.peak_reserved_bytes, default=None)
                    for j, i in enumerate(todo):
                        verdicts[i] = pooled([r.confirmed[j] for r in replies],
                                             [r.rounds[j] if r.rounds else None for r in replies])
                    continue
                _, error, named = failed
                if named is None:
                    for i in todo:
                        verdicts[i] = Confirmed(error=f"the confirmation failed: {error}")
                else:
                    verdicts[todo[named]] = Confirmed(error=error)
        except GaveUp:
            pass
        kernels = [v if v is not None else Confirmed(error=INTERRUPTED) for v in verdicts]
        return Confirmation(kernels=kernels, seed=seeds[0], seeds=seeds, device_name=host.device_name, memory=used)

    def _confirm_in_workers(self, builds: list[Build],
                            seeds: list[int]) -> list[tuple[WorkerReply | None, str, int | None]]:
        """``_confirm_in_worker`` once per seed, as many at once as fit the device's memory (their
        timings still one at a time: the device gate gives each its turn alone). A worker that ran
        out of device memory beside others is the plan's misjudgement, not a kernel's failure: it is
        run again alone."""
        host = self.host
        at_once = memory.confirmations_at_once(host.footprint, host.capacity_bytes, len(seeds), host.pool.size)
        if at_once == 1:
            return [self._confirm_in_worker(builds, seed) for seed in seeds]
        with ThreadPoolExecutor(at_once, thread_name_prefix="kevin-confirm") as pool:
            outcomes = list(pool.map(lambda seed: self._confirm_in_worker(builds, seed), seeds))
        return [self._confirm_in_worker(builds, seed) if _out_of_memory(outcome) else outcome
                for seed, outcome in zip(seeds, outcomes)]

    def _confirm_in_worker(self, builds: list[Build], seed: int) -> tuple[WorkerReply | None, str, int | None]:
        """One confirmation worker for ``builds``: its reply (the verdicts, its peak memory), or
        why it ended without them and the kernel it named last (None: no kernel, or none named)."""
        host = self.host
        timing = timing_limit(host.settings, host.reference, len(builds))
        job = {**host.job("confirm"), "seed": seed, "budget_s": timing.seconds / 2,
               "kernels": [Assignment(candidate_path=str(b.candidate), build_dir=str(b.folder))
                           for b in builds]}
        named = [""]

        def on_message(message: Message) -> None:
            if isinstance(message, Running):
                named[0] = message.kernel

        def limit(phase: str) -> Limit:
            if phase == "timing":
                return timing
            return host.limit(phase) if phase in ("load", "correctness") else host.pool.prep_limit

        if host.aborted:
            raise GaveUp()
        worker = EvalWorker(job, env=host.env(host.scratch / "extensions"), root=host.scratch)
        host.workers_running.add(worker)
        holding = Holding(host.gate, lambda: host.aborted or not worker.alive())
        try:
            holding.share()
            exceeded = worker.follow(limit=limit, answer=host.answer(holding), on_message=on_message)
            holding.release()  # done with the device: another worker's timing need not wait for its end
            run = worker.result(exceeded)
        finally:
            holding.release()
            worker.remove()
            host.workers_running.discard(worker)
        if host.aborted:
            raise GaveUp()
        if run.reply is not None and run.reply.confirmed is not None:
            return run.reply, "", None
        error = what_happened(run, exceeded)
        return None, error, int(named[0]) if named[0].isdigit() else None
