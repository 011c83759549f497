"""``kevin-opt optimize MODEL`` on a terminal: the model screen, with the optimize in a worker thread.

The optimize (``optimize.OptimizeSession``) reports through ``protocols.OptimizeProgress``; here
that becomes messages carrying a copy of the record, so the model screen redraws from the record
alone. Each group's run gets a run screen of its own, fed through the app's ``TuiSink`` while it
runs (runs go one at a time); a run finished before this window opened is read from the store.
Quitting asks, as a run does, and aborts the optimize resumably; SIGINT, SIGTERM and SIGHUP do
the same and end with 128 + the signal. Before the one delivery writes anything the person is
asked (``OptimizeSession.consent``); ``--no-commit`` still never commits.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path

from textual import work
from textual.binding import Binding
from textual.message import Message
from textual.worker import Worker, WorkerState

from ..errors import ExitCode, KevinError
from ..events import RunFinished, RunStarted
from ..protocols import EventSink
from ..results.optimize import GroupRun, OptimizeRecord
from ..run.interrupts import signal_name
from ..store import read_info, read_records
from .app import KevinApp
from .screens.dialogs import ConfirmScreen, ErrorScreen
from .screens.model import ModelScreen, whole_model_words
from .screens.run import REASONS, RunScreen

ENDINGS = {"delivered": "$text-success", "written": "$text-success", "interrupted": "$text-warning",
           "nothing": "$text-warning", "refused": "$text-warning", "failed": "$text-error"}


class OptimizeChanged(Message):
    """The optimize's record changed (a copy, as it was saved)."""

    def __init__(self, record: OptimizeRecord) -> None:
        super().__init__()
        self.record = record


class OptimizeNote(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ScreenProgress:
    """``protocols.OptimizeProgress`` for the app: every call, from the optimize's thread, becomes a
    message; a group's run gets its run screen made on the app's thread before its first event."""

    def __init__(self, app: OptimizeApp) -> None:
        self.app = app

    def planned(self, record: OptimizeRecord) -> None:
        self.app.post_message(OptimizeChanged(record.model_copy(deep=True)))

    def group_changed(self, record: OptimizeRecord, group: GroupRun) -> None:
        self.app.post_message(OptimizeChanged(record.model_copy(deep=True)))

    def run_events(self, record: OptimizeRecord, group: GroupRun) -> EventSink:
        self.app.call_from_thread(self.app.group_run_started, group.name)
        self.note(f"running {group.name}: enter opens its run")
        return self.app.sink

    def note(self, text: str) -> None:
        self.app.post_message(OptimizeNote(text))

    def combined(self, record: OptimizeRecord) -> None:
        self.app.post_message(OptimizeChanged(record.model_copy(deep=True)))


class GroupRunScreen(RunScreen):
    """A group's run, as ``kevin-opt FILE`` shows a run, with the way back to the model."""

    BINDINGS = [Binding("escape,m", "app.show_model", "Model", tooltip="Back to the model screen")]


def stored_run_screen(run_dir: Path, clock) -> GroupRunScreen:
    """A run of the store, finished or interrupted, on a run screen of its own."""
    info = read_info(run_dir)
    done = len(read_records(run_dir))
    screen = GroupRunScreen(clock, id=f"run-{info.run_id}")
    screen.apply(RunStarted(run_id=info.run_id, run_dir=str(run_dir), task=info.task.name, device=info.device,
                            device_name=info.device_name, backend=info.backend, model=info.model, turns=info.turns,
                            trajectories=info.trajectories, resumed_turns=done))
    reason = info.status if info.status in REASONS else "interrupted"
    screen.apply(RunFinished(run_id=info.run_id, reason=reason, best=info.best, turns_done=done))
    return screen


class OptimizeApp(KevinApp):
    """The app with the model screen; without an optimize it is the run app (``KevinApp``)."""

    def __init__(self, optimize=None, *, clock=time.monotonic, **kwargs) -> None:
        """``optimize``: an ``OptimizeSession`` to drive at once (or later: ``start_optimize``)."""
        super().__init__(clock=clock, **kwargs)
        self._clock = clock
        self.optimize = optimize
        self.optimizing = False
        self.optimize_error: KevinError | None = None
        self.model_screen = ModelScreen(Path(optimize.record.model_file).name if optimize is not None else "")
        self.group_screens: dict[str, GroupRunScreen] = {}
        self._consent_answer: tuple[list[bool], threading.Event] | None = None

    @property
    def exit_code(self) -> int:
        if self.optimize is None:
            return super().exit_code
        if self.signum is not None:
            return ExitCode.for_signal(self.signum)
        code = self.optimize.record.exit_code
        return int(code) if code is not None else int(ExitCode.INTERRUPTED if self._quitting else ExitCode.NONE)

    def on_mount(self, event) -> None:
        if self.optimize is None:
            return  # the run app's start
        event.prevent_default()
        self._install_signal_handlers()
        self.start_optimize(self.optimize)

    # --- the optimize -------------------------------------------------------------------------
    def start_optimize(self, session) -> None:
        """Show the model screen and drive ``session`` in a worker."""
        self.optimize = session
        session.consent = self._consent
        self.model_screen.model_name = Path(session.record.model_file).name
        self.model_screen.show(session.record.model_copy(deep=True))
        if "model" not in self._modes:
            self.add_mode("model", lambda: self.model_screen)
        self.switch_mode("model")
        self.optimizing = True
        self._run_optimize(session)

    @work(thread=True, exclusive=True, group="optimize", exit_on_error=False)
    def _run_optimize(self, session) -> OptimizeRecord:
        if self.signum is not None or self._quitting:
            session.abort()  # the signal came while the model screen was being opened
        return session.run(ScreenProgress(self))

    def _say(self, text: str, style: str = "$text-accent") -> None:
        self.model_screen.say(text, style)

    def on_optimize_changed(self, message: OptimizeChanged) -> None:
        self.model_screen.show(message.record)

    def on_optimize_note(self, message: OptimizeNote) -> None:
        self._say(message.text)

    def group_run_started(self, name: str) -> None:
        """A group's run begins (or resumes): its events go to a run screen of its own from now on."""
        screen = GroupRunScreen(self._clock, id=f"run-{len(self.group_screens) + 1}")
        self.group_screens[name] = screen
        self.run_screen = screen

    def open_group_run(self, group: GroupRun) -> None:
        screen = self.group_screens.get(group.name)
        if screen is None and group.run_id is not None and self.optimize is not None:
            run_dir = self.optimize.store.root / group.run_id
            if run_dir.is_dir():
                screen = self.group_screens[group.name] = stored_run_screen(run_dir, self._clock)
        if screen is None:
            self.notify(f"{group.name} has no run yet ({group.state_words()})", severity="warning")
            return
        name = f"group-{id(screen)}"
        if not self.is_screen_installed(name):
            self.install_screen(screen, name=name)
        self.push_screen(name)

    def action_show_model(self) -> None:
        if isinstance(self.screen, GroupRunScreen):
            self.pop_screen()

    def action_close_history(self) -> None:
        if self.optimize is None:
            super().action_close_history()
        else:
            self.switch_mode("model")

    # --- consent ------------------------------------------------------------------------------
    def _consent(self, record: OptimizeRecord, paths: list[Path]) -> bool:
        """In the optimize's thread: ask before the delivery writes anything; an abort is a no."""
        answer, done = [False], threading.Event()
        self._consent_answer = (answer, done)
        if self.optimize is None or self.optimize.aborted:
            return False
        self.call_from_thread(self._ask_consent, record.model_copy(deep=True), paths)
        done.wait()
        return answer[0] and not self.optimize.aborted

    def _ask_consent(self, record: OptimizeRecord, paths: list[Path]) -> None:
        commit = self.optimize.config.commit
        kept = record.kept
        lines = [whole_model_words(record), *(f"  {g.name}: {g.speedup:.2f}x on its task" for g in kept),
                 "writes: " + ", ".join(p.name for p in paths),
                 "in one commit of exactly these files" if commit else "not committed (--no-commit)",
                 *([record.original] if record.original else [])]
        noun = f"{len(kept)} kernel{'s' if len(kept) != 1 else ''}"
        title = f"commit the {noun} into the model?" if commit else f"write the {noun} into the model?"
        self._say("the whole model ran with the kernels: deliver them?")
        self.push_screen(ConfirmScreen(title, "\n".join(lines), yes="Commit" if commit else "Write"),
                         lambda yes: self._answer_consent(bool(yes)))

    def _answer_consent(self, yes: bool) -> None:
        if self._consent_answer is not None:
            answer, done = self._consent_answer
            answer[0] = yes
            done.set()

    # --- how it ends --------------------------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group != "optimize":
            return
        event.prevent_default()
        self.refresh_bindings()
        if event.state is WorkerState.ERROR:
            self.optimizing = False
            error = worker.error
            if isinstance(error, KevinError):
                self.optimize_error = error
                if not (self.signum is not None or self._quitting):
                    self.notify(error.message + (f"\nhint: {error.hint}" if error.hint else ""), title="kevin-opt",
                                severity="error", timeout=30, markup=False)
            else:
                self.push_screen(ErrorScreen("unexpected error in the optimize", "".join(
                    traceback.format_exception(error))))
            self._ended()
        elif event.state is WorkerState.SUCCESS:
            self.optimizing = False
            self._ended()

    def _ended(self) -> None:
        record = self.optimize.record
        self.model_screen.show(record.model_copy(deep=True))
        if self.signum is not None or self._quitting:
            self.exit(self.exit_code)
            return
        words = {"delivered": record.notes[-1] if record.notes else "delivered",
                 "written": record.notes[-1] if record.notes else "written",
                 "interrupted": f"interrupted: continue with kevin-opt resume {record.optimize_id}"}
        said = record.why and record.why != record.status
        text = words.get(record.status, f"{record.status}: {record.why}" if said else record.status)
        self._say(text + " (q quits)", ENDINGS.get(record.status, "$text-muted"))

    # --- quitting and signals -----------------------------------------------------------------
    def on_unmount(self) -> None:
        # However the app ends, the optimize does not go on without a screen, nor wait for an answer.
        if self.optimize is not None and self.optimizing:
            self.optimize.abort()
            self._answer_consent(False)

    def action_quit(self) -> None:
        if self.optimize is None or not self.optimizing:
            super().action_quit()
            return
        body = ("An optimize is in progress. Quit? The module run in flight stops where it is; its finished "
                "turns and the finished module runs are kept.\nContinue it with kevin-opt resume "
                f"{self.optimize.record.optimize_id}.")
        self.confirm_quit(body, lambda: self.optimizing,
                          lambda: self._stop("quitting: the run in flight ends where it is (q again: now)"))

    def _stop(self, text: str) -> None:
        self._quitting = self._quitting or self.signum is None
        self.optimize.abort()
        self._answer_consent(False)
        self._say(text, "$text-warning")

    def action_exit_now(self) -> None:
        if self.optimize is not None and self.optimizing:
            self._quitting = True
            self.optimize.abort()
            self._answer_consent(False)
            self._abandoned = True
        super().action_exit_now()

    def interrupt(self, signum: int) -> None:
        if self.optimize is None:
            super().interrupt(signum)
            return
        if self.left_on_second_signal(self.optimizing):
            return
        self.signum = signum
        if self.optimizing:
            self._stop(f"{signal_name(signum)}: ending the optimize, resumably")
        else:
            self.exit(self.exit_code)


def optimize_tui(session) -> int:
    """``kevin-opt optimize`` (or ``resume`` of one) with the model screen open; the exit code of the
    headless contract."""
    app = OptimizeApp(session, runs_root=session.store.root, replace=session.replace,
                      accept_flagged=session.accept_flagged, handle_signals=True)
    app.run()
    return close_optimize(app)


def close_optimize(app: OptimizeApp) -> int:
    """After the app: the record holds the signal's exit code (as headless), a start error is raised
    for the command line to say, and how the optimize stands is left on the terminal."""
    from ..optimize import summary_lines

    session = app.optimize
    record = session.record
    code = app.exit_code
    if app.signum is not None:
        record.exit_code = code
        session.store.save()
    elif app.optimize_error is not None and not app._quitting:
        raise app.optimize_error
    lines = summary_lines(record) + record.notes[-2:]
    if record.status == "interrupted" or app.signum is not None:
        lines.append(f"interrupted; finished module runs are kept. Continue with: kevin-opt resume "
                     f"{record.optimize_id}")
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    if app.abandoned:
        os._exit(code)  # a second signal: the optimize's thread may still be unwinding
    return code
