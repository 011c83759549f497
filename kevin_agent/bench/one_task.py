"""One task of a bench: its run from open to confirmation, on a backend the bench gives it, nothing
delivered; the same on this machine and inside a Ray task on another.

A task that cannot start (its file does not load, the script folder has none for it) or whose run
stops on an error is a failed row, and the bench goes on. An interrupted run is left interrupted in
the runs folder, where ``resume`` takes it up from its last finished turn.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig
from ..errors import KevinError
from ..protocols import Backend, EventSink
from ..registry import Registry
from ..results.bench import BenchTask, TaskResult
from ..results.scoring import task_result
from ..run.session import RunSession
from ..store import RunStore, list_runs


@dataclass
class TaskOutcome:
    result: TaskResult | None
    """None: the task's run was interrupted (a signal), and is resumable."""
    run_id: str | None = None


def failed(task: BenchTask, error: str, **fields) -> TaskResult:
    return TaskResult(task_id=task.task_id, path=task.path, level=task.level, status="failed", error=error,
                      node=socket.gethostname(), **fields)


def unfinished_run(runs_root: Path, task_path: Path) -> RunStore | None:
    """The newest run of ``task_path`` under ``runs_root`` that did not end (interrupted, or killed),
    to resume from its last finished turn."""
    for info, _ in list_runs(runs_root):
        if Path(info.task.path) == task_path and info.status in ("interrupted", "failed", "running"):
            return RunStore(runs_root / info.run_id, info)
    return None


def run_task(task: BenchTask, config: RunConfig, runs_root: Path, *, backend: Backend, registry: Registry,
             sink: EventSink, task_path: Path | None = None,
             on_engine: Callable[[object | None], None] = lambda engine: None) -> TaskOutcome:
    """Run ``task`` (its file at ``task_path``, default ``task.path``) with ``config`` into
    ``runs_root`` on ``backend``; an unfinished run of it there is resumed. ``on_engine`` hears the
    engine once it runs (to attach signal handlers) and None once it has ended."""
    path = Path(task_path or task.path)
    started = time.monotonic()
    config = config.model_copy(update={"run_dir": runs_root, "commit": False})
    previous = unfinished_run(runs_root, path)
    names = [path.stem]
    if previous is not None:
        previous.take()
        overrides = {"turns": config.turns}
        session = RunSession.resumed(previous, overrides=overrides, registry=registry, backend=backend, names=names)
    else:
        session = RunSession.new(config, path, registry=registry, backend=backend, names=names)
    try:
        try:
            engine = session.open(sink)
        except KevinError as exc:
            error = exc.message + (f"\nhint: {exc.hint}" if exc.hint else "")
            return TaskOutcome(failed(task, error, wall_s=round(time.monotonic() - started, 2)))
        on_engine(engine)
        try:
            ending = session.drive()
        finally:
            on_engine(None)
        info, records = engine.store.info, engine.store.records()
        if ending.interrupted:
            return TaskOutcome(None, run_id=info.run_id)
        fields = dict(task_id=task.task_id, path=task.path, level=task.level, node=socket.gethostname(),
                      wall_s=round(time.monotonic() - started, 2))
        if ending.error is not None:
            return TaskOutcome(task_result(info, records, status="failed", error=str(ending.error), **fields),
                               run_id=info.run_id)
        return TaskOutcome(task_result(info, records, status="done", **fields), run_id=info.run_id)
    finally:
        session.release()
