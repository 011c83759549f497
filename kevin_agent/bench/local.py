"""One machine, no service (the default): the bench's tasks one after another on this machine's
device, all on one backend (Kevin loaded once), each a ``RunSession`` with no delivery.

Signals: a signal aborts the task's run in flight (recorded as interrupted in ``runs/``, resumed
from its last finished turn by ``kevin-opt resume BENCH``); every task that had ended is already in
``tasks.jsonl``. A second signal unwinds at once.
"""

from __future__ import annotations

from ..config import RunConfig
from ..protocols import BenchSink
from ..registry import Registry
from ..run.interrupts import HeadlessSignals
from .driver import TaskEvents, device_name_of, finish_task
from .one_task import run_task
from .store import BenchStore


class _Attach:
    """Hands each task's engine to the signal handlers; a signal that came between two tasks (or
    while the next one opened) stops the next one as soon as it runs."""

    def __init__(self, signals: HeadlessSignals) -> None:
        self.signals = signals

    def __call__(self, engine) -> None:
        if engine is None:
            self.signals.detach()
            return
        self.signals.attach(engine)
        if self.signals.signum is not None:
            engine.abort()


def run_local(store: BenchStore, config: RunConfig, backend, registry: Registry, sink: BenchSink,
              signals: HeadlessSignals) -> bool:
    """Run the bench's pending tasks in turn on ``backend``; False when a signal stopped it."""
    attach = _Attach(signals)
    device_name = device_name_of(store)
    for task in store.pending():
        if signals.signum is not None:
            return False
        sink.task_started(task.task_id)
        outcome = run_task(task, config, store.runs_root, backend=backend, registry=registry,
                           sink=TaskEvents(sink, task.task_id), on_engine=attach)
        if outcome.result is None:
            return False
        device_name = device_name or device_name_of(store)
        finish_task(store, outcome.result, sink, device_name=device_name)
    return signals.signum is None
