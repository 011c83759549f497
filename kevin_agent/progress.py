"""Plain progress for headless runs: one line per event on stderr (tokens excepted)."""

from __future__ import annotations

import sys
from typing import TextIO

from . import events as ev
from .formatting import best_words, confirmed_line, fmt_speedup
from .results import Status, TurnRecord


def turn_line(rec: TurnRecord) -> str:
    head = f"{rec.status.value:<13}"
    if rec.status is Status.CORRECT and rec.eval is not None and rec.eval.runtime and rec.eval.reference:
        line = (f"{head} {fmt_speedup(rec.speedup)}  ({rec.eval.runtime.median_ms:.3f} ms vs "
                f"{rec.eval.reference.median_ms:.3f} ms eager")
        if rec.eval.speedup_vs_compile is not None:
            line += f", {fmt_speedup(rec.eval.speedup_vs_compile)} vs torch.compile"
        line += ")"
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
    return first[:160]


class ProgressPrinter:
    """An ``EventSink`` that prints to a stream."""

    def __init__(self, stream: TextIO | None = None, turns: int = 0) -> None:
        self.stream = stream or sys.stderr
        self.turns = turns

    def _out(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _where(self, trajectory: int, turn: int) -> str:
        return f"[t{trajectory} turn {turn}/{self.turns}]"

    def emit(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self.turns = event.turns
            resumed = f", resuming after {event.resumed_turns} finished turns" if event.resumed_turns else ""
            self._out(f"kevin-opt: run {event.run_id}: {event.task} on {event.device} ({event.device_name}), "
                      f"{event.backend} / {event.model}, {event.trajectories} x {event.turns} turns"
                      f"{f' ({event.note})' if event.note else ''}{resumed}")
            self._out(f"kevin-opt: run directory {event.run_dir}")
        elif isinstance(event, ev.TurnStarted):
            dropped = f", {event.dropped_attempts} earliest attempts dropped to fit" if event.dropped_attempts else ""
            self._out(f"{self._where(event.trajectory, event.turn)} generating{dropped}")
        elif isinstance(event, ev.GenerationFinished):
            tokens = f"{event.completion_tokens} tokens, " if event.completion_tokens else ""
            cancelled = " (cancelled)" if event.cancelled else ""
            self._out(f"{self._where(event.trajectory, event.turn)} response: {tokens}{event.seconds:.1f} s{cancelled}")
        elif isinstance(event, ev.EvalStage):
            self._out(f"{self._where(event.trajectory, event.turn)} {event.stage.value}")
        elif isinstance(event, ev.TurnFinished):
            rec = event.record
            best = f"  best {fmt_speedup(event.best.speedup)}" if event.best else ""
            self._out(f"{self._where(rec.trajectory, rec.turn)} {turn_line(rec)}{best}")
        elif isinstance(event, ev.Notice):
            self._out(f"kevin-opt: {event.level}: {event.message}")
        elif isinstance(event, ev.ConfirmationStarted):
            kernels = ", ".join(f"t{k.trajectory} turn {k.turn} {fmt_speedup(k.speedup)}" for k in event.kernels)
            count = "kernel" if len(event.kernels) == 1 else f"{len(event.kernels)} kernels"
            self._out(f"kevin-opt: confirming the best {count} ({kernels}): verified again on fresh inputs "
                      "and timed head to head with the reference")
        elif isinstance(event, ev.ConfirmationFinished):
            for kernel in event.confirmation.kernels:
                self._out(f"kevin-opt: {confirmed_line(kernel)}")
            if event.best is None:
                self._out("kevin-opt: no kernel survived the confirmation")
        elif isinstance(event, ev.RunFinished):
            best = f"best {best_words(event.best)}" if event.best else "no verified kernel"
            self._out(f"kevin-opt: run {event.reason} after {event.turns_done} turns: {best}")
