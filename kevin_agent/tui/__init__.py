"""The interactive front end: ``kevin-opt FILE``, ``kevin-opt resume RUN`` and ``kevin-opt history``
on a terminal. The run ends through ``finish`` as a headless one does."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..run import finish
from .app import EngineFactory, KevinApp

if TYPE_CHECKING:
    from ..registry import Registry

__all__ = ["KevinApp", "history_tui", "run_tui"]


def run_tui(start: EngineFactory, *, runs_root: Path | None, outputs: finish.Outputs, registry: Registry,
            replace: bool = False, accept_flagged: bool = False, run_id: str | None = None) -> int:
    """Run (or resume) with the run screen open; returns the exit code of the headless contract."""
    app = KevinApp(start, runs_root=runs_root, exit_on_start_error=True, replace=replace,
                   accept_flagged=accept_flagged, handle_signals=True)
    app.run()
    return _close(app, outputs, registry, run_id)


def history_tui(runs_root: Path, registry: Registry) -> int:
    """Browse stored runs; a run resumed from here runs in the same window and ends the same way."""
    app = KevinApp(runs_root=runs_root, handle_signals=True)
    app.run()
    return _close(app, finish.Outputs(), registry, None)


def _close(app: KevinApp, outputs: finish.Outputs, registry: Registry, run_id: str | None) -> int:
    ending = app.ending()
    ending.run_id = run_id
    ending.run_asked = app.has_run or app.engine_factory is not None
    engine = ending.engine
    if engine is not None and ending.wants_delivery() and ending.delivery is None and ending.plan is not None:
        # The app was left with the question open: that is a no.
        ending.delivery = finish.execute(engine, ending.plan, app.plan_records, declined=True)
    if engine is not None and ending.delivery is not None:
        ending.delivery = finish.as_it_stands(engine, ending.delivery, replace=app.replace,
                                              accept_flagged=app.accept_flagged)
    try:
        code = finish.close(ending, outputs, registry)
    finally:
        if engine is not None:
            engine.store.release()
    if app.abandoned:
        # A second signal: the engine's thread may still be unwinding; do not wait for it.
        sys.stderr.flush()
        os._exit(code)
    return code
