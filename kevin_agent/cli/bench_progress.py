"""A bench's progress: tasks done, running and failed, and the time left.

Headless (no terminal, or ``--headless``), one line per event on stderr: each task as it starts and
ends, and each task's turns. On a terminal, one live line at the bottom (a bar, the counts, the
ETA), redrawn every second, with a line above it for each task as it ends. ``BenchProgress`` is
the counting, ``bar_line`` what the live line says: both plain functions of the state, tested as such.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from .. import events as ev
from ..formatting import counted, fmt_clock, fmt_speedup
from ..results.bench import TaskResult
from .progress import every_second, turn_line

class BenchProgress:
    """Counts of a bench's tasks in this session, and the time left at the rate they have ended."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.total = 0
        self.done_before = 0
        self.done = 0
        self.failed = 0
        self.correct = 0
        self.running: set[str] = set()
        self.started = clock()

    @property
    def finished(self) -> int:
        return self.done_before + self.done

    def eta_s(self) -> float | None:
        """Seconds left: the tasks still to end at the rate this session's tasks ended (None before one has)."""
        if self.done == 0:
            return None
        left = self.total - self.finished
        return (self.clock() - self.started) / self.done * left

    def summary(self) -> str:
        eta = self.eta_s()
        parts = [f"{self.finished}/{self.total} done", f"{len(self.running)} running", f"{self.failed} failed",
                 f"{self.correct} correct", f"elapsed {fmt_clock(self.clock() - self.started)}",
                 f"ETA {fmt_clock(eta) if eta is not None else '-'}"]
        return " · ".join(parts)


def bar_line(progress: BenchProgress, width: int) -> str:
    """The live line: ``[#####-----] 3/8 done · 1 running · 0 failed · ... ETA 1:10``, cut to ``width``."""
    text = progress.summary()
    cells = max(10, min(40, width - 1 - len(text) - 3))  # the last column stays free: no wrap
    filled = int(cells * progress.finished / progress.total) if progress.total else 0
    line = f"[{'#' * filled}{'-' * (cells - filled)}] {text}"
    return line[:max(1, width - 1)]


def result_words(result: TaskResult) -> str:
    if result.status == "failed":
        first = (result.error or "failed").strip().splitlines()
        return f"failed: {first[0] if first else 'failed'}"
    if not result.correct:
        return f"no verified kernel in {result.turns_done} turn{'s' if result.turns_done != 1 else ''}"
    confirmed = " confirmed" if result.confirmed else ""
    per = sum(1 for t in result.trajectories if t.correct)
    return (f"correct {fmt_speedup(result.speedup)}{confirmed} (first correct at turn {result.first_correct_turn}, "
            f"{per}/{counted(len(result.trajectories), 'trajectory', 'trajectories')})")


class BenchPrinter:
    """A ``BenchSink`` for the command line: progress lines, or the live line on a terminal."""

    def __init__(self, stream: TextIO | None = None, *, live: bool = False, width: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.live = live
        self.width = width or _columns
        self.progress = BenchProgress(clock)
        self._lock = threading.Lock()
        self._turns: dict[str, int] = {}
        self._drawn = False

    # --- output ----------------------------------------------------------------------------
    def _line(self, text: str) -> None:
        with self._lock:
            if self.live:
                self.stream.write("\r\x1b[K" + text + "\n" + bar_line(self.progress, self.width()))
                self._drawn = True
                self.stream.flush()
            else:
                print(text, file=self.stream, flush=True)

    def redraw(self) -> None:
        if not self.live:
            return
        with self._lock:
            self.stream.write("\r\x1b[K" + bar_line(self.progress, self.width()))
            self._drawn = True
            self.stream.flush()

    def end(self) -> None:
        """Leave the live line as it last read, and the cursor on a line of its own."""
        with self._lock:
            if self.live and self._drawn:
                self.stream.write("\r\x1b[K" + bar_line(self.progress, self.width()) + "\n")
                self.stream.flush()
                self._drawn = False

    @contextlib.contextmanager
    def ticking(self) -> Iterator[BenchPrinter]:
        """Redraw the live line every second (the elapsed time and ETA move) while the block runs."""
        try:
            with every_second(self.redraw, "kevin-bench-progress"):
                yield self
        finally:
            self.end()

    # --- the bench's events -----------------------------------------------------------------
    def bench_started(self, bench_id: str, bench_dir: Path, tasks: int, done: int, where: str) -> None:
        self.progress.total, self.progress.done_before = tasks, done
        again = f", {done} done before" if done else ""
        self._line(f"kevin-opt: bench {bench_id}: {tasks} tasks{again}, {where}; folder {bench_dir}")

    def task_started(self, task_id: str) -> None:
        self.progress.running.add(task_id)
        if not self.live:
            self._line(f"kevin-opt: [{task_id}] started ({self.progress.summary()})")
        else:
            self.redraw()

    def task_event(self, task_id: str, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self._turns[task_id] = event.turns
            if not self.live:
                resumed = f", resuming after {event.resumed_turns} turns" if event.resumed_turns else ""
                self._line(f"kevin-opt: [{task_id}] run {event.run_id}: {event.trajectories} x {event.turns} turns on "
                           f"{event.device} ({event.device_name}){resumed}")
        elif isinstance(event, ev.TurnFinished) and not self.live:
            rec = event.record
            self._line(f"[{task_id} t{rec.trajectory} turn {rec.turn}/{self._turns.get(task_id, '?')}] {turn_line(rec)}")
        elif isinstance(event, ev.Notice) and event.level != "info":
            self._line(f"kevin-opt: [{task_id}] {event.level}: {event.text()}")

    def task_finished(self, result: TaskResult, recorded: bool) -> None:
        self.progress.running.discard(result.task_id)
        if not recorded:
            self._line(f"kevin-opt: [{result.task_id}] came back again (ran twice); its first result stands")
            return
        self.progress.done += 1
        self.progress.failed += result.status == "failed"
        self.progress.correct += result.correct
        self._line(f"kevin-opt: [{self.progress.finished}/{self.progress.total}] {result.task_id}: "
                   f"{result_words(result)}" + ("" if self.live else f" · {self.progress.summary()}"))

    def note(self, text: str) -> None:
        self._line(f"kevin-opt: {text}")


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns
