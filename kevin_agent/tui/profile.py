"""``kevin-opt profile MODEL`` on a terminal: the profile screen first, then the run it starts, in
the same app and ending the same way as ``kevin-opt FILE`` does (``finish``).

The profile screen stays until the run has really started: a task file the person edited is not
replaced unasked, and a run that cannot start (no backend here, a server that does not answer)
is said on the profile screen with what to pass, instead of ending the app."""

from __future__ import annotations

from pathlib import Path

from ..config import EvalSettings, RunConfig
from ..errors import KevinError
from ..model.extract import capture_task, default_task_path
from ..model.marks import extracted_from
from ..model.modelfile import ModelError, ModelFile
from ..model.profile import profile_model
from ..model.records import ModuleGroup
from ..run import finish
from ..store import default_runs_root
from .app import KevinApp
from .screens.dialogs import ConfirmScreen
from .screens.profile import ProfileScreen

RUN_FLAGS = ("the run's flags go to kevin-opt profile itself: --backend, --model, --base-url, --responses, "
             "--turns, --trajectories (q quits)")


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
        """In a worker thread: the task file for ``group``, then the run on it. A task file already
        there that differs from a fresh extraction (an edit, or a changed model) is replaced only
        if the person says so."""
        task = task_path_for(self.model_file, group.members)
        source = capture_task(self.model_file, group.path, self.settings).source
        if task.exists() and task.read_text(encoding="utf-8", errors="replace") != source:
            self.call_from_thread(self._ask_replace, task, group.name or group.path, source)
            return
        if not task.exists():
            task.write_text(source, encoding="utf-8")
        self.call_from_thread(self.start_on, task)

    def _ask_replace(self, task: Path, path: str, source: str) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                task.write_text(source, encoding="utf-8")
                self.start_on(task)
            else:
                self.profile_screen.say(f"kept {task.name}; nothing was written and no run started. To run on it "
                                        f"as it is: kevin-opt {task.name}")

        body = (f"{task.name} differs from a fresh extraction of `{path}`: edited by hand, or the model changed "
                "since it was extracted.\nReplace it with the fresh extraction and start the run? No keeps "
                "your file as it is and starts nothing.")
        self.push_screen(ConfirmScreen(f"replace {task.name}?", body, yes="Replace and run", no="Keep mine",
                                       default=False), answered)

    def start_on(self, task: Path) -> None:
        """Start the run on ``task``; the run screen shows once the run has started."""
        from ..run.launch import start_run

        def start(sink):
            engine = start_run(self.config, task, sink, registry=self.registry)
            self.call_from_thread(self.switch_mode, "run")
            return engine

        self.profile_screen.say(f"starting the run on {task.name}: loading the task, then the {self.config.backend} "
                                "backend ...")
        self.start_engine(start)

    def _failed(self, worker) -> None:
        error = worker.error
        if (worker.group == "engine" and self.engine is None and isinstance(error, KevinError)
                and self.signum is None and not self._quitting):
            # The run never started: the profile screen is still there, and says what it needs.
            self.running = False
            self.profile_screen.start_failed(error, RUN_FLAGS)
            return
        super()._failed(worker)


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
