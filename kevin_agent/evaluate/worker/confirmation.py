"""Confirmation inside one worker: the best few kernels of a run verified again on fresh seeds and
timed head to head with the reference (docs/evaluation.md, "Confirmation").

1. Fresh inputs for every set the protocol uses (``reference.input_plan`` from ``Job.seed``, a
   base seed the run never used) and the reference's answer to each, computed as the reference
   worker computes them (poisoned memory), before any kernel's code is imported.
2. Each kernel in turn: loaded from its own build folder, then the correctness trials and the
   operator audit exactly as a run worker does them (``candidate.check_trials``) on the fresh
   sets. A kernel that fails is dropped; the others go on.
3. Timing, with the device to this worker alone: every kernel, the eager reference and
   ``torch.compile`` of it warmed up, then rounds. A round times each kernel once, then the
   reference once and the compiled reference once, each on inputs of its own with the cache
   flushed before the call (``Timer.one``). A kernel's ratio in a round is the reference's time
   over its own. The rounds stop once the 95% interval of every kernel's median ratio
   (``median_interval``) lies within ``PRECISION`` of it (checked every ``CHECK_EVERY`` rounds from
   ``MIN_ROUNDS`` on, ``may_stop``), at ``confirm_rounds``, or once they have taken ``Job.budget_s``.
4. After timing, each kernel again: the rule for work hidden off the stream, applied to its
   rounds; the re-check after timing (``candidate.recheck``); the bytes it moves, for the physical
   floor.

The reply carries each kernel's verdict (what was verified, its floor) and the rounds' raw times:
its confirmed speedup, interval and times are the parent's, over every worker (``rounds.pooled``),
and so is the floor's verdict on that median.

Before any kernel's code runs, the worker names it to the parent (``kernel <i>``; ``kernel -``
before the reference): a crash or a hang is the last named kernel's, and the parent confirms the
others again without it. A kernel that rebinds what the harness relies on ends the worker the same
way, since this process can no longer be trusted to time the others.
"""

from __future__ import annotations

import importlib
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ...results import Confirmed, Stage
from . import fingerprint, first_call, meter
from .candidate import (RuleBroken, check_trials, compile_failed, device_name, new_model, physical_floor, recheck,
                        refuse_hidden_work, roofline_of, versions)
from .correctness import Mismatch, Outcome, set_reference_tf32
from .guards import Integrity
from ..jobs import Assignment, Job, KernelRounds, Running, TimedRounds, WorkerReply
from ..memory import timing_placements
from .placements import Placements
from .taskcode import TaskProblem, build_reference, describe, import_file, import_task
from ..rounds import median_interval, ratios
from .runs import Runs
from .timing import Timer
from .trials import ReferenceChanged, Trials, read_meta

MIN_ROUNDS = 20
MIN_TURNS = 4
"""The rounds go on for at least this many turns of the timing's placements as well: where one
placement reads 10% apart from another, a worker's median resting on two rounds at each moved
by 3% between workers (docs/gpu-runs.md, run 20)."""
CHECK_EVERY = 10
PRECISION = 0.01
"""The rounds may stop once every kernel's 95% interval is within this share of its median."""


def may_stop(rounds: int, placements: int) -> bool:
    """Whether the rounds may stop after ``rounds`` (if every interval is narrow enough): from
    ``MIN_ROUNDS`` and ``MIN_TURNS`` turns of the placements on, at whole turns of them at least
    ``CHECK_EVERY`` rounds apart, so that every placement has the same share of the rounds."""
    every = placements * math.ceil(CHECK_EVERY / placements)
    return rounds >= max(MIN_ROUNDS, MIN_TURNS * placements) and rounds % every == 0


def _settled(ratios: list[float]) -> bool:
    low, high = median_interval(ratios)
    return (high - low) / 2 <= PRECISION * statistics.median(ratios)


class Tainted(Exception):
    """A kernel rebound what the harness relies on: this worker must not time the others."""


@dataclass
class Timed:
    """Something timed in the rounds: a kernel, or (``kernel`` None) the reference or the compiled
    reference."""

    fn: Callable
    kernel: Kernel | None = None
    runs: Runs = field(default_factory=lambda: Runs([], []))
    launched_ms: list[float] = field(default_factory=list)
    """cuda: its times with its launches in them, after the rounds."""

    def rounds(self) -> TimedRounds:
        return TimedRounds(stream_ms=self.runs.stream_ms, host_waits=self.runs.host_waits, launched_ms=self.launched_ms)

    @property
    def mark(self) -> str:
        """What the worker names before it runs this (``kernel <i>``, or ``kernel -``)."""
        return str(self.kernel.index) if self.kernel is not None else "-"

    @property
    def stream_ms(self) -> list[float]:
        return self.runs.stream_ms


@dataclass
class Kernel:
    index: int
    where: Assignment
    outcome: Outcome = field(default_factory=Outcome)
    model: torch.nn.Module | None = None
    error: str = ""
    timed: Timed | None = None
    verdict: Confirmed | None = None

    @property
    def alive(self) -> bool:
        return not self.error


class Confirming:
    """One confirmation worker's state, from the fresh inputs to the verdicts."""

    def __init__(self, job: Job, mark: Callable[[str], None], stage: Callable[[Stage], None],
                 request: Callable[[str], object]) -> None:
        self.job, self.s, self.device = job, job.settings, job.settings.device
        self.mark, self.stage, self.request = mark, stage, request
        self.kernels = [Kernel(i, where) for i, where in enumerate(job.kernels)]

    # --- before any kernel ------------------------------------------------------------------
    def prepare(self) -> None:
        job = self.job
        self.task = import_task(job)
        if self.device == "cuda":
            torch.cuda.init()
        meter.start(self.device)
        set_reference_tf32(self.s.reference_tf32)
        self.ref = build_reference(self.task, job)
        meta = read_meta(job)
        fingerprint.prepare(self.device)
        self.timer = Timer(self.device)  # before the fresh sets: its buffer pins no large block
        self.trials = Trials.fresh(job, self.task, self.ref, meta)
        self.compiled, self.compile_error = None, ""
        if self.s.compare_compile:
            try:
                self.compiled = torch.compile(self.ref)
                with torch.no_grad():
                    self.compiled(*self.trials.draw("timing"))
            except Exception as exc:
                self.compiled, self.compile_error = None, describe(exc)[:300]
        importlib.import_module("torch.utils.cpp_extension")  # what every kernel imports first
        first_call.prepare(self.s)  # a Triton kernel's imports (its compile is its first trial here)
        self.integrity = Integrity()

    # --- each kernel ---------------------------------------------------------------------------
    def _guarded(self, kernel: Kernel, step: Callable[[], None]) -> None:
        """Run ``step`` of ``kernel``'s; a failure drops the kernel, a rebinding ends the worker."""
        self.mark(str(kernel.index))
        try:
            step()
        except (Mismatch, RuleBroken, ReferenceChanged) as exc:
            kernel.error = str(exc)
        except BaseException as exc:  # kernel code may raise anything, SystemExit included
            kernel.error = describe(exc, kernel.where.candidate_path, self.job.task_path)
        changed = self.integrity.changed()
        if changed:
            raise Tainted(f"[no-monkeypatch] the kernel rebound {', '.join(changed[:5])}: patching torch, "
                          "the timer or the evaluator changes what is measured")

    def _load(self, kernel: Kernel) -> None:
        os.environ["TORCH_EXTENSIONS_DIR"] = kernel.where.build_dir
        module = import_file(kernel.where.candidate_path, f"kevin_candidate_{kernel.index}")
        if not hasattr(module, "ModelNew"):
            raise RuleBroken("the kernel defines no class ModelNew")
        kernel.model = new_model(module, self.task, self.job, self.ref)  # _guarded checks the integrity

    def _check(self, kernel: Kernel) -> None:
        check_trials(self.s, self.trials, kernel.model, kernel.outcome, self.integrity, self.ref)

    def verify(self) -> None:
        for kernel in self.kernels:
            self.stage(Stage.LOAD)
            self._guarded(kernel, lambda k=kernel: self._load(k))
            if kernel.alive:
                self.stage(Stage.CORRECTNESS)
                self._guarded(kernel, lambda k=kernel: self._check(k))

    # --- head to head ------------------------------------------------------------------------
    def time(self) -> tuple[Timed, Timed | None, float]:
        self.request("timing")  # returns once the device is this worker's alone
        self.stage(Stage.TIMING)
        meter.release(self.device)  # what the trials left cached goes back before the rounds
        # The timing inputs shared by everything timed, as a run worker times its candidate and the
        # reference on them: one copy of a large set (five copies of a 6 GB input would not fit
        # beside a model holding most of the GPU), up to 16 placements of a small one. Inputs are
        # checked unchanged, and each kernel's re-check writes values it has never seen into the
        # first copy, so an answer cached by address still goes stale.
        placements = Placements.drawn(lambda: self.trials.draw("timing"), timing_placements(self.trials.meta.footprint),
                                self.device)
        self.timing = placements.first
        for kernel in self.kernels:
            if kernel.alive:
                kernel.timed = Timed(kernel.model, kernel)
        reference = Timed(self.ref)
        compiled = Timed(self.compiled) if self.compiled is not None else None
        entries = [k.timed for k in self.kernels if k.alive] + [reference] + ([compiled] if compiled else [])
        self.mark("-")
        overhead_ms = self.timer.sync_overhead_ms(self.s.timed_runs)
        with torch.no_grad():
            with placements.at(0):
                for entry in list(entries):
                    self._run(entry, entries, lambda e=entry: [e.fn(*self.timing) for _ in range(self.s.warmup_runs)])
            for timing in placements.others():
                for entry in list(entries):
                    self._run(entry, entries, lambda e=entry, a=timing: e.fn(*a))
            self.timer.sync()
            started = time.monotonic()
            rounds = 0
            while rounds < self.s.confirm_rounds:
                with placements.at(rounds) as timing:  # as Timer.rounds goes round them
                    for entry in list(entries):
                        self._run(entry, entries, lambda e=entry, a=timing: e.runs.add(self.timer.one(e.fn, a)))
                rounds += 1
                live = [k for k in self.kernels if k.alive]
                if not live or may_stop(rounds, len(placements)) and (
                        time.monotonic() - started > self.job.budget_s
                        or all(_settled(ratios(reference.stream_ms, k.timed.stream_ms)) for k in live)):
                    break
            # With their launches in the time, beside the rounds' headline (``Timer.launched``).
            for entry in list(entries):
                self._run(entry, entries,
                          lambda e=entry: setattr(e, "launched_ms", self.timer.launched_ms(e.fn, self.timing)))
        placements.close()
        changed = self.integrity.changed()
        if changed:
            raise Tainted(f"[no-monkeypatch] while the kernels were timed together, one of them rebound "
                          f"{', '.join(changed[:5])}")
        return reference, compiled, overhead_ms

    def _run(self, entry: Timed, entries: list[Timed], call: Callable[[], object]) -> None:
        """One step of the rounds; a kernel that fails in it leaves them (the reference's failure
        is the harness's, and ends the worker)."""
        self.mark(entry.mark)
        if entry.kernel is None:
            call()
            return
        try:
            call()
        except BaseException as exc:  # kernel code may raise anything
            entry.kernel.error = "while it was timed: " + describe(exc, entry.kernel.where.candidate_path)
            entries.remove(entry)

    # --- after timing --------------------------------------------------------------------------
    def _after(self, kernel: Kernel, compiled: Timed | None, overhead_ms: float) -> None:
        """The checks after timing. The verdict carries what was verified and the floor; its numbers
        are the parent's, from the rounds of every worker (``rounds.pooled``)."""
        refuse_hidden_work(kernel.timed.runs, overhead_ms, self.device)
        moved = recheck(self.s, self.trials, kernel.model, self.timing, kernel.outcome, self.ref)
        flags = [compile_failed(self.compile_error)] if self.s.compare_compile and compiled is None else []
        kernel.verdict = Confirmed(verified=True, floor=physical_floor(self.s, self.trials, moved),
                                   roofline=roofline_of(self.s, self.trials, moved), flags=flags,
                                   **kernel.outcome.evidence())

    def finish(self, reference: Timed, compiled: Timed | None,
               overhead_ms: float) -> tuple[list[Confirmed], list[KernelRounds | None]]:
        """Each kernel's verdict, and its raw rounds for the parent to pool with other workers'."""
        for kernel in self.kernels:
            if kernel.alive:
                self.stage(Stage.CORRECTNESS)
                self._guarded(kernel, lambda k=kernel: self._after(k, compiled, overhead_ms))
        verdicts = [k.verdict if k.alive and k.verdict is not None else
                    Confirmed(verified=False, error=k.error or "not confirmed", **k.outcome.evidence())
                    for k in self.kernels]
        rounds = [KernelRounds(kernel=k.timed.rounds(), reference=reference.rounds(),
                               compiled=compiled.rounds() if compiled is not None else None)
                  if k.alive and k.verdict is not None and k.timed is not None else None for k in self.kernels]
        return verdicts, rounds


def do_confirm(job: Job, parent) -> WorkerReply:
    """The confirmation worker's job (``worker`` mode ``confirm``)."""
    confirming = Confirming(job, _marker(parent), parent.stage, parent.request)
    try:
        confirming.prepare()
    except TaskProblem as exc:
        return WorkerReply(ok=False, error_kind="task", error=str(exc))
    try:
        confirming.verify()
        timed = confirming.time() if any(k.alive for k in confirming.kernels) else None
        verdicts, rounds = confirming.finish(*timed) if timed is not None else confirming.finish(None, None, 0.0)
    except Tainted as exc:
        return WorkerReply(ok=False, error_kind="runtime", error=str(exc))
    parent.stage(Stage.DONE)
    return WorkerReply(ok=True, confirmed=verdicts, rounds=rounds, device_name=device_name(job.settings.device),
                       versions=versions(), memory=meter.use(job.settings.device, confirming.trials.meta.footprint))


def _marker(parent) -> Callable[[str], None]:
    """Names the kernel whose code runs next (``-``: the reference), once each time it changes."""
    named = [""]

    def mark(which: str) -> None:
        if which != named[0]:
            named[0] = which
            parent.send(Running(kernel=which))
    return mark
