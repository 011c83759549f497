"""The Textual app: the run screen and the history screen, with the engine in a thread worker.

The engine never learns about the UI: it reports through a ``TuiSink`` (events become
messages) and is steered through its thread-safe ``request_stop`` / ``cancel_generation`` /
``abort``. Every worker failure lands in ``on_worker_state_changed``. The run's steps (open,
drive, plan, deliver) are its ``RunSession``'s, each called from a worker; how a run ends
(delivery plan, success rule, wording, exit code) is ``finish``'s: the app decides when to
deliver (it asks first: ``delivering``) and its session collects the ``Ending``. SIGTERM, SIGHUP
and an outside SIGINT arrive through the event loop and end the run as they do headless; they and
``q`` are ``quitting``'s.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import App
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.worker import Worker, WorkerState

from ..errors import KevinError, RunLocked
from ..formatting import confirmed_line
from ..protocols import EventSink
from ..run import finish
from ..run.session import RunSession
from ..store import default_runs_root, lock_owner
from .messages import (
    ConfirmationFinishedMessage,
    ConfirmationStartedMessage,
    EngineMessage,
    EvalStageMessage,
    GenerationFinishedMessage,
    NoticeMessage,
    RunFinishedMessage,
    RunStartedMessage,
    TokensReady,
    TuiSink,
    TurnFinishedMessage,
    TurnStartedMessage,
)
from .delivering import Delivering
from .notices import Notices
from .screens.dialogs import ErrorScreen, HelpScreen
from .screens.history import FINISHED, HistoryScreen
from .screens.run import RunScreen
from .quitting import Quitting
from .signals import AppSignals

if TYPE_CHECKING:
    from ..delivery import Delivery
    from ..engine.loop import Engine, RunOutcome

EngineFactory = Callable[[EventSink], "Engine"]
"""Opens the engine (``start_run`` / ``resume_run``); called in the worker thread."""
ResumeFactory = Callable[[str, EventSink], "Engine"]


class KevinApp(Delivering, Quitting, App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "kevin-opt"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Keys"),
        Binding("t", "toggle_theme", "Theme", show=False),
    ]

    def __init__(
        self,
        run: RunSession | EngineFactory | None = None,
        *,
        runs_root: Path | None = None,
        benches_root: Path | None = None,
        resume_factory: ResumeFactory | None = None,
        deliver_at_end: bool = True,
        exit_on_start_error: bool = False,
        replace: bool = False,
        accept_flagged: bool = False,
        handle_signals: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Open the run screen when ``run`` is given (a session, or what opens its engine), the
        history screen otherwise. ``replace``, ``accept_flagged``: those flags were given.
        ``handle_signals``: SIGINT, SIGTERM and SIGHUP end the run (the app owns the process, as
        ``kevin-opt`` on a terminal)."""
        super().__init__()
        self.first_run = run
        self.runs_root = Path(runs_root) if runs_root is not None else None
        self.benches_root = Path(benches_root) if benches_root is not None else None
        self.resume_factory = resume_factory or self._resume_from_store
        self.deliver_at_end = deliver_at_end
        # `kevin-opt FILE` that cannot start (bad task, no backend) ends like the headless command:
        # the app closes and the error is printed on stderr with its exit code.
        self.exit_on_start_error = exit_on_start_error
        self.replace = replace
        self.accept_flagged = accept_flagged
        self.handle_signals = handle_signals
        self.signals = AppSignals(self.interrupt)
        self.notices = Notices(self, lambda **toast: App.notify(self, **toast))
        self.start_error: KevinError | None = None
        self.sink = TuiSink(self)
        self.run_screen = RunScreen(clock)
        self.history_screen: HistoryScreen | None = None
        self.session: RunSession | None = None
        """The run shown: opened, driven and delivered by workers."""
        self.outcome: RunOutcome | None = None
        """How the run shown ended, once the screen has said so."""
        self.delivery: Delivery | None = None
        """What its last delivery did, once the screen has said so."""
        self.signum: int | None = None
        """The signal that ends the run (and the app)."""
        self.running = False
        self._delivering = False
        self._quitting = False
        self._abandoned = False

    @property
    def exit_code(self) -> int:
        return self.ending().exit_code

    @property
    def engine(self) -> Engine | None:
        return self.session.engine if self.session is not None else None

    def ending(self) -> finish.Ending:
        """How the run shown ended, for ``finish.close``: its session's, with the signal that
        ends the app and whether the person quit."""
        ending = self.session.ending if self.session is not None else finish.Ending()
        ending.signum = self.signum if self.signum is not None else ending.signum
        ending.quit = ending.quit or self._quitting
        return ending

    @property
    def abandoned(self) -> bool:
        """Left at once on a second signal: the engine's thread may still be unwinding."""
        return self._abandoned

    # --- screens --------------------------------------------------------------------------
    def on_mount(self) -> None:
        self._install_signal_handlers()
        self.add_mode("run", lambda: self.run_screen)
        if self.first_run is not None:
            self.switch_mode("run")
            if isinstance(self.first_run, RunSession):
                self.start_session(self.first_run)
            else:
                self.start_engine(self.first_run)
        else:
            self.action_open_history()

    def history_root(self) -> Path:
        if self.runs_root is not None:
            return self.runs_root
        if self.engine is not None:
            return self.engine.store.dir.parent
        return default_runs_root()

    def action_open_history(self) -> None:
        if self.history_screen is None:
            root = self.history_root()
            # Benches sit beside the runs (.kevin/benches), unless told where.
            self.history_screen = HistoryScreen(root, self.benches_root or root.parent / "benches")
            self.add_mode("history", lambda: self.history_screen)
        self.switch_mode("history")
        if self.history_screen.is_mounted:
            self.history_screen.action_reload()

    @property
    def has_run(self) -> bool:
        """The run screen has a run to show (started or starting in this window)."""
        return self.run_screen.state.started is not None or self.running

    def action_close_history(self) -> None:
        if self.has_run:
            self.switch_mode("run")
        else:
            self.action_quit()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        self.notices.notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A dialog's keys are its own: quitting or opening the help from under it does nothing.
        if action in ("quit", "help") and isinstance(self.screen, ModalScreen):
            return False
        if action == "stop_run":
            return self.running and self.engine is not None and not self.engine.stop_requested
        if action == "commit_best":
            return self.engine is not None and self.engine.best_turn() is not None and not self._best_delivered()
        return True

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    # --- the engine -----------------------------------------------------------------------
    def start_engine(self, factory: EngineFactory, status: str = "starting") -> None:
        """Show the run ``factory`` opens. ``status``: what the run screen says while the engine
        is made (it takes seconds)."""
        self.start_session(RunSession(factory, replace=self.replace, accept_flagged=self.accept_flagged), status)

    def start_session(self, session: RunSession, status: str = "starting") -> None:
        """Show ``session``'s run, opened and driven in a worker."""
        self._settle()
        self.session, self.running, self.outcome, self.delivery = session, True, None, None
        self.run_screen.set_status(f"{status}: loading the task and probing its inputs", "$text-accent")
        self._run_engine(session)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _run_engine(self, session: RunSession) -> RunOutcome:
        engine = session.open(self.sink)
        if self.signum is not None:
            engine.abort()  # the signal came while the engine was being made
        elif self._quitting:
            engine.halt()  # so did the person's quit
        ending = session.drive()
        if ending.error is not None:
            raise ending.error  # the worker's failure handler says it, as for any error here
        return ending.outcome

    def _resume_from_store(self, run_id: str, sink: EventSink) -> Engine:
        from ..run.launch import resume_run

        return resume_run(run_id, sink, runs_root=self.history_root(), replace=self.replace)

    def resume_run(self, run_id: str) -> None:
        """Continue a stored run in this window; a run another process drives is refused, and so
        is a finished one."""
        if self.running:
            self.notify("a run is in progress; resume this one when it ends", severity="warning")
            return
        run_dir = self.history_root() / run_id
        owner = lock_owner(run_dir)
        if owner is not None:
            refused = RunLocked.held_by(run_id, owner)
            self.notify(f"{refused.message}\nhint: {refused.hint}", severity="warning", timeout=15, markup=False)
            return
        from ..store import read_info

        status = read_info(run_dir).status
        if status in FINISHED:
            self.notify(f"run {run_id} is {status}; only unfinished runs resume", severity="warning")
            return
        self.switch_mode("run")
        self.start_engine(lambda sink: self.resume_factory(run_id, sink), f"resuming {run_id}")

    def _settle(self) -> None:
        """The run shown is over and its delivery done: give the run up, so that other
        processes see it as it is (and may resume it)."""
        if self.session is not None and not self.running and not self._delivering:
            self.session.release()

    @on(RunStartedMessage)
    @on(TurnStartedMessage)
    @on(GenerationFinishedMessage)
    @on(EvalStageMessage)
    @on(TurnFinishedMessage)
    @on(ConfirmationStartedMessage)
    @on(RunFinishedMessage)
    def _engine_event(self, message: EngineMessage) -> None:
        self.run_screen.apply(message.event)
        self.refresh_bindings()  # a new best offers `c` again; the end of the run takes `s` away

    def on_confirmation_finished_message(self, message: ConfirmationFinishedMessage) -> None:
        event = message.event
        self.run_screen.apply(event)
        dropped = event.best is None or any(not k.verified for k in event.confirmation.kernels)
        self.notify("\n".join(confirmed_line(k) for k in event.confirmation.kernels), title="confirmation",
                    severity="warning" if dropped else "information", timeout=15, markup=False)

    def on_notice_message(self, message: NoticeMessage) -> None:
        notice = message.event
        self.run_screen.apply(notice)
        severity = {"info": "information"}.get(notice.level, notice.level)
        self.notify(notice.message, title=notice.topic, severity=severity, timeout=8, markup=False)

    def on_tokens_ready(self, message: TokensReady) -> None:
        chunks = self.sink.drain()
        if chunks:
            self.run_screen.apply_tokens(chunks)

    # --- steering ---------------------------------------------------------------------------
    # The screens ask and steer here, never the engine itself.
    @property
    def live_run_id(self) -> str | None:
        """The run this window drives, while it runs."""
        return self.engine.store.info.run_id if self.running and self.engine is not None else None

    @property
    def generating(self) -> bool:
        """The running run's model generates right now (what cancelling would cancel)."""
        return self.running and self.engine is not None and self.engine.generating

    def can_branch(self, turn: int) -> bool:
        """The running run has turns left after ``turn`` to continue it in."""
        return self.running and self.engine is not None and turn < self.engine.config.turns

    def branch(self, trajectory: int, turn: int) -> str:
        """Continue a finished turn in a new chain from the next turn; where the chain goes, in
        words. Raises ``ValueError`` when it cannot."""
        engine = self.engine
        if engine is None or not self.running:
            raise ValueError("no run in progress")
        engine.branch(trajectory, turn)
        return "takes the weakest slot of the next turn" if engine.search.branch_takes_slot else "is a new trajectory"

    def _engine_or_warn(self) -> Engine | None:
        if self.engine is None or not self.running:
            self.notify("no run in progress", severity="warning")
            return None
        return self.engine

    def action_stop_run(self) -> None:
        if (engine := self._engine_or_warn()) is not None:
            engine.request_stop()
            self.run_screen.set_status("stopping after this turn", "$text-warning")
            self.refresh_bindings()

    def action_cancel_generation(self) -> None:
        if (engine := self._engine_or_warn()) is not None:
            if engine.cancel_generation():
                self.notify("generation cancelled: it is not shown to the model and the turn is generated again")
            else:
                self.notify("nothing is generating right now", severity="warning")

    # --- workers: results and failures, in one place --------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        self.refresh_bindings()  # the footer offers what works after the run, the plan or the delivery
        if event.state is WorkerState.ERROR:
            self._failed(worker)
        elif event.state is WorkerState.SUCCESS:
            if worker.group == "engine":
                self._run_ended(worker.result)
            elif worker.group == "plan":
                self._ask(*worker.result)
            elif worker.group == "deliver":
                self._delivered(worker.result)

    def _failed(self, worker: Worker) -> None:
        error = worker.error
        if worker.group == "engine":
            self.running = False
            self.run_screen.set_status("failed", "$text-error")
            if self.signum is not None or self._quitting:
                # Killed on purpose: what failed in the start is the signal's doing, not an error.
                self._settle()
                self.exit(self.exit_code)
                return
            if isinstance(error, KevinError) and self.session is not None:
                self.session.ending.error = error
        if (worker.group == "engine" and self.engine is None and self.exit_on_start_error
                and isinstance(error, KevinError)):
            self.start_error = error
            self.exit(self.exit_code)
            return
        if isinstance(error, KevinError):
            message = error.message + (f"\nhint: {error.hint}" if error.hint else "")
            self.notify(message, title="kevin-opt", severity="error", timeout=30, markup=False)
        else:
            text = "".join(traceback.format_exception(error))
            self.push_screen(ErrorScreen(f"unexpected error in {worker.group}", text))
        self._settle()
        if self._quitting:
            self.exit(self.exit_code)

    def _run_ended(self, outcome: RunOutcome) -> None:
        self.running = False
        self.outcome = outcome
        assert self.engine is not None
        if self.signum is not None or self._quitting:
            self._settle()
            self.exit(self.exit_code)
            return
        ending = self.ending()
        if not ending.wants_delivery():
            self._settle()
            return
        if self.delivery is not None and self.delivery.succeeded() and self._same_kernel(self.delivery.plan):
            self._settle()  # `c` already delivered the kernel the run ended with
            return
        if self.deliver_at_end:
            self._plan_delivery(self.session, at_end=True)
        else:
            self._settle()
