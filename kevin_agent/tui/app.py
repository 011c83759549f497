"""The Textual app: the run screen and the history screen, with the engine in a thread worker.

The engine never learns about the UI: it reports through a ``TuiSink`` (events become
messages) and is steered through its thread-safe ``request_stop`` / ``cancel_generation``.
Every worker failure lands in ``on_worker_state_changed``.
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
from textual.content import Content
from textual.notifications import SeverityLevel
from textual.worker import Worker, WorkerState

from ..errors import KevinError
from ..protocols import EventSink
from ..store import default_runs_root
from .format import toast_text
from .messages import (
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
from .screens.dialogs import ConfirmScreen, ErrorScreen, HelpScreen, commit_summary
from .screens.history import HistoryScreen
from .screens.run import RunScreen

if TYPE_CHECKING:
    from ..delivery import Delivery, DeliveryPlan
    from ..loop import Engine, RunOutcome

EngineFactory = Callable[[EventSink], "Engine"]
"""Builds the engine (``start_run`` / ``resume_run``); called in the worker thread."""
ResumeFactory = Callable[[str, EventSink], "Engine"]

EXIT_OK, EXIT_NONE, EXIT_INTERRUPTED = 0, 1, 130


class KevinApp(App[int]):
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
        engine_factory: EngineFactory | None = None,
        *,
        runs_root: Path | None = None,
        resume_factory: ResumeFactory | None = None,
        deliver_at_end: bool = True,
        exit_on_start_error: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Open the run screen when ``engine_factory`` is given, the history screen otherwise."""
        super().__init__()
        self.engine_factory = engine_factory
        self.runs_root = Path(runs_root) if runs_root is not None else None
        self.resume_factory = resume_factory or self._resume_from_store
        self.deliver_at_end = deliver_at_end
        # `kevin-opt FILE` that cannot start (bad task, no backend) ends like the headless command:
        # the app closes and the error is printed on stderr with its exit code.
        self.exit_on_start_error = exit_on_start_error
        self.start_error: KevinError | None = None
        self.sink = TuiSink(self)
        self.run_screen = RunScreen(clock)
        self.history_screen: HistoryScreen | None = None
        self.engine: Engine | None = None
        self.outcome: RunOutcome | None = None
        self.delivery: Delivery | None = None
        self.exit_code = EXIT_OK
        self.running = False
        self._quitting = False

    # --- screens --------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.add_mode("run", lambda: self.run_screen)
        if self.engine_factory is not None:
            self.switch_mode("run")
            self.start_engine(self.engine_factory)
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
            self.history_screen = HistoryScreen(self.history_root())
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
        # Plain text is laid out for the toast here, as wide as the screen leaves room for: paths
        # shortened and broken at a "/", never inside a name (markup is left to Textual).
        if not markup:
            message = toast_text(message, getattr(self.screen, "toast_room", self.size.width * 3 // 4))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    # --- the engine -----------------------------------------------------------------------
    def start_engine(self, factory: EngineFactory) -> None:
        self.running, self.outcome, self.delivery, self.engine = True, None, None, None
        self.run_screen.set_status("starting: loading the task and probing its inputs", "$text-accent")
        self._run_engine(factory)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _run_engine(self, factory: EngineFactory) -> RunOutcome:
        engine = factory(self.sink)
        self.engine = engine
        try:
            return engine.run()
        finally:
            engine.close()
            engine.store.release()

    def _resume_from_store(self, run_id: str, sink: EventSink) -> Engine:
        from ..launch import resume_run

        return resume_run(run_id, sink, runs_root=self.history_root())

    def resume_run(self, run_id: str) -> None:
        if self.running:
            self.notify("a run is in progress; resume this one when it ends", severity="warning")
            return
        self.switch_mode("run")
        self.start_engine(lambda sink: self.resume_factory(run_id, sink))

    @on(RunStartedMessage)
    @on(TurnStartedMessage)
    @on(GenerationFinishedMessage)
    @on(EvalStageMessage)
    @on(TurnFinishedMessage)
    @on(RunFinishedMessage)
    def _engine_event(self, message: EngineMessage) -> None:
        self.run_screen.apply(message.event)

    def on_notice_message(self, message: NoticeMessage) -> None:
        notice = message.event
        self.run_screen.apply(notice)
        severity = {"info": "information"}.get(notice.level, notice.level)
        self.notify(notice.message, severity=severity, timeout=8, markup=False)

    def on_tokens_ready(self, message: TokensReady) -> None:
        chunks = self.sink.drain()
        if chunks:
            self.run_screen.apply_tokens(chunks)

    # --- steering ---------------------------------------------------------------------------
    def _engine_or_warn(self) -> Engine | None:
        if self.engine is None or not self.running:
            self.notify("no run in progress", severity="warning")
            return None
        return self.engine

    def action_stop_run(self) -> None:
        if (engine := self._engine_or_warn()) is not None:
            engine.request_stop()
            self.run_screen.set_status("stopping after this turn", "$text-warning")

    def action_cancel_generation(self) -> None:
        if (engine := self._engine_or_warn()) is not None:
            engine.cancel_generation()
            self.notify("generation cancelled; the turn is recorded as unfinished")

    def action_commit_best(self) -> None:
        if self.engine is None:
            self.notify("no run to commit from", severity="warning")
            return
        self._plan_commit(self.engine)

    @work(thread=True, group="plan", exit_on_error=False)
    def _plan_commit(self, engine: Engine, at_end: bool = False) -> tuple[Engine, DeliveryPlan | None, bool]:
        from ..delivery import plan_delivery

        config = engine.config.model_copy(update={"commit": True})
        return engine, plan_delivery(engine.task, engine.store.info, engine.store.records(), config), at_end

    def _confirm_commit(self, engine: Engine, plan: DeliveryPlan | None, at_end: bool = False) -> None:
        if plan is None:
            floor = engine.config.min_speedup
            self.notify(f"no verified kernel reaches --min-speedup {floor:g}x yet", severity="warning")
            return
        body = commit_summary(plan)

        def answered(yes: bool | None) -> None:
            if yes:
                self._deliver(engine, commit=True)
            elif at_end:
                # Declined at the end of the run: keep the files, commit nothing.
                self._deliver(engine, commit=False)

        self.push_screen(ConfirmScreen("commit the best kernel?", body, yes="Commit"), answered)

    @work(thread=True, group="deliver", exit_on_error=False)
    def _deliver(self, engine: Engine, *, commit: bool | None = None) -> Delivery:
        from ..delivery import deliver

        config = engine.config if commit is None else engine.config.model_copy(update={"commit": commit})
        delivery = deliver(engine.task, engine.store.info, engine.store.records(), config)
        if delivery.commit:
            engine.store.update_info(commit=delivery.commit)
        return delivery

    # --- workers: results and failures, in one place --------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state is WorkerState.ERROR:
            self._failed(worker)
        elif event.state is WorkerState.SUCCESS:
            if worker.group == "engine":
                self._run_ended(worker.result)
            elif worker.group == "plan":
                self._confirm_commit(*worker.result)
            elif worker.group == "deliver":
                self._delivered(worker.result)

    def _failed(self, worker: Worker) -> None:
        error = worker.error
        if worker.group == "engine":
            self.running = False
            self.exit_code = error.exit_code if isinstance(error, KevinError) else EXIT_NONE
            self.run_screen.set_status("failed", "$text-error")
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
        if self._quitting:
            self.exit(self.exit_code)

    def _run_ended(self, outcome: RunOutcome) -> None:
        self.running = False
        self.outcome = outcome
        if self._quitting:
            self.exit_code = EXIT_INTERRUPTED
            self.exit(self.exit_code)
            return
        best = outcome.best
        assert self.engine is not None
        if best is not None and best.speedup >= self.engine.config.min_speedup:
            if self.deliver_at_end and self.engine.config.commit:
                self._plan_commit(self.engine, at_end=True)  # ask before committing
            elif self.deliver_at_end:
                self._deliver(self.engine)
        else:
            self.exit_code = EXIT_NONE
            why = "no verified kernel" if best is None else f"best {best.speedup:.2f}x is below --min-speedup"
            self.run_screen.add_status("nothing to commit", "$text-warning")
            self.notify(f"run {outcome.reason}: {why}; nothing written or committed", timeout=10)

    def _delivered(self, delivery: Delivery) -> None:
        self.delivery = delivery
        assert self.engine is not None
        written = delivery.kernel_path is not None
        if not self.running:
            self.exit_code = EXIT_OK if delivery.succeeded(self.engine.config.commit) else EXIT_NONE
        if delivery.committed and delivery.commit:
            self.run_screen.add_status(f"committed {delivery.commit[:10]}", "$text-success")
        elif written:
            self.run_screen.add_status("written, not committed", "$text-warning")
        self.notify("\n".join(delivery.notes) or "nothing to do", title="delivery", timeout=15, markup=False,
                    severity="information" if delivery.committed or written else "warning")

    # --- quitting ---------------------------------------------------------------------------
    def action_quit(self) -> None:
        if not self.running:
            self.exit(self.exit_code)
            return
        if self._quitting:
            # Second request: leave now; the evaluation in flight still ends before the process does.
            self.action_exit_now()
            return

        def answered(yes: bool | None) -> None:
            if yes and self.running:
                self._quitting = True
                if self.engine is not None:
                    self.engine.request_stop()
                    self.engine.cancel_generation()
                self.run_screen.set_status("stopping, then quitting (q again: quit now)", "$text-warning")
            elif yes:
                self.exit(self.exit_code)

        body = Content(
            "A run is in progress. Stop it after the current evaluation and quit?\n"
            "Finished turns are saved; the run can be resumed from the history screen."
        )
        self.push_screen(ConfirmScreen("quit?", body, yes="Quit"), answered)

    def action_exit_now(self) -> None:
        if self.running:
            self.exit_code = EXIT_INTERRUPTED
            if self.engine is not None:
                self.engine.request_stop()
                self.engine.cancel_generation()
        self.exit(self.exit_code)

