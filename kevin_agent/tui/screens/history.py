"""The history screen: every stored run, its turns, and each turn in full."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, OptionList, Static, TabbedContent, TabPane

from ...results import RunInfo, TurnRecord
from ...store import list_runs
from ...formatting import fmt_speedup
from ..format import diff_content, kernel_content, previous_turn
from ..widgets import FeedbackView, TurnList

FINISHED = {"completed", "target_reached"}
"""Statuses a run cannot be resumed from."""

TABS = [
    # (pane id, title, key)
    ("tab-feedback", "Feedback", "f"),
    ("tab-kernel", "Kernel", "k"),
    ("tab-diff", "Diff", "d"),
    ("tab-prompt", "Prompt", "p"),
    ("tab-response", "Response", "o"),
    ("tab-summary", "Summary", "m"),
]


def run_date(info: RunInfo) -> str:
    return info.created_at[:16].replace("T", " ")


def best_speedup(info: RunInfo, records: list[TurnRecord]) -> float | None:
    speeds = [s for r in records if (s := r.speedup) is not None]
    if info.best is not None:
        speeds.append(info.best.speedup)
    return max(speeds) if speeds else None


class HistoryScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.close_history", "Back"),
        Binding("r", "resume", "Resume run"),
        Binding("g", "reload", "Reload"),
        *(Binding(key, f"tab('{pane}')", title, show=False) for pane, title, key in TABS),
    ]

    def __init__(self, runs_root: Path) -> None:
        super().__init__(id="history")
        self.runs_root = runs_root
        self.runs: dict[str, tuple[RunInfo, list[TurnRecord]]] = {}
        self.run_id: str | None = None
        self.turn: TurnRecord | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="history-header")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="history-body"):
            yield TurnList(id="history-turns")
            with TabbedContent(id="turn-tabs"):
                for pane, title, key in TABS:
                    with TabPane(title, id=pane):
                        if pane == "tab-feedback":
                            yield FeedbackView(id="history-feedback")
                        else:
                            with VerticalScroll():
                                yield Static(id=f"{pane}-text", classes="turn-text")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        table.add_columns("date", "task", "status", "turns", "best", "run")
        self.query_one("#history-turns", TurnList).border_title = "turns"
        self.action_reload()
        table.focus()

    # --- runs -------------------------------------------------------------------------------
    def action_reload(self) -> None:
        table = self.query_one("#runs", DataTable)
        keep = self.run_id
        table.clear()
        self.runs = {info.run_id: (info, records) for info, records in list_runs(self.runs_root)}
        for info, records in self.runs.values():
            best = best_speedup(info, records)
            table.add_row(
                run_date(info), info.task.name, info.status,
                f"{len(records)}/{info.turns * info.trajectories}",
                fmt_speedup(best), info.run_id, key=info.run_id,
            )
        header = self.query_one("#history-header", Static)
        if not self.runs:
            header.update(Content.styled(f"no runs in {self.runs_root}", "$text-muted"))
            self.show_run(None)
            return
        header.update(Content.assemble(("runs", "bold $text-primary"), f"  {len(self.runs)} stored"))
        self.show_run(keep if keep in self.runs else next(iter(self.runs)))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value != self.run_id:
            self.show_run(event.row_key.value)

    def show_run(self, run_id: str | None) -> None:
        self.run_id = run_id
        turns = self.query_one("#history-turns", TurnList)
        if run_id is None:
            turns.show({})
            self.show_turn(None)
            return
        table = self.query_one("#runs", DataTable)
        row = table.get_row_index(run_id)
        if table.cursor_row != row:
            table.move_cursor(row=row)
        _, records = self.runs[run_id]
        turns.show({(r.trajectory, r.turn): r for r in records})
        if records:
            first = records[0]
            turns.select_key((first.trajectory, first.turn), quiet=True)
        self.show_turn(records[0] if records else None)

    # --- turns ------------------------------------------------------------------------------
    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        key = self.query_one("#history-turns", TurnList).highlighted_key
        if key is None or self.run_id is None:
            return
        _, records = self.runs[self.run_id]
        self.show_turn(next((r for r in records if (r.trajectory, r.turn) == key), None))

    def show_turn(self, record: TurnRecord | None) -> None:
        self.turn = record
        feedback = self.query_one("#history-feedback", FeedbackView)

        def put(pane: str, content: Content | str) -> None:
            self.query_one(f"#{pane}-text", Static).update(content)

        if record is None:
            feedback.show(None, "no turns in this run" if self.run_id else "no run selected")
            for pane, _, _ in TABS[1:]:
                put(pane, "")
            return
        _, records = self.runs[self.run_id] if self.run_id else (None, [])
        feedback.show(record)
        put("tab-kernel", kernel_content(record.code))
        put("tab-diff", diff_content(previous_turn(records, record), record))
        put("tab-prompt", Content(record.prompt) if record.prompt else Content.styled("(no prompt stored)", "$text-muted"))
        response = record.response or "(empty response)"
        if record.reasoning and record.reasoning not in record.response:
            response = f"{record.reasoning}\n\n{record.response}"
        put("tab-response", Content(response))
        put("tab-summary", Content(record.summary) if record.summary else Content.styled("(no summary)", "$text-muted"))

    def action_tab(self, pane: str) -> None:
        self.query_one("#turn-tabs", TabbedContent).active = pane

    def action_resume(self) -> None:
        if self.run_id is None:
            self.notify("no run selected", severity="warning")
            return
        info, _ = self.runs[self.run_id]
        if info.status in FINISHED:
            self.notify(f"run {info.run_id} is {info.status}; only unfinished runs resume", severity="warning")
            return
        self.app.resume_run(info.run_id)
