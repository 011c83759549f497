"""Run workers started ahead of need.

A run worker spends most of its life getting ready: starting Python, importing torch, making a
CUDA context, importing the task, building the reference and loading the reference data take
seconds, while a candidate's own load, checks and timing take about one. So workers are started
before they are needed and wait, blocked on their pipe, for one candidate each. A worker that
had its candidate exits; none is ever given a second one, and none has run model code before.

How many wait: as many as candidates will need one soon (submitted and not yet given a
worker), at least one while the evaluator is open, at most ``size``; on cuda also only while
the GPU has room for another (each holds a CUDA context, about 500 MB, and the task's data).
While a timing runs nothing else may load the machine. On the cpu device a worker getting ready
is stopped for it (``DeviceGate.pausable``). On cuda it is not: a process stopped inside the CUDA
driver (making its context, copying the reference data) may hold what the timing's own calls wait
for, so there a worker does its imports (seconds of host work, stopped like a cpu worker while a
timing runs) first and then asks for the device (``want device``), and gets ready from there as a
sharer of it (``DeviceGate.shared``): a timing waits for the workers already using the device,
and none starts using it while a timing runs. A replacement started beside a candidate no longer
holds that candidate's timing back for the length of its imports.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable

from .gate import DeviceGate, GaveUp, Holding
from .logs import tail
from ...workers import Go, Limit, Message, WorkerProcess, WorkerSet

_FAILURES_IN_A_ROW = 2


class WorkerFailed(Exception):
    """Workers cannot get ready (the task, the reference data or the machine is the problem);
    ``kind`` is the worker's own word for it (``task``, ``harness``: out of memory), if it said."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class WarmPool:
    def __init__(self, start: Callable[[], WorkerProcess], *, size: int, gate: DeviceGate,
                 give_up: Callable[[], bool], prep_limit: Limit, registry: WorkerSet,
                 room: Callable[[], bool] = lambda: True, share_device: bool = False) -> None:
        self._start, self.size, self._gate, self._give_up = start, size, gate, give_up
        self._share_device = share_device
        self.prep_limit, self._registry, self._room = prep_limit, registry, room
        self._cond = threading.Condition()
        self._ready: deque[WorkerProcess] = deque()
        self._starting = 0
        self._expected = 0
        self._open = False
        self._closed = False
        self._failures = 0
        self._failure = ""
        self._failure_kind = ""
        self.started = 0
        """Workers started so far (each for one candidate)."""

    def open(self) -> None:
        """Start warming (the reference data exists from now on)."""
        with self._cond:
            self._open = True
            self._top_up()

    def need(self) -> Need:
        """One more candidate will need a worker: counted from now until it takes one
        (``Need.take``) or gives the need up (``Need.drop``, or the end of its ``with`` block)."""
        return Need(self)

    def _expect(self, n: int) -> None:
        with self._cond:
            self._expected = max(self._expected + n, 0)
            self._top_up()

    def ready_count(self) -> int:
        """Workers waiting for a candidate right now."""
        with self._cond:
            return len(self._ready)

    def _take(self) -> WorkerProcess:
        """A ready worker of its own for one candidate; raises ``WorkerFailed`` or ``GaveUp``."""
        with self._cond:
            while not self._ready:
                if self._failure:
                    raise WorkerFailed(self._failure, self._failure_kind)
                if self._closed or self._give_up():
                    raise GaveUp()
                self._top_up()
                self._cond.wait(0.1)
            worker = self._ready.popleft()
            self._expected = max(self._expected - 1, 0)
            self._top_up()
            return worker

    def close(self) -> None:
        """Stop the waiting workers and remove their folders; none starts after this."""
        with self._cond:
            self._closed = True
            idle, self._ready = list(self._ready), deque()
            self._cond.notify_all()
        for worker in idle:
            self._registry.discard(worker)
            worker.remove()

    def _top_up(self) -> None:
        if not self._open or self._closed or self._failure:
            return
        target = min(self.size, max(1, self._expected))
        while len(self._ready) + self._starting < target:
            if len(self._ready) + self._starting and not self._room():
                break
            self._starting += 1
            threading.Thread(target=self._warm, name="kevin-warm", daemon=True).start()

    def _warm(self) -> None:
        worker: WorkerProcess | None = None
        problem = kind = ""
        # A worker is stopped while a timing runs until it asks for the device: its imports are
        # host work, which neither waits for a timing nor may disturb one. Sharing the device, it
        # holds the gate from then until it waits for its candidate (never stopped there).
        holding = Holding(self._gate, self._give_up)
        stoppable = contextlib.ExitStack()

        def answer(what: str) -> Message:
            if what == "device" and self._share_device:
                stoppable.close()
                holding.share()
            return Go()
        try:
            worker = self._start()
            self._registry.add(worker)
            self.started += 1
            try:
                stoppable.enter_context(self._gate.pausable(worker.pid))
                exceeded = worker.follow(limit=lambda _: self.prep_limit, stop_at="candidate", answer=answer)
            finally:
                stoppable.close()
                holding.release()
            if worker.waiting_for != "candidate" and not (self._closed or self._give_up()):
                run = worker.result(exceeded)
                kind = run.error_kind
                problem = (run.reply.error if run.reply is not None and run.reply.error else
                           f"it ran past {exceeded.seconds:g} s" if exceeded else f"{run.died()}\n{tail(run.log)}")
        except Exception as exc:  # e.g. no process could be started: say so to whoever waits
            problem = f"{type(exc).__name__}: {exc}"
        with self._cond:
            self._starting -= 1
            if worker is not None and worker.waiting_for == "candidate" and not self._closed:
                worker.output()  # what it printed getting ready is not its candidate's
                self._ready.append(worker)
                self._failures = 0
            else:
                if worker is not None:
                    self._registry.discard(worker)
                    worker.remove()
                if problem:
                    self._failures += 1
                    if self._failures >= _FAILURES_IN_A_ROW:
                        self._failure = f"an evaluation worker could not get ready: {problem.strip()}"
                        self._failure_kind = kind
                    else:
                        self._top_up()
            self._cond.notify_all()


class Need:
    """One candidate's claim on a warm worker, so that the pool keeps as many ready as will be
    taken: it counts from its making until the worker is taken, or until it is dropped."""

    def __init__(self, pool: WarmPool) -> None:
        self._pool = pool
        self._open = True
        pool._expect(1)

    def take(self) -> WorkerProcess:
        """The candidate's worker (the claim ends); raises ``WorkerFailed`` or ``GaveUp`` (it stands)."""
        worker = self._pool._take()
        self._open = False
        return worker

    def drop(self) -> None:
        """The candidate will not need a worker after all (nothing happens once one was taken)."""
        if self._open:
            self._open = False
            self._pool._expect(-1)

    def __enter__(self) -> Need:
        return self

    def __exit__(self, *exc) -> None:
        self.drop()
