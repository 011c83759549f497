"""SIGINT, SIGTERM and SIGHUP end a run the same way, headless or in the TUI.

The first signal aborts the engine (``Engine.abort``: the generation stops, every worker and
compiler process group of the run is killed, the turns in flight are dropped), the run is
recorded as interrupted with its best so far, and the process exits with 128 + the signal's
number after printing how to resume. Before the engine exists (the task is being probed, the
model loaded) there is nothing to record, and a second signal means "now": both unwind at once
with ``Interrupted``.

This module is the headless side, where the engine runs in the main thread; the TUI routes the
same signals through its event loop (``tui.app``).
"""

from __future__ import annotations

import os
import signal
import sys
import termios
import threading
import time
from types import FrameType

from ..workers import kill_all_workers

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """Unwinds the main thread after a signal: a ``KeyboardInterrupt`` that knows its signal, so
    whatever already ends cleanly on Ctrl+C (the engine records the run as interrupted) does so
    for SIGTERM and SIGHUP too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def kill_run_processes() -> None:
    """Every worker and compiler this process started, with their process groups."""
    kill_all_workers()


class Terminal:
    """The standard streams that were a terminal when the run began.

    After SIGHUP that terminal is gone: a write to it fails, or blocks for good once nobody reads
    it, and a thread that writes for the process (the TUI's output thread) dies or hangs. So on a
    hangup those streams are pointed at /dev/null: whatever is still said goes nowhere, and the
    run ends as it would on any other signal."""

    def __init__(self) -> None:
        self.fds = [fd for fd in (0, 1, 2) if _isatty(fd)]

    def gone(self) -> None:
        """After SIGHUP: the streams whose terminal was hung up now write to /dev/null. A SIGHUP
        sent with the terminal still there (``kill -HUP``) leaves them be, so that what the run
        says about its end is still read."""
        hung_up = [fd for fd in self.fds if _hung_up(fd)]
        if not hung_up:
            return
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in hung_up:
                os.dup2(null, fd)
        finally:
            os.close(null)
        self.fds = [fd for fd in self.fds if fd not in hung_up]


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _hung_up(fd: int) -> bool:
    # A hung-up terminal answers every request with EIO (the kernel swaps its file operations
    # before it sends SIGHUP).
    try:
        termios.tcgetattr(fd)
        return False
    except termios.error:
        return True


class Deadline:
    """Ends the process at a deadline unless cancelled first: the last resort when what should
    end it (the event loop, a thread) is stuck. The run's state is on disk by then (turns are
    appended as they end), and a dead owner holds no lock, so the run shows as interrupted."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._due: float | None = None
        self._lock = threading.Lock()

    def arm(self, seconds: float, code: int) -> None:
        """Exit with ``code`` in ``seconds`` (an earlier deadline already armed stands)."""
        with self._lock:
            due = time.monotonic() + seconds
            if self._due is not None and self._due <= due:
                return
            self._due = due
        threading.Thread(target=self._wait, args=(due, code), name="kevin-deadline", daemon=True).start()

    def cancel(self) -> None:
        self._cancelled.set()

    def _wait(self, due: float, code: int) -> None:
        if self._cancelled.wait(max(0.0, due - time.monotonic())):
            return
        with self._lock:
            if self._due != due:
                return  # an earlier deadline took over
        kill_run_processes()
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)


class HeadlessSignals:
    """The signal handlers of a headless run, installed for the ``with`` block.

    Phases: launching (no engine: a signal unwinds the launch), running (``attach``ed: a signal
    aborts the engine and the run ends normally as "interrupted"), finishing (``detach``ed: a
    signal is remembered and the delivery in progress completes). A second signal unwinds in
    any phase.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._terminal = Terminal()
        self._engine = None
        self._finishing = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> HeadlessSignals:
        for sig in HANDLED:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def attach(self, engine) -> None:
        self._engine = engine

    def detach(self) -> None:
        self._engine, self._finishing = None, True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._terminal.gone()  # the progress lines would fail on it
        first = self.signum is None
        if first:
            self.signum = signum
        # Killing takes locks the interrupted main thread may hold: it happens in a thread of its own.
        if first and self._engine is not None:
            threading.Thread(target=self._engine.abort, name="kevin-abort", daemon=True).start()
            return
        if first and self._finishing:
            return
        threading.Thread(target=kill_run_processes, name="kevin-kill", daemon=True).start()
        raise Interrupted(signum)
