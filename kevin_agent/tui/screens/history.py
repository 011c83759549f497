"""The history screen: everything stored, by kind (runs, optimizes, benches, and what could not be
read, with why), a run's turns, and each turn in full.

Two levels, like a log and its entries: the list on top with a preview of the highlighted entry
underneath; ``enter`` opens it (a run's turns and tabs, an optimize's groups and their runs, a
bench's table take the screen) and ``escape`` goes back up: from an entry to the list, from the
list to the run screen when there is one. It never quits: ``q`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import (
    DataTable,
    Footer,
    OptionList,
    Static,
    TabbedContent,
    TabPane,
)

from ...history import Stored, bench_text, delivery_words, gather, optimize_text, run_commit
from ...results.winner import best_of_run, confirmed_turns
from ...results.lineage import outcome, tree_chains, wrap_chain
from ...formatting import marked_speedup
from ...results import RunInfo, TurnRecord
from ...store import read_records
from ..format import answer_text, diff_content, kernel_content, previous_turn
from ..state import Key, RunState
from ..widgets import CodePane, FeedbackView, FitHeader, TurnList
from ..widgets.rows import WrappedLines
from ..widgets.turn_list import parse_option_id

FINISHED = {"completed", "target_reached", "roofline_reached"}
"""Statuses a run cannot be resumed from."""
LIVE = "running"
"""The status of a run while a process holds it."""
RUN_STYLES = {
    "completed": "$text-success", "target_reached": "$text-success", "roofline_reached": "$text-success",
    "running": "bold $text-accent",
    "stopped": "$text-warning", "interrupted": "$text-warning", "failed": "$text-error",
    "delivered": "$text-success", "written": "$text-success", "damaged": "$text-error",
}
WHY_CELL = 60
"""A damaged entry's why is cut to this in the table (the preview says it whole)."""

TABS = [
    # (pane id, title, key)
    ("tab-feedback", "Feedback", "f"),
    ("tab-kernel", "Kernel", "k"),
    ("tab-diff", "Diff", "d"),
    ("tab-prompt", "Prompt", "p"),
    ("tab-response", "Response", "o"),
    ("tab-summary", "Summary", "m"),
    ("tab-lineage", "Lineage", "l"),
]
CODE_TABS = {"tab-kernel", "tab-diff"}
SIDE_SHARE = 0.4
NARROW = 120
"""Below this width the turns sit above the tabs (the app's -narrow breakpoint, app.tcss)."""


def run_date(info: RunInfo) -> str:
    return info.created_at[:16].replace("T", " ")


def run_status(info: RunInfo) -> str:
    return "live" if info.status == LIVE else info.status


def best_speedup(info: RunInfo, records: list[TurnRecord]) -> str:
    """The run's best, saying which kind of number it is: the column holds both kinds."""
    return marked_speedup(*best_of_run(info, records))


def run_owner(run_dir: Path) -> Any:
    """The live process that holds a run (``pid``, ``host``, ``started_at``), or None."""
    try:
        from ...store import lock_owner
    except ImportError:  # no run lock in this version: the status alone says a run is live
        return None
    return lock_owner(run_dir)


class HistoryScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back", tooltip="Back: from a run to the list, from the list to the run"),
        # A priority binding, so that the footer offers it over the table's own (hidden) enter.
        Binding("enter", "open_run", "Open", tooltip="Open the selected entry: a run's turns in full, an "
                "optimize's groups, a bench's table", priority=True),
        Binding("r", "resume", "Resume", tooltip="Resume the selected run (an unfinished one nobody runs)"),
        Binding("r", "explain_resume", show=False),
        Binding("g", "reload", "Reload", tooltip="Read the store from disk again"),
        *(Binding(key, f"tab('{pane}')", title, show=False) for pane, title, key in TABS),
    ]

    def __init__(self, runs_root: Path, benches_root: Path | None = None) -> None:
        super().__init__(id="history")
        self.runs_root = runs_root
        self.benches_root = benches_root
        self.stored = Stored(runs_root)
        self.runs: dict[str, tuple[RunInfo, list[TurnRecord]]] = {}
        self.others: dict[str, tuple[str, str, str]] = {}
        """Each entry that is not a run, by its id: its kind, status and text in full."""
        self.selected: str | None = None
        """The highlighted entry's id, whatever its kind (``run_id`` when it is a run)."""
        self._all_records: dict[str, list[TurnRecord]] = {}
        """Each run's turns with its cancelled generations, read from disk once per reload."""
        self.run_id: str | None = None
        self.turns = RunState()
        """The selected run's turns, cancelled generations included."""
        self.turn: TurnRecord | None = None

    def compose(self) -> ComposeResult:
        yield FitHeader(1, id="history-header")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="history-body"):
            yield TurnList(id="history-turns")
            with TabbedContent(id="turn-tabs"):
                for pane, title, _ in TABS:
                    with TabPane(title, id=pane):
                        if pane == "tab-feedback":
                            yield FeedbackView(id="history-feedback")
                        elif pane == "tab-lineage":
                            with VerticalScroll():
                                yield WrappedLines(id="tab-lineage-text", classes="turn-text")
                        elif pane in CODE_TABS:
                            yield CodePane(id=f"{pane}-pane", text_id=f"{pane}-text")
                        else:
                            with VerticalScroll():
                                yield Static(id=f"{pane}-text", classes="turn-text")
        with VerticalScroll(id="history-other"):
            yield Static(id="history-other-text", classes="turn-text")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        table.add_columns("id", "kind", "status", "done", "best", "what")
        self.query_one("#history-turns", TurnList).border_title = "turns"
        self.action_reload()
        table.focus()

    # --- levels ---------------------------------------------------------------------------
    @property
    def detail(self) -> bool:
        """A run is open: its turns and tabs have the screen."""
        return self.has_class("-detail")

    def _in_body(self) -> bool:
        focused = self.focused
        return focused is not None and any(self.query_one(body) in focused.ancestors_with_self
                                           for body in ("#history-body", "#history-other"))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":
            # Opened from the command line with nothing above the list: escape does nothing
            # (and the footer does not offer it) rather than quit.
            return self.detail or self._in_body() or self.app.has_run
        if action == "resume":
            return self._resume_refusal() is None
        if action == "open_run":
            # Elsewhere enter belongs to the focused widget (a tab, a button).
            return not self.detail and self.selected is not None and self.focused is self.query_one("#runs")
        return True

    def on_descendant_focus(self) -> None:
        self.refresh_bindings()

    def action_back(self) -> None:
        if self.detail:
            self.remove_class("-detail")
            self.query_one("#runs", DataTable).focus()
        elif self._in_body():
            self.query_one("#runs", DataTable).focus()
        elif self.app.has_run:
            self.app.action_close_history()
        self.refresh_bindings()

    def action_open_run(self) -> None:
        if self.selected is None:
            return
        self.add_class("-detail")
        self.query_one("#history-turns" if self.run_id is not None else "#history-other").focus()
        self.refresh_bindings()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # A click on a row (enter is the screen's own binding).
        if event.row_key.value != self.selected:
            self.show_entry(event.row_key.value)
        self.action_open_run()

    # --- the list -----------------------------------------------------------------------------
    def action_reload(self) -> None:
        table = self.query_one("#runs", DataTable)
        keep = self.selected
        table.clear()
        self.stored = stored = gather(self.runs_root, self.benches_root)
        self.runs = {info.run_id: (info, records) for info, records in stored.runs}
        self.others = {}
        self._all_records = {}
        # By kind, each newest first: runs, optimizes, benches, then what could not be read.
        for info, records in stored.runs:
            status = Text(run_status(info), style="bold" if info.status == LIVE else "")
            optimize = stored.optimize_of(info.run_id)
            what = info.task.name + (f" ({optimize.optimize_id[:19]})" if optimize is not None else "")
            table.add_row(Text(info.run_id), "run", status, f"{len(records)}/{info.turns * info.trajectories}",
                          best_speedup(info, records), Text(what), key=info.run_id)
        for o in stored.optimizes:
            self.others[o.optimize_id] = ("optimize", o.status, optimize_text(o))
            whole = f"{o.measured:.2f}x whole" if o.measured else "-"
            table.add_row(Text(o.optimize_id), "optimize", o.status, f"{len(o.kept)}/{len(o.groups)} kept", whole,
                          Text(Path(o.model_file).name), key=o.optimize_id)
        for b in stored.benches:
            status, results = b.status(), b.results()
            self.others[b.info.bench_id] = ("bench", status, bench_text(b))
            best = [r.speedup for r in results.values() if r.correct and r.speedup]
            mean = f"{sum(best) / len(results):.2f}x mean" if results else "-"
            table.add_row(Text(b.info.bench_id), "bench", status, f"{len(results)}/{len(b.info.tasks)} tasks", mean,
                          Text(b.info.where), key=b.info.bench_id)
        for d in stored.damaged:
            self.others[d.name] = (d.kind, "damaged", f"{d.kind} {d.name} is damaged: {d.why}\n\nin {d.path}")
            why = d.why if len(d.why) <= WHY_CELL else d.why[:WHY_CELL - 1] + "…"
            table.add_row(Text(d.name), d.kind, Text("damaged", style="bold"), "", "", Text(why), key=d.name)
        if stored.empty:
            self.remove_class("-detail")
            self.show_entry(None)
            return
        shown = keep if keep in self.runs or keep in self.others else next(iter(self.runs), next(iter(self.others), None))
        table.move_cursor(row=table.get_row_index(shown))
        self.show_entry(shown)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # A held arrow highlights rows faster than a run is read and drawn. A highlight the cursor
        # has already left is dropped (a later one is queued behind it), so a burst of keys shows
        # the row the cursor rests on, once; and showing a run never moves the cursor, so no late
        # highlight can send it back to a row it passed.
        if event.cursor_row != self.query_one("#runs", DataTable).cursor_row:
            return
        if event.row_key.value != self.selected:
            self.show_entry(event.row_key.value)

    def show_entry(self, key: str | None) -> None:
        """Show the entry ``key`` names in the preview: a run's turns, another kind's text."""
        self.selected = key
        if key is None or key in self.runs:
            self.remove_class("-other")
            self.show_run(key)
            return
        self.add_class("-other")
        self.show_run(None)
        self.selected = key
        self.query_one("#history-other-text", Static).update(Content(self.others[key][2]))
        self.query_one("#history-other", VerticalScroll).scroll_home(animate=False)
        self._refresh_header()
        self.refresh_bindings()

    def _refresh_header(self) -> None:
        header = self.query_one("#history-header", FitHeader)
        title = ("history", "bold $text-primary", 7)
        counts = (self.stored.counts(), "$text-muted", 0)
        if self.selected in self.others:
            kind, status, _ = self.others[self.selected]
            header.set_lines([title, (self.selected, "bold", len(self.selected)), (kind, "", len(kind)),
                              (status, RUN_STYLES.get(status, ""), len(status)), counts])
            return
        if self.run_id is None:
            header.set_lines([title, (self.stored.nothing_words(), "$text-muted", 12)])
            return
        info, records = self.runs[self.run_id]
        optimize = self.stored.optimize_of(info.run_id)
        commit = run_commit(info, optimize)
        delivery = delivery_words(info, optimize) if optimize is not None else ""
        status = run_status(info)
        if info.status == LIVE and (owner := run_owner(self.runs_root / info.run_id)) is not None:
            status += f" (pid {owner.pid} on {owner.host})"
        # What the table leaves out, most useful first; what does not fit is left out whole.
        header.set_lines([
            title, (info.run_id, "bold", len(info.run_id)), (status, RUN_STYLES.get(info.status, ""), len(status)),
            (f"best {best_speedup(info, records)}", "", 0), (delivery, "", 0), counts,
            (f"commit {commit[:10]}" if commit and not delivery else "", "", 0),
            (f"started {run_date(info)}", "", 0), (f"{info.device} {info.device_name}".strip(), "", 0),
            (info.task.path, "$text-muted", 0), (info.model, "$text-secondary", 0),
        ])

    def show_run(self, run_id: str | None) -> None:
        self.run_id = self.selected = run_id
        turns = self.query_one("#history-turns", TurnList)
        self.turns = RunState()
        self._refresh_header()
        self.refresh_bindings()
        if run_id is None:
            turns.show({})
            self._fit_side()
            self.show_turn(None)
            return
        if run_id not in self._all_records:
            self._all_records[run_id] = read_records(self.runs_root / run_id, finished_only=False)
        self.turns.add_records(self._all_records[run_id])
        info, records = self.runs[run_id]
        self.turns.confirmed = confirmed_turns(info, records)
        turns.show(self.turns.records, None, None, self.turns.cancelled, self.turns.confirmed)
        self._fit_side()
        first = next((parse_option_id(o.id) for o in turns.options if not o.disabled), None)
        turns.select_key(first, quiet=True)
        self.show_turn(self.turns.record(first) if first is not None else None)

    def _fit_side(self) -> None:
        turns = self.query_one("#history-turns", TurnList)
        if self.size.width < NARROW:
            turns.styles.width = None  # above the tabs, as wide as the screen (app.tcss)
            return
        width = min(turns.wanted_width(), max(int(self.size.width * SIDE_SHARE), 24))
        if turns.styles.width is None or turns.styles.width.value != width:
            turns.styles.width = width

    def on_resize(self) -> None:
        self._fit_side()

    def on_screen_resume(self) -> None:
        self.app.notices.release()  # what waited while a dialog was open

    # --- turns ------------------------------------------------------------------------------
    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        turns = self.query_one("#history-turns", TurnList)
        if event.option_index != turns.highlighted:
            return  # left already in a burst of keys: the turn the cursor rests on is drawn, once
        key: Key | None = turns.highlighted_key
        if key is None or self.run_id is None:
            return
        self.show_turn(self.turns.record(key))

    def show_turn(self, record: TurnRecord | None) -> None:
        self.turn = record
        feedback = self.query_one("#history-feedback", FeedbackView)

        def put(pane: str, content: Content | str) -> None:
            widget: Widget = self.query_one(f"#{pane}-pane" if pane in CODE_TABS else f"#{pane}-text")
            widget.update(content)  # type: ignore[attr-defined]

        if record is None:
            feedback.show(None, "no turns in this run" if self.run_id else "no run selected")
            for pane, _, _ in TABS[1:-1]:
                put(pane, "")
            self.query_one("#tab-lineage-text", WrappedLines).set_layout(lambda width: [])
            return
        feedback.show(record, confirmed=self.turns.confirmed.get((record.trajectory, record.turn))
                      if record.finished else None)
        put("tab-kernel", kernel_content(record.code))
        put("tab-diff", diff_content(previous_turn(list(self.turns.records.values()), record), record))
        put("tab-prompt", Content(record.prompt) if record.prompt else Content.styled("(no prompt stored)", "$text-muted"))
        # The response as the model wrote it, its reasoning once: in the text, or before it when
        # the server sent the reasoning apart.
        response = record.response or "(empty response)"
        if record.reasoning and answer_text(record) == record.response.strip():
            response = f"{record.reasoning}\n\n{record.response}"
        put("tab-response", Content(response))
        put("tab-summary", Content(record.summary) if record.summary else Content.styled("(no summary)", "$text-muted"))
        self.query_one("#tab-lineage-text", WrappedLines).set_layout(self._lineage(record))

    def _lineage(self, selected: TurnRecord) -> Callable[[int], list[Content]]:
        """Which turn continued which in this run, the winner's path starred, this turn in
        brackets; a chain wider than the pane goes on under its first turn."""
        records = [r for r in self.turns.records.values() if r.finished]
        info = self.runs[self.run_id][0] if self.run_id in self.runs else None
        winner = (info.best.trajectory, info.best.turn) if info is not None and info.best else None
        here = (selected.trajectory, selected.turn)

        def label(rec: TurnRecord) -> str:
            text = outcome(rec)
            return f"[{text}]" if (rec.trajectory, rec.turn) == here else text

        chains = tree_chains(records, winner, label)
        head = "Each line is a chain of turns; an indented line continued the turn it names. * the winner's path."

        def layout(width: int) -> list[Content]:
            lines = [*Content.styled(head, "$text-muted").wrap(width), Content("")]
            for chain_head, cells in chains:
                lines += [Content(line) for line in wrap_chain(chain_head, cells, width)]
            return lines if chains else [*lines, Content("(no finished turns)")]

        return layout

    def action_tab(self, pane: str) -> None:
        self.query_one("#turn-tabs", TabbedContent).active = pane

    # --- resume -------------------------------------------------------------------------------
    def _resume_refusal(self) -> str | None:
        """Why the selected run cannot be resumed, or None when it can."""
        if self.selected in self.others:
            kind, status, _ = self.others[self.selected]
            if status == "damaged":
                return f"{kind} {self.selected} is damaged: it cannot be resumed"
            return f"{kind}s resume from the command line: kevin-opt resume {self.selected}"
        if self.run_id is None:
            return "no run selected"
        info, _ = self.runs[self.run_id]
        if self.app.live_run_id == info.run_id:
            return f"run {info.run_id} is running in this window (escape goes back to it)"
        if info.status == LIVE:
            owner = run_owner(self.runs_root / info.run_id)
            who = f"process {owner.pid} on {owner.host}" if owner is not None else "another process"
            since = f" since {owner.started_at}" if owner is not None and owner.started_at else ""
            return f"run {info.run_id} is live: {who} runs it{since}; it cannot be resumed while it runs"
        if info.status in FINISHED:
            return f"run {info.run_id} is {info.status}; only unfinished runs resume"
        return None

    def action_resume(self) -> None:
        assert self.run_id is not None
        self.app.resume_run(self.run_id)

    def action_explain_resume(self) -> None:
        self.notify(self._resume_refusal() or "", severity="warning", markup=False)
