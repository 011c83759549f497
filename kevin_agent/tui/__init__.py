"""The interactive front end: ``kevin-opt FILE`` and ``kevin-opt history`` on a terminal."""

from __future__ import annotations

import sys
from pathlib import Path

from ..config import RunConfig
from ..console import print_error
from ..store import default_runs_root
from .app import KevinApp

__all__ = ["KevinApp", "history_tui", "run_tui"]


def run_tui(config: RunConfig, task_file: Path) -> int:
    """Run the refinement with the run screen open; returns the exit code of the headless contract."""
    from ..launch import start_run

    task_file = Path(task_file)
    runs_root = config.run_dir or default_runs_root(task_file.expanduser().resolve().parent)
    app = KevinApp(lambda sink: start_run(config, task_file, sink), runs_root=runs_root, exit_on_start_error=True)
    app.run()
    if app.start_error is not None:
        return print_error(app.start_error)
    if app.outcome is None and app.engine is not None:
        print(
            f"kevin-opt: stopped; finished turns are saved. Continue with: "
            f"kevin-opt resume {app.engine.store.info.run_id}",
            file=sys.stderr,
        )
    elif app.outcome is not None and app.outcome.reason in ("stopped", "interrupted"):
        print(f"kevin-opt: run {app.outcome.reason}; continue with: kevin-opt resume {app.outcome.run_id}",
              file=sys.stderr)
    for note in app.delivery.notes if app.delivery is not None else []:
        print(f"kevin-opt: {note}", file=sys.stderr)
    return app.return_code or app.exit_code


def history_tui(runs_root: Path) -> int:
    """Browse stored runs; a run resumed from here runs in the same window."""
    app = KevinApp(runs_root=runs_root)
    app.run()
    return app.return_code or app.exit_code
