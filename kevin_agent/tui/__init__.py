"""The interactive front end: ``kevin-opt FILE``, ``kevin-opt resume RUN`` and ``kevin-opt history``
on a terminal. The run ends through ``finish`` as a headless one does."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..run import finish
from ..run.session import RunSession
from .app import KevinApp

if TYPE_CHECKING:
    from ..registry import Registry

__all__ = ["KevinApp", "history_tui", "run_tui"]


def run_tui(session: RunSession, *, runs_root: Path | None, outputs: finish.Outputs, registry: Registry) -> int:
    """Run (or resume) with the run screen open; returns the exit code of the headless contract."""
    app = KevinApp(session, runs_root=runs_root, exit_on_start_error=True, replace=session.replace,
                   accept_flagged=session.accept_flagged, handle_signals=True)
    app.run()
    return _close(app, outputs, registry)


def history_tui(runs_root: Path, registry: Registry, benches_root: Path | None = None) -> int:
    """Browse what is stored (runs, optimizes, benches); a run resumed from here runs in the same
    window and ends the same way."""
    app = KevinApp(runs_root=runs_root, benches_root=benches_root, handle_signals=True)
    app.run()
    return _close(app, finish.Outputs(), registry)


def _close(app: KevinApp, outputs: finish.Outputs, registry: Registry) -> int:
    ending = app.ending()
    session = app.session
    if session is None:
        ending.run_asked = False  # the history, browsed and left
        code = finish.close(ending, outputs, registry)
    else:
        unanswered = ending.plan is not None and ending.delivery is None
        if session.engine is not None and ending.wants_delivery() and unanswered:
            session.deliver(declined=True)  # the app was left with the question open: that is a no
        session.as_it_stands()
        code = session.close(outputs, registry)
    if app.abandoned:
        # A second signal: the engine's thread may still be unwinding; do not wait for it.
        sys.stderr.flush()
        os._exit(code)
    return code
