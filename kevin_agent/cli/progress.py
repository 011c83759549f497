"""Plain progress for headless runs: one line per event on stderr (tokens excepted), and a line
now and then for a stage that takes long, so that a build of a minute is not a minute of silence."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from .. import events as ev
from ..formatting import (
    best_words,
    confirmed_line,
    counted,
    cut_words,
    fmt_clock,
    fmt_fraction,
    fmt_seconds,
    fmt_speedup,
    marked_speedup,
)
from ..results import BestKernel, Status, TurnRecord

ERROR_WIDTH = 160
"""An error's line in a progress line is cut (at a word) to this many characters."""
LONG_STAGE_S = 15.0
"""A stage running this long is said again, and again each time it has run twice as long."""
TICK_S = 1.0
TOKEN_STREAMS = {"openai", "vllm"}
"""Backends whose streamed deltas are the model's tokens, one each (vLLM streams a token a chunk);
another's (replayed scripts: 24 characters a chunk) are counted by their characters, about four a token."""


@contextlib.contextmanager
def every_second(call: Callable[[], None], name: str) -> Iterator[None]:
    """Call ``call`` every second in a thread of its own while the block runs (until its stream is gone)."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(TICK_S):
            try:
                call()
            except (OSError, ValueError):
                return  # the stream is gone

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def turn_line(rec: TurnRecord) -> str:
    head = f"{rec.status.value:<13}"
    if rec.status is Status.CORRECT and rec.eval is not None and rec.eval.runtime and rec.eval.reference:
        line = (f"{head} {fmt_speedup(rec.speedup)}  ({rec.eval.runtime.median_ms:.3f} ms vs "
                f"{rec.eval.reference.median_ms:.3f} ms eager")
        if rec.eval.speedup_vs_compile is not None:
            line += f", {fmt_speedup(rec.eval.speedup_vs_compile)} vs torch.compile"
        line += ")"
        if rec.eval.roofline is not None and rec.eval.roofline.fraction is not None:
            line += f"  roofline {fmt_fraction(rec.eval.roofline.fraction)}"
        if rec.eval.flags:
            line += "  FLAGGED: " + "; ".join(rec.eval.flags)
        return line
    return f"{head} {error_line(turn_error(rec))}"


def turn_error(rec: TurnRecord) -> str:
    """What went wrong in a turn, in its own words (the feedback sentence wraps it in the
    words the model was trained on)."""
    if rec.parse_error:
        return rec.parse_error
    if rec.check is not None and not rec.check.passed:
        return rec.check.summary()
    if rec.eval is not None and rec.eval.error.strip():
        return rec.eval.error.strip()
    return rec.feedback.strip()


def error_line(error: str) -> str:
    """The line of an error worth a glance: a compiler's first ``error``, else the first line."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    first = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    return cut_words(first, ERROR_WIDTH)


def best_so_far(best: BestKernel) -> str:
    """The running best, marked as what it is (a turn's own number until the confirmation)."""
    return f"best so far {marked_speedup(best.speedup, best.confirmation is not None)}"


class ProgressPrinter:
    """An ``EventSink`` that prints to a stream; ``ticking`` says again what takes long."""

    def __init__(self, stream: TextIO | None = None, turns: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.turns = turns
        self._clock = clock
        self._lock = threading.Lock()
        self._stages: dict[tuple[int, int], tuple[str, float, float]] = {}
        """(trajectory, turn) -> (stage, since, when it is said again)."""
        self._streamed: dict[tuple[int, int], list[int]] = {}
        """(trajectory, turn) -> [deltas, characters] streamed so far while it generates."""
        self._per_token = True

    def _out(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _where(self, trajectory: int, turn: int) -> str:
        return f"[t{trajectory} turn {turn}/{self.turns}]"

    # --- long stages --------------------------------------------------------------------------
    def _enter(self, trajectory: int, turn: int, stage: str | None) -> str:
        """Note the stage a turn entered (None: it ended); what the one it left took, when long."""
        now = self._clock()
        left = self._stages.pop((trajectory, turn), None)
        if stage is not None:
            self._stages[(trajectory, turn)] = (stage, now, now + LONG_STAGE_S)
        if left is None or now - left[1] < LONG_STAGE_S:
            return ""
        return f" ({left[0]} took {fmt_seconds(now - left[1])})"

    def tick(self) -> None:
        """Say again each stage that has run long, with how long so far."""
        with self._lock:
            now = self._clock()
            for (trajectory, turn), (stage, since, due) in sorted(self._stages.items()):
                if now >= due:
                    self._stages[(trajectory, turn)] = (stage, since, since + 2 * (now - since))
                    streamed = f", {self.streamed_words(trajectory, turn)}" if stage == "generating" else ""
                    self._out(f"{self._where(trajectory, turn)} {stage}, {fmt_clock(now - since)} so far{streamed}")

    def streamed_tokens(self, trajectory: int, turn: int) -> int | None:
        """Tokens streamed so far for a turn that generates (None before its first)."""
        deltas, chars = self._streamed.get((trajectory, turn), (0, 0))
        if not deltas:
            return None
        return deltas if self._per_token else (chars + 3) // 4

    def streamed_words(self, trajectory: int, turn: int) -> str:
        """What a generating turn has streamed: its tokens, or that the server has sent none yet
        (one that answers whole, or holds the request in its queue: only the time tells)."""
        tokens = self.streamed_tokens(trajectory, turn)
        if tokens is None:
            return "no tokens streamed yet"
        return f"{'' if self._per_token else '~'}{tokens:,} tokens streamed"

    @contextlib.contextmanager
    def ticking(self) -> Iterator[ProgressPrinter]:
        """``tick`` every second while the block runs."""
        with every_second(self.tick, "kevin-progress"):
            yield self

    # --- events -------------------------------------------------------------------------------
    def emit(self, event: ev.Event) -> None:
        with self._lock:
            self._emit(event)

    def _emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.TokenDelta):
            counts = self._streamed.setdefault((event.trajectory, event.turn), [0, 0])
            counts[0] += 1
            counts[1] += len(event.text)
        elif isinstance(event, ev.RunStarted):
            self.turns = event.turns
            self._per_token = event.backend in TOKEN_STREAMS
            resumed = f", resuming after {counted(event.resumed_turns, 'finished turn')}" if event.resumed_turns else ""
            self._out(f"kevin-opt: run {event.run_id}: {event.task} on {event.device} ({event.device_name}), "
                      f"{event.backend} / {event.model}, {event.trajectories} x {counted(event.turns, 'turn')}"
                      f"{f' ({event.note})' if event.note else ''}{resumed}")
            self._out(f"kevin-opt: run directory {event.run_dir}")
        elif isinstance(event, ev.TurnStarted):
            self._enter(event.trajectory, event.turn, "generating")
            dropped = (f", {counted(event.dropped_attempts, 'earliest attempt')} dropped to fit"
                       if event.dropped_attempts else "")
            self._out(f"{self._where(event.trajectory, event.turn)} generating{dropped}")
        elif isinstance(event, ev.GenerationFinished):
            # Its answer is in; it waits for a build slot or the device (not for the server).
            self._enter(event.trajectory, event.turn, "waiting to be evaluated")
            streamed = self.streamed_tokens(event.trajectory, event.turn)
            self._streamed.pop((event.trajectory, event.turn), None)
            if event.completion_tokens and self._per_token:
                tokens = f"{event.completion_tokens:,} tokens (the server's count"
                tokens += f", {streamed:,} streamed), " if streamed and streamed != event.completion_tokens else "), "
            elif event.completion_tokens:
                tokens = f"{event.completion_tokens:,} tokens, "
            else:
                tokens = f"{streamed:,} tokens streamed (the server gave no count), " if streamed else ""
            cancelled = " (cancelled)" if event.cancelled else ""
            self._out(f"{self._where(event.trajectory, event.turn)} response: {tokens}{event.seconds:.1f} s{cancelled}")
        elif isinstance(event, ev.EvalStage):
            took = self._enter(event.trajectory, event.turn, event.stage.value)
            self._out(f"{self._where(event.trajectory, event.turn)} {event.stage.value}{took}")
        elif isinstance(event, ev.TurnFinished):
            rec = event.record
            self._enter(rec.trajectory, rec.turn, None)
            best = f"  · {best_so_far(event.best)}" if event.best else ""
            self._out(f"{self._where(rec.trajectory, rec.turn)} {turn_line(rec)}{best}")
        elif isinstance(event, ev.Notice):
            self._out(f"kevin-opt: {event.level}: {event.text()}")
        elif isinstance(event, ev.ConfirmationStarted):
            kernels = ", ".join(f"t{k.trajectory} turn {k.turn} {fmt_speedup(k.speedup)}" for k in event.kernels)
            one = len(event.kernels) == 1
            count, by = ("kernel", "its turn's own number") if one else (f"{len(event.kernels)} kernels",
                                                                         "their turns' own numbers")
            self._out(f"kevin-opt: confirming the best {count} ({kernels}, by {by}): verified again on fresh inputs "
                      "and timed head to head with the reference")
        elif isinstance(event, ev.ConfirmationFinished):
            for kernel in event.confirmation.kernels:
                self._out(f"kevin-opt: {confirmed_line(kernel)}")
            if event.best is None:
                self._out("kevin-opt: no kernel survived the confirmation")
        elif isinstance(event, ev.RunFinished):
            self._stages.clear()
            if event.reason == "failed":
                # The error that ended it is printed next, with its hint.
                best = f"; {best_so_far(event.best)}" if event.best else ""
                self._out(f"kevin-opt: run failed after {counted(event.turns_done, 'turn')}{best}")
                return
            best = f"best {best_words(event.best)}" if event.best else "no verified kernel"
            self._out(f"kevin-opt: run {event.reason} after {counted(event.turns_done, 'turn')}: {best}")
