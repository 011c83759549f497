"""``kevin-opt profile MODEL`` on a terminal: the profile screen first, then the run it starts, in
the same app and ending the same way as ``kevin-opt FILE`` does (``finish``)."""

from __future__ import annotations

from pathlib import Path

from ..config import EvalSettings, RunConfig
from ..model.extract import default_task_path, extract_task
from ..model.marks import extracted_from
from ..model.modelfile import ModelError, ModelFile
from ..model.profile import profile_model
from ..model.records import ModuleGroup
from ..run import finish
from ..store import default_runs_root
from .app import KevinApp
from .screens.profile import ProfileScreen


class ProfileApp(KevinApp):
    """The app with the profile screen in front of the run screen."""

    def __init__(self, model_file: ModelFile, config: RunConfig, settings: EvalSettings, *, forwards: int,
                 registry=None, **kwargs) -> None:
        super().__init__(runs_root=config.run_dir or default_runs_root(model_file.path.parent), **kwargs)
        self.model_file, self.config, self.settings, self.registry = model_file, config, settings, registry
        self.profile_screen = ProfileScreen(model_file.given, lambda: profile_model(model_file, settings,
                                                                                    forwards=forwards),
                                            self.extract_and_run)

    def on_mount(self, event) -> None:
        # In place of the base app's start (a run, or the history): the profile screen.
        event.prevent_default()
        self._install_signal_handlers()
        self.add_mode("run", lambda: self.run_screen)
        self.add_mode("profile", lambda: self.profile_screen)
        self.switch_mode("profile")

    def extract_and_run(self, group: ModuleGroup) -> None:
        """In a worker thread: the task file for ``group`` (one extracted before for the same modules
        is written again), then the run on it."""
        from ..run.launch import start_run

        task = task_path_for(self.model_file, group.members)
        extract_task(self.model_file, group.path, task, self.settings, replace=task.exists())
        self.call_from_thread(self.switch_mode, "run")
        self.call_from_thread(self.start_engine, lambda sink: start_run(self.config, task, sink,
                                                                        registry=self.registry))


def task_path_for(model_file: ModelFile, members: list[str]) -> Path:
    """Where the task for the group of ``members`` goes: beside the model; a file there that is not
    this group's extracted task is never overwritten."""
    task = default_task_path(model_file, members)
    path = members[0]
    if task.exists():
        meta = extracted_from(task.read_text(encoding="utf-8", errors="replace"))
        if meta is None or path not in meta.paths or meta.model_file != model_file.name:
            raise ModelError(f"{task}: exists and is not the task extracted for `{path}`",
                             "move it away, or extract with kevin-opt extract -o another path")
    return task


def profile_tui(model_file: ModelFile, config: RunConfig, settings: EvalSettings, *, forwards: int) -> int:
    from ..registry import build_registry
    from . import _close

    registry = build_registry()
    app = ProfileApp(model_file, config, settings, forwards=forwards, registry=registry, exit_on_start_error=True,
                     handle_signals=True)
    app.run()
    return _close(app, finish.Outputs(), registry)
