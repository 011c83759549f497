"""The run screen: the run in progress, turn by turn, with the live model output."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, OptionList
from textual.widgets._toast import ToastRack
from textual.worker import Worker, WorkerState

from ...events import (
    ConfirmationFinished,
    ConfirmationStarted,
    Event,
    RunFinished,
    RunStarted,
    TurnFinished,
    TurnStarted,
)
from ...errors import KevinError
from ...formatting import fmt_clock, fmt_speedup, ncu_lines
from ...run.nsight import profile_turn
from ...results import BestKernel, TurnRecord
from ...store import read_records
from ..state import Key, RunState, TurnKey
from ..widgets import FeedbackView, FitHeader, ModelOutput, SpeedupChart, TurnList

REDRAW_S = 0.1
"""Streaming text is redrawn at most this often, however fast tokens arrive."""

REASONS = {
    "completed": ("finished", "$text-success"),
    "target_reached": ("target reached", "$text-success"),
    "roofline_reached": ("at its roofline", "$text-success"),
    "stopped": ("stopped", "$text-warning"),
    "interrupted": ("interrupted", "$text-warning"),
    "failed": ("failed", "$text-error"),
}
SIDE_SHARE = 0.4
"""The turn list never takes more than this share of the width."""


def best_parts(best: BestKernel | None) -> tuple[Content, str]:
    """The header's best speedup, and where it comes from: ``best 2.63x confirmed`` and
    ``(t0 turn 8: 2.28x)`` (that turn's own number), or ``best 2.28x`` and ``(t0 turn 8)``."""
    if best is None:
        return Content.assemble("best ", ("none yet", "$text-muted")), ""
    where = f"t{best.trajectory} turn {best.turn}"
    if best.confirmation is None:
        return Content.assemble("best ", (fmt_speedup(best.speedup), "bold $text-success")), f"({where})"
    own = f": {fmt_speedup(best.run_speedup)}" if best.run_speedup is not None else ""
    return (Content.assemble("best ", (fmt_speedup(best.speedup), "bold $text-accent"), " confirmed"),
            f"({where}{own})")


class RunScreen(Screen):
    BINDINGS = [
        Binding("s", "app.stop_run", "Stop", tooltip="Stop the run after the current turn"),
        Binding("x", "cancel_generation", "Cancel",
                tooltip="Cancel the generation (offered while the model generates)"),
        Binding("c", "app.commit_best", "Commit", tooltip="Commit the best kernel now"),
        Binding("h", "app.open_history", "History"),
        Binding("e", "toggle_reasoning", "Reasoning", tooltip="Expand or collapse the reasoning"),
        Binding("v", "follow_live", "Live", tooltip="View the live turn again (offered while you look at another)"),
        Binding("b", "branch", "Branch",
                tooltip="Continue the selected finished turn in a new chain for the remaining turns"),
        Binding("i", "ncu", "Nsight",
                tooltip="Profile the selected verified turn's kernel with Nsight Compute (an NVIDIA GPU and ncu)"),
        # Where `i` cannot work (a run off an NVIDIA GPU) it is not offered; pressed, it says why.
        Binding("i", "explain_ncu", show=False),
    ]

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, id: str = "run") -> None:
        super().__init__(id=id)
        self._clock = clock
        self.state = RunState(clock)
        self.pinned: Key | None = None
        """A finished or cancelled turn the person selected; None follows the live turn."""
        self.follow: int | None = None
        """Trajectory whose live turn is shown (None: the first one generating)."""
        self._t0: float | None = None
        self._t1: float | None = None
        self._dirty_output = False
        self._status: tuple[str, str] = ("starting…", "$text-muted")
        self._offered_cancel = False
        self._ready = False
        """Events can arrive before the screen is mounted; they only update the state then."""

    def compose(self) -> ComposeResult:
        yield FitHeader(2, id="run-header")
        with Horizontal(id="run-body"):
            with Vertical(id="side"):
                yield TurnList(id="turns")
                yield SpeedupChart(id="chart")
            with Vertical(id="main"):
                yield ModelOutput(id="output")
                yield FeedbackView(id="feedback")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(TurnList).border_title = "turns"
        self.set_interval(1.0, self._tick)
        self.set_interval(REDRAW_S, self._flush_output)
        self._ready = True
        self._refresh_turns()
        self._show_selected()
        self._refresh_header()

    def on_resize(self) -> None:
        if self._ready:
            self._fit_side()

    def on_screen_resume(self) -> None:
        self.app.notices.release()  # what waited while a dialog was open

    def add_message(self, title: str, text: str, severity: str = "information") -> None:
        """A message too long for a toast: it stays in the feedback pane."""
        self.query_one(FeedbackView).add_message(title, text, severity)

    @property
    def toast_room(self) -> int:
        """Notifications sit over the speedup chart, as wide as the side column (app.tcss)."""
        width = self.query_one("#side").styles.width if self._ready else None
        return int(width.value) if width is not None else TurnList.run_width(1, 1)

    # --- steering offered ----------------------------------------------------------------
    def _can_cancel(self) -> bool:
        return self.app.generating

    def _branchable(self) -> tuple[int, int] | None:
        """The selected turn, when a running run could continue it in a new chain."""
        if self.pinned is None:
            return None
        record = self.state.record(self.pinned)
        if record is None or not record.finished or not self.app.can_branch(record.turn):
            return None
        return self.pinned

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Only keys that do something now are offered (the app's own are checked by the app).
        if action == "cancel_generation":
            return self._can_cancel()
        if action == "branch":
            return self._branchable() is not None
        if action == "follow_live":
            return bool(self.state.live) and self.pinned is not None
        if action == "ncu":
            return self._profilable() is not None
        return True

    def _profilable(self) -> tuple[int, int] | None:
        """The selected turn, when it has a verified kernel Nsight Compute could profile: one of a
        run on an NVIDIA GPU (Nsight Compute profiles CUDA kernels alone)."""
        record = self.state.record(self.pinned) if self.pinned is not None else None
        started = self.state.started
        if record is None or not record.correct or started is None or started.device != "cuda":
            return None
        return self.pinned

    def action_explain_ncu(self) -> None:
        started = self.state.started
        if started is not None and started.device != "cuda":
            self.notify(f"Nsight Compute profiles CUDA kernels: this run is on the {started.device} device "
                        f"({started.device_name})", severity="warning", markup=False)
        else:
            self.notify("select a verified turn: Nsight Compute profiles its kernel", severity="warning")

    def action_ncu(self) -> None:
        key = self._profilable()
        if key is None:
            self.notify("select a verified turn: Nsight Compute profiles its kernel", severity="warning")
            return
        if any(w.group == "ncu" and w.is_running for w in self.workers):
            self.notify("Nsight Compute is profiling a kernel already", severity="warning")
            return
        run_dir = Path(self.state.started.run_dir)
        self.notify(f"profiling trajectory {key[0]} turn {key[1]} with Nsight Compute: its lines come to the "
                    "feedback pane")
        self.run_worker(lambda: profile_turn(run_dir, *key), thread=True, group="ncu", exit_on_error=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "ncu" or event.state not in (WorkerState.SUCCESS, WorkerState.ERROR):
            return
        if event.state is WorkerState.SUCCESS:
            self.add_message("Nsight Compute", "\n".join(ncu_lines(event.worker.result)))
            return
        error = event.worker.error
        if not isinstance(error, KevinError):
            raise error
        self.notify(error.message + (f"\nhint: {error.hint}" if error.hint else ""), severity="error", timeout=20,
                    markup=False)

    def action_branch(self) -> None:
        key = self._branchable()
        if key is None:
            self.notify("select a finished turn of the running run that has turns left after it", severity="warning")
            return
        try:
            where = self.app.branch(*key)
        except ValueError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.notify(f"trajectory {key[0]} turn {key[1]} goes on in a new chain from the next turn: it {where}")

    def action_cancel_generation(self) -> None:
        self.app.action_cancel_generation()
        self._sync_bindings()

    def _sync_bindings(self) -> None:
        # The engine flips its generating flag in its own thread: the footer catches up on the
        # next event or tick.
        if self._can_cancel() != self._offered_cancel:
            self._offered_cancel = not self._offered_cancel
            self.refresh_bindings()

    # --- events from the engine ----------------------------------------------------------
    def set_status(self, text: str, style: str = "$text-muted") -> None:
        self._status = (text, style)
        if self._ready:
            self._refresh_header()

    def apply(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.state = RunState(self._clock)
        self.state.apply(event)
        if isinstance(event, RunStarted):
            self._t0, self._t1 = self._clock(), None
            self.pinned = None
            # A resumed run's stored turns, cancelled generations included (none for a new run).
            self.state.add_records(read_records(Path(event.run_dir), finished_only=False))
            self.set_status("running", "$text-accent")
        elif isinstance(event, ConfirmationStarted):
            count = "kernel" if len(event.kernels) == 1 else f"{len(event.kernels)} kernels"
            self.set_status(f"confirming the best {count}: verified again, timed head to head", "$text-accent")
        elif isinstance(event, ConfirmationFinished) and self.state.active:
            self.set_status("running", "$text-accent")
        elif isinstance(event, RunFinished):
            self._t1 = self._clock()
            label, style = REASONS.get(event.reason, (event.reason, "$text-muted"))
            self.set_status(label, style)
        if not self._ready:
            return
        self._sync_bindings()
        if isinstance(event, (RunStarted, RunFinished)):
            self.refresh_bindings()  # stop and live are offered while a run goes on
        best = self.state.best
        if isinstance(event, RunFinished) and self.pinned is None and best is not None:
            # The run is over: what is left to look at is the kernel that won.
            self.pinned = (best.trajectory, best.turn)
            self.query_one(TurnList).select_key(self.pinned, quiet=True)
        self._refresh_turns()
        if isinstance(event, (RunStarted, RunFinished, TurnStarted, TurnFinished, ConfirmationFinished)):
            self._show_selected()
            self._refresh_header()
        else:
            # Stage changes and notices: titles and the live feedback change, at the redraw pace.
            self._dirty_output = True

    def apply_tokens(self, chunks: list[tuple[int, int, str, str]]) -> None:
        for traj, turn, channel, text in chunks:
            self.state.add_tokens(traj, turn, channel, text)
        self._dirty_output = True
        if self._ready:
            self._sync_bindings()

    # --- drawing ----------------------------------------------------------------------------
    def _tick(self) -> None:
        self._refresh_header()
        self._sync_bindings()
        if self.pinned is None and self.state.live:
            self._dirty_output = True  # the live turn's timer

    def _refresh_header(self) -> None:
        """Line 1: the task, the device, the clock, the turns, the best speedup (marked confirmed
        with its turn's own beside it), then what matters less; line 2: the status, alone, so
        that it is never cut."""
        header = self.query_one("#run-header", FitHeader)
        status_text = Content.styled(*self._status)
        status = [(status_text, "", 8)]
        st = self.state.started
        if st is None:
            header.set_lines([("kevin-opt", "bold $text-primary", 9)], status)
            return
        elapsed = ((self._t1 or self._clock()) - self._t0) if self._t0 is not None else 0.0
        done, total = len(self.state.records), st.turns * st.trajectories
        stats = f"{fmt_clock(elapsed)}  turns {done}/{total}"
        best, where = best_parts(self.state.best)
        header.set_lines(
            [(st.task, "bold $text-primary", 16), (st.device, "bold", len(st.device)), (stats, "", len(stats)),
             (best, "", best.cell_length), (where, "$text-muted", 0), (st.device_name, "", 0),
             (st.model, "$text-secondary", 0)],
            status,
        )

    def _fit_side(self) -> None:
        """The turn list takes the width any label of the run can need, from the start; the
        output panes get the rest."""
        turns = self.query_one(TurnList)
        st = self.state.started
        # Before the run says its size, the width of a run of up to 99 turns: the same as most runs
        # get once it does, so the panes do not move when the first turn arrives.
        wanted = TurnList.run_width(st.turns, len(self.state.trajectories())) if st else TurnList.run_width(1, 1)
        width = min(max(wanted, turns.wanted_width()), max(int(self.size.width * SIDE_SHARE), 24))
        side = self.query_one("#side")
        if side.styles.width is None or side.styles.width.value != width:
            side.styles.width = width
            for rack in self.query(ToastRack):  # none in a test app without notifications
                rack.styles.width = width

    def _refresh_turns(self) -> None:
        turns = self.query_one(TurnList)
        turns.show(self.state.records, self.state.live, self.state.trajectories(), self.state.cancelled,
                   self.state.confirmed)
        if self.pinned is None:
            live = self._live_key()
            turns.select_key(live or self.state.last_finished, quiet=True)
        self._fit_side()
        best = self.state.best
        self.query_one(SpeedupChart).show(self.state.best_curve(),
                                          best.speedup if best is not None and best.confirmation else None)

    def _live_key(self) -> TurnKey | None:
        live = self.state.live
        if not live:
            return None
        traj = self.follow if self.follow in live else min(live)
        return traj, live[traj].turn

    def _latest_record(self, trajectory: int | None) -> TurnRecord | None:
        recs = [r for k, r in self.state.records.items() if trajectory is None or k[0] == trajectory]
        if not recs:
            return None
        if trajectory is None and self.state.last_finished in self.state.records:
            return self.state.records[self.state.last_finished]
        return max(recs, key=lambda r: r.turn)

    def _show_selected(self) -> None:
        output = self.query_one(ModelOutput)
        feedback = self.query_one(FeedbackView)
        if self.pinned is not None and (record := self.state.record(self.pinned)) is not None:
            output.show_record(record)
            feedback.show(record, confirmed=self._confirmed(record))
            return
        live = self._live_key()
        if live is not None:
            turn = self.state.live[live[0]]
            output.show_live(turn)
            feedback.show_live(turn, self._clock(), self.state.continued(turn))
            return
        last = self._latest_record(None)
        if last is not None:
            output.show_record(last)
        else:
            output.show_nothing("waiting for the first turn")
        feedback.show(last, confirmed=self._confirmed(last))

    def _confirmed(self, record: TurnRecord | None):
        if record is None or not record.finished:
            return None
        return self.state.confirmed.get((record.trajectory, record.turn))

    def _flush_output(self) -> None:
        if not self._dirty_output:
            return
        self._dirty_output = False
        if self.pinned is None:
            self._show_selected()

    # --- the person's choices -------------------------------------------------------------
    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        turns = self.query_one(TurnList)
        # A held arrow highlights turns faster than a turn is drawn: a highlight the cursor has
        # already left is dropped (a later one is queued behind it), so a burst of keys draws the
        # turn the cursor rests on, once, as the history's lists do.
        if event.option_index != turns.highlighted:
            return
        key = turns.highlighted_key
        if key is None:
            return
        if self.state.record(key) is not None:
            self.pinned = key
        else:
            self.pinned, self.follow = None, key[0]
        self.query_one(FeedbackView).fold_messages()
        self._show_selected()
        self.refresh_bindings()  # `b` is offered for a selected finished turn

    def action_follow_live(self) -> None:
        self.pinned = None
        self._refresh_turns()
        self._show_selected()
        self.refresh_bindings()

    def action_toggle_reasoning(self) -> None:
        self.query_one(ModelOutput).toggle_reasoning()

