"""The model screen: an optimize of a whole model, a row per chosen group with its state (queued,
running turn k/n, verified 3.20x, dropped: why), its share of the forward and its part in the whole
model, and the whole model's speedup so far: Amdahl's prediction from the kernels verified yet, then
measured against the prediction once the model ran with them. ``enter`` opens a group's run.

It draws from the ``OptimizeRecord`` alone (each progress call carries it), so a resumed optimize
and a live one look the same.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from ...formatting import counted
from ...results.optimize import GroupRun, OptimizeRecord

NARROW = ("#", "group", "share", "state", "in model")
WIDE = ("#", "group", "class", "share", "could save", "state", "in model", "run")
RIGHT = {"#", "share", "could save", "in model"}
WIDE_AT = 120
STATE_STYLES = {"kept": "$text-success", "verified": "$text-success", "running": "$text-accent",
                "dropped": "$text-warning", "skipped": "$text-warning", "no kernel": "$text-warning",
                "failed": "$text-error"}


def predicted_so_far(record: OptimizeRecord) -> float | None:
    """Amdahl's whole-model speedup from the kernels verified (or kept) so far, each at its confirmed
    speedup over its groups' summed share; None before the first."""
    done = [g for g in record.groups if g.state in ("verified", "kept") and g.speedup]
    if not done:
        return None
    rest = 1.0 - sum(g.share for g in done) + sum(g.share / g.speedup for g in done)
    return 1.0 / rest if rest > 0 else None


def whole_model_words(record: OptimizeRecord) -> str:
    """The whole model's speedup as it stands: measured against predicted once combined."""
    if record.measured is not None:
        predicted = f" (Amdahl predicts {record.predicted:.2f}x)" if record.predicted else ""
        from ...optimize.report import speedup_words

        return f"whole model {speedup_words(record.measured, record.measured_interval)} measured{predicted}"
    so_far = predicted_so_far(record)
    if so_far is not None:
        return f"whole model {so_far:.2f}x predicted so far (not measured yet)"
    return "whole model: no kernel yet"


def cells(index: int, g: GroupRun) -> dict[str, str]:
    return {"#": str(index), "group": g.name, "class": g.class_name, "share": f"{100 * g.share:.1f}%",
            "could save": f"{100 * g.own_saving:.1f}%", "state": g.state_words(),
            "in model": f"{g.contribution:.2f}x" if g.contribution is not None else "-", "run": g.run_id or "-"}


class ModelScreen(Screen):
    DEFAULT_CSS = """
    ModelScreen #model-summary { height: auto; max-height: 2; padding: 0 1; background: $panel; }
    ModelScreen #groups { height: 1fr; }
    ModelScreen #group-detail { height: auto; max-height: 6; padding: 0 1; border-top: solid $primary; }
    ModelScreen #model-status { height: 1; padding: 0 1; background: $panel; }
    """
    BINDINGS = [
        Binding("enter", "open_run", "Open run", tooltip="Open the highlighted group's run", priority=True),
        Binding("h", "app.open_history", "History"),
    ]

    def __init__(self, model_name: str) -> None:
        super().__init__(id="model")
        self.model_name = model_name
        self.record: OptimizeRecord | None = None
        self._status: tuple[str, str] = ("starting: the profile comes first", "$text-accent")

    def compose(self) -> ComposeResult:
        yield Static(f"optimize {self.model_name}", id="model-summary")
        yield DataTable(id="groups", cursor_type="row", zebra_stripes=True)
        yield Static("", id="group-detail")
        yield Static("", id="model-status")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self._draw_status()
        if self.record is not None:
            self.show(self.record)
        self.query_one("#groups", DataTable).focus()

    @property
    def toast_room(self) -> int:
        return self.size.width

    def columns(self) -> tuple[str, ...]:
        return WIDE if self.size.width >= WIDE_AT else NARROW

    def on_resize(self) -> None:
        if self.record is not None:
            self.show(self.record)

    # --- drawing --------------------------------------------------------------------------------
    def show(self, record: OptimizeRecord) -> None:
        """Redraw from ``record`` (a copy: the optimize's thread goes on changing its own)."""
        self.record = record
        if not self.is_mounted:
            return
        device = record.device + (f" ({record.device_name})" if record.device_name else "")
        forward = f" · {record.forward_ms:.3g} ms per forward" if record.forward_ms else ""
        room = max(self.size.width - 2, 20)
        lines = [whole_model_words(record), f"{self.model_name} on {device}{forward} · {record.optimize_id}"]
        self.query_one("#model-summary", Static).update(
            "\n".join(line if len(line) <= room else line[:room - 1] + "…" for line in lines))
        table = self.query_one("#groups", DataTable)
        row = table.cursor_row
        shown = self.columns()
        table.clear(columns=True)
        table.add_columns(*shown)
        for i, g in enumerate(record.groups, start=1):
            row_cells = cells(i, g)
            style = STATE_STYLES.get(g.state, "")
            table.add_row(*(Text(row_cells[c], justify="right" if c in RIGHT else "left",
                                 style=self.app.theme_variables.get(style[1:], "") if c == "state" and style else "")
                            for c in shown), key=g.name)
        if record.groups:
            table.move_cursor(row=min(max(row, 0), len(record.groups) - 1))
        self._detail()

    def selected(self) -> GroupRun | None:
        if self.record is None or not self.record.groups or not self.is_mounted:
            return None
        row = self.query_one("#groups", DataTable).cursor_row
        return self.record.groups[row] if 0 <= row < len(self.record.groups) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail()

    def _detail(self) -> None:
        g = self.selected()
        record = self.record
        if g is None:
            lines = record.plan[:4] if record is not None else []
        else:
            members = ", ".join(g.members[:4]) + (", ..." if len(g.members) > 4 else "")
            lines = [f"{g.name}: {g.class_name}, {counted(len(g.members), 'module')} ({members}), "
                     f"{100 * g.share:.1f}% of the forward; a kernel could save {100 * g.own_saving:.1f}%",
                     g.state_words() + (f" · run {g.run_id} (enter opens it)" if g.run_id else "")]
            if g.confirmation is not None and len(g.confirmation.ci95) == 2:
                low, high = g.confirmation.ci95
                lines.append(f"confirmed {g.speedup:.2f}x on its task ({low:.2f}x-{high:.2f}x)")
            if g.contribution is not None:
                lines.append(f"in the whole model: {g.contribution:.2f}x; calls that ran the original forward: "
                             f"{g.fallback_calls:g}")
            if g.signatures:
                lines.append(f"guarded to: {'; '.join(g.signatures[:3])}" + (" ..." if len(g.signatures) > 3 else ""))
        self.query_one("#group-detail", Static).update("\n".join(lines))

    def say(self, text: str, style: str = "$text-muted") -> None:
        """The status line: what the optimize does now, and how it ended."""
        self._status = (text, style)
        if self.is_mounted:
            self._draw_status()

    def _draw_status(self) -> None:
        text, style = self._status
        colour = self.app.theme_variables.get(style[1:], "") if style.startswith("$") else style
        self.query_one("#model-status", Static).update(Text(text, style=colour, no_wrap=True, overflow="ellipsis"))

    # --- keys -----------------------------------------------------------------------------------
    def action_open_run(self) -> None:
        g = self.selected()
        if g is None:
            return
        self.app.open_group_run(g)
