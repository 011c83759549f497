"""Who may use the evaluation device, and when.

Work whose speed does not matter shares the device: correctness checks and the model's
generation on the evaluation GPU. Timing has it alone: it starts once every sharer is gone,
and while a timing waits, new checks wait behind it (the model's generation does not: it is
never held up by a queue, only by a timing in progress, which is short). Work that only loads
the processor (builds, workers getting ready) is not waited for: its process groups are
stopped (SIGSTOP) while a timing runs and continued after it, so a timing never shares the
machine with a compiler.

Within this process a condition variable keeps the count; a ``flock`` on a file in the build
cache (shared or exclusive) extends the same rule to every kevin-opt process on the machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

_POLL_S = 0.02


class GaveUp(Exception):
    """A wait was abandoned: the evaluator was aborted, or the worker waited on is gone."""


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class DeviceGate:
    def __init__(self, lock_path: Path) -> None:
        self.lock_path = lock_path
        self._cond = threading.Condition()
        self._sharers = 0
        self._timing = False
        self._timings_waiting = 0
        self._generating = 0
        self._closed = False
        self._pausable: set[int] = set()

    def close(self) -> None:
        """Every wait ends with ``GaveUp`` from now on (the evaluator is aborted or closed)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _wait(self, ready: Callable[[], bool], give_up: Callable[[], bool] | None) -> None:
        while not ready():
            if self._closed or (give_up is not None and give_up()):
                raise GaveUp()
            self._cond.wait(_POLL_S * 5)
        if self._closed:
            raise GaveUp()

    @contextlib.contextmanager
    def _flocked(self, mode: int, give_up: Callable[[], bool] | None, release: Callable[[], None]) -> Iterator[None]:
        """The same hold across processes; ``release`` gives back the in-process one."""
        try:
            fd = self._flock(mode, give_up)
            try:
                yield
            finally:
                os.close(fd)
        finally:
            release()

    def _flock(self, mode: int, give_up: Callable[[], bool] | None) -> int:
        """An open descriptor of the lock file holding ``mode``. The wait is a blocking ``flock``
        on a thread of its own (polling would lose every time to processes that block), which
        the caller can abandon: the thread then lets go of the lock as soon as it gets it."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        got = threading.Event()
        abandoned = threading.Event()
        handoff = threading.Lock()

        def block() -> None:
            try:
                fcntl.flock(fd, mode)
            except OSError:
                pass
            with handoff:
                got.set()
                if abandoned.is_set():
                    os.close(fd)

        threading.Thread(target=block, name="kevin-flock", daemon=True).start()
        while not got.wait(_POLL_S * 5):
            if self._closed or (give_up is not None and give_up()):
                with handoff:
                    if not got.is_set():
                        abandoned.set()
                        raise GaveUp()
                os.close(fd)
                raise GaveUp()
        return fd

    @contextlib.contextmanager
    def shared(self, *, patient: bool = True, give_up: Callable[[], bool] | None = None) -> Iterator[None]:
        """Use the device alongside others. ``patient`` sharers also wait for queued timings
        (unless an impatient one, the model's generation, holds them up anyway)."""
        with self._cond:
            self._wait(lambda: not self._timing and not (patient and self._timings_waiting and not self._generating),
                       give_up)
            self._sharers += 1
            self._generating += not patient
        with self._flocked(fcntl.LOCK_SH, give_up, lambda: self._release_shared(patient)):
            yield

    def _release_shared(self, patient: bool) -> None:
        with self._cond:
            self._sharers -= 1
            self._generating -= not patient
            self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self, *, give_up: Callable[[], bool] | None = None) -> Iterator[None]:
        """Use the device alone (timing)."""
        with self._cond:
            self._timings_waiting += 1
            try:
                self._wait(lambda: not self._timing and not self._sharers, give_up)
            finally:
                self._timings_waiting -= 1
                self._cond.notify_all()
            self._timing = True
        with self._flocked(fcntl.LOCK_EX, give_up, self._release_exclusive):
            with self._cond:
                for pgid in self._pausable:
                    _signal_group(pgid, signal.SIGSTOP)
            yield

    def _release_exclusive(self) -> None:
        with self._cond:
            self._timing = False
            for pgid in self._pausable:
                _signal_group(pgid, signal.SIGCONT)
            self._cond.notify_all()

    @contextlib.contextmanager
    def pausable(self, pgid: int) -> Iterator[None]:
        """Process group ``pgid`` (a build, a worker getting ready) is stopped while a timing runs."""
        with self._cond:
            self._pausable.add(pgid)
            if self._timing:
                _signal_group(pgid, signal.SIGSTOP)
        try:
            yield
        finally:
            with self._cond:
                self._pausable.discard(pgid)
            _signal_group(pgid, signal.SIGCONT)


class Holding:
    """What one worker holds of the gate; it moves from shared to exclusive when the worker
    asks to time, and lets go of everything when the worker is done."""

    def __init__(self, gate: DeviceGate, give_up: Callable[[], bool]) -> None:
        self.gate, self.give_up = gate, give_up
        self._stack = contextlib.ExitStack()

    def share(self) -> None:
        self.release()
        self._stack.enter_context(self.gate.shared(give_up=self.give_up))

    def take(self) -> None:
        self.release()
        self._stack.enter_context(self.gate.exclusive(give_up=self.give_up))

    def release(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
