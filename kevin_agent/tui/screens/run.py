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
from textual.widgets import Footer, OptionList, Static

from ...events import Event, RunFinished, RunStarted, TurnFinished, TurnStarted
from ...results import TurnRecord
from ...store import read_records
from ...formatting import fmt_speedup
from ..state import RunState, TurnKey
from ..widgets import FeedbackView, ModelOutput, SpeedupChart, TurnList

REDRAW_S = 0.1
"""Streaming text is redrawn at most this often, however fast tokens arrive."""

REASONS = {
    "completed": ("finished", "$text-success"),
    "target_reached": ("target reached", "$text-success"),
    "stopped": ("stopped", "$text-warning"),
    "interrupted": ("interrupted", "$text-warning"),
    "failed": ("failed", "$text-error"),
}


def fmt_elapsed(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class RunScreen(Screen):
    BINDINGS = [
        Binding("s", "app.stop_run", "Stop", tooltip="Stop the run after the current turn"),
        Binding("x", "app.cancel_generation", "Cancel", tooltip="Cancel the generation in flight"),
        Binding("c", "app.commit_best", "Commit", tooltip="Commit the best kernel now"),
        Binding("h", "app.open_history", "History"),
        Binding("r", "toggle_reasoning", "Reasoning", tooltip="Show or hide the reasoning"),
        Binding("l", "follow_live", "Live", tooltip="Follow the live turn again"),
    ]

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(id="run")
        self.state = RunState()
        self.pinned: TurnKey | None = None
        """A finished turn the person selected; None follows the live turn."""
        self.follow: int | None = None
        """Trajectory whose live turn is shown (None: the first one generating)."""
        self._clock = clock
        self._t0: float | None = None
        self._t1: float | None = None
        self._dirty_output = False
        self._status = Content.styled("starting…", "$text-muted")
        self._ready = False
        """Events can arrive before the screen is mounted; they only update the state then."""

    def compose(self) -> ComposeResult:
        yield Static(id="run-header")
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
        self.set_interval(1.0, self._refresh_header)
        self.set_interval(REDRAW_S, self._flush_output)
        self._ready = True
        self._refresh_turns()
        self._show_selected()
        self._refresh_header()

    # --- events from the engine ----------------------------------------------------------
    def set_status(self, text: str, style: str = "$text-muted") -> None:
        self._status = Content.styled(text, style)
        if self._ready:
            self._refresh_header()

    def add_status(self, text: str, style: str = "$text-muted") -> None:
        """Append to the status line, e.g. what the delivery did."""
        self._status = self._status + Content.styled(f" · {text}", style)
        if self._ready:
            self._refresh_header()

    def apply(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.state = RunState()
        self.state.apply(event)
        if isinstance(event, RunStarted):
            self._t0, self._t1 = self._clock(), None
            self.pinned = None
            if event.resumed_turns:
                self.state.add_records(read_records(Path(event.run_dir)))
            self.set_status("running", "$text-accent")
        elif isinstance(event, RunFinished):
            self._t1 = self._clock()
            label, style = REASONS.get(event.reason, (event.reason, "$text-muted"))
            self.set_status(label, style)
        if not self._ready:
            return
        best = self.state.best
        if isinstance(event, RunFinished) and self.pinned is None and best is not None:
            # The run is over: what is left to look at is the kernel that won.
            self.pinned = (best.trajectory, best.turn)
            self.query_one(TurnList).select_key(self.pinned, quiet=True)
        self._refresh_turns()
        if isinstance(event, (RunStarted, RunFinished, TurnStarted, TurnFinished)):
            self._show_selected()
            self._refresh_header()
        else:
            # Stage changes and notices: the output's title changes, at the redraw pace.
            self._dirty_output = True

    def apply_tokens(self, chunks: list[tuple[int, int, str, str]]) -> None:
        for traj, turn, channel, text in chunks:
            self.state.add_tokens(traj, turn, channel, text)
        self._dirty_output = True

    # --- drawing ----------------------------------------------------------------------------
    def _refresh_header(self) -> None:
        st = self.state.started
        if st is None:
            head = Content.assemble(("kevin-opt", "bold $text-primary"), "  ", self._status)
        else:
            elapsed = ((self._t1 or self._clock()) - self._t0) if self._t0 is not None else 0.0
            done = len(self.state.records)
            total = st.turns * st.trajectories
            best = self.state.best
            head = Content.assemble(
                (st.task, "bold $text-primary"),
                "  ", (st.device, "bold"), f" {st.device_name}" if st.device_name else "",
                "  ", (st.model, "$text-secondary"),
                "\n", self._status, f"  {fmt_elapsed(elapsed)}  turns {done}/{total}  best ",
                (fmt_speedup(best.speedup), "bold $text-success") if best else ("none yet", "$text-muted"),
                f" (trajectory {best.trajectory} turn {best.turn})" if best else "",
            )
        self.query_one("#run-header", Static).update(head)

    def _refresh_turns(self) -> None:
        turns = self.query_one(TurnList)
        turns.show(self.state.records, self.state.live, self.state.trajectories())
        if self.pinned is None:
            live = self._live_key()
            turns.select_key(live or self.state.last_finished, quiet=True)
        self.query_one(SpeedupChart).show(self.state.best_curve())

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
        if self.pinned is not None and self.pinned in self.state.records:
            record = self.state.records[self.pinned]
            output.show_record(record)
            feedback.show(record)
            return
        live = self._live_key()
        if live is not None:
            output.show_live(self.state.live[live[0]])
            feedback.show(self._latest_record(live[0]) or self._latest_record(None))
            return
        last = self._latest_record(None)
        if last is not None:
            output.show_record(last)
        else:
            output.show_nothing("waiting for the first turn")
        feedback.show(last)

    def _flush_output(self) -> None:
        if not self._dirty_output:
            return
        self._dirty_output = False
        if self.pinned is None:
            self._show_selected()

    # --- the person's choices -------------------------------------------------------------
    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        key = self.query_one(TurnList).highlighted_key
        if key is None:
            return
        if key in self.state.records:
            self.pinned = key
        else:
            self.pinned, self.follow = None, key[0]
        self._show_selected()

    def action_follow_live(self) -> None:
        self.pinned = None
        self._refresh_turns()
        self._show_selected()

    def action_toggle_reasoning(self) -> None:
        self.query_one(ModelOutput).toggle_reasoning()
