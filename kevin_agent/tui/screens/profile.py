"""The profile screen: a whole model's modules, ranked for a kernel; choosing one extracts it into
a task file and starts a run on it.

The table is ``model.table``'s (the columns ``kevin-opt profile`` prints, fewer of them at 80
columns; a row is a group of identical instances, ``layers.*.norm x3``); the highlighted group's
class, members, calls, headroom, floor and signatures show underneath.
The profile and the extraction run in worker threads (each a worker process of their own); the
run itself is the app's (``choose`` hands it over).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker, WorkerState

from ...errors import KevinError
from ...formatting import counted
from ...model.records import ModelProfile, ModuleGroup
from ...model.table import COLUMNS, RIGHT, cells, short_summary

NARROW = ("#", "module", "ms/fwd", "share", "amdahl", "saves", "note")
"""The columns shown below 120 columns; the rest are in the detail under the table."""
WIDE_AT = 120


class ProfileScreen(Screen):
    DEFAULT_CSS = """
    ProfileScreen #profile-summary { height: auto; max-height: 2; padding: 0 1; background: $panel; }
    ProfileScreen #modules { height: 1fr; }
    ProfileScreen #module-detail { height: auto; max-height: 7; padding: 0 1; border-top: solid $primary; }
    """
    BINDINGS = [
        Binding("enter", "choose", "Extract + run", tooltip="Extract the module into a task file and start a run",
                priority=True),
        Binding("g", "profile", "Profile again"),
    ]

    def __init__(self, model_name: str, profile: Callable[[], ModelProfile],
                 choose: Callable[[ModuleGroup], None]) -> None:
        """``profile()`` profiles the model (it blocks: it runs in a thread); ``choose(group)`` is
        called, in a thread, with the group the person picked."""
        super().__init__(id="profile")
        self.model_name = model_name
        self._profile = profile
        self._choose = choose
        self.profile: ModelProfile | None = None
        self.busy = ""

    def compose(self) -> ComposeResult:
        yield Static(f"profiling {self.model_name}: a worker runs its forwards under the profiler",
                     id="profile-summary")
        yield DataTable(id="modules", cursor_type="row", zebra_stripes=True)
        yield Static("", id="module-detail")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.action_profile()

    @property
    def toast_room(self) -> int:
        """Notifications sit at the bottom, as wide as the screen, over the detail (app.tcss)."""
        return self.size.width

    # --- the profile ------------------------------------------------------------------------
    def columns(self) -> tuple[str, ...]:
        return COLUMNS if self.size.width >= WIDE_AT else NARROW

    def action_profile(self) -> None:
        if self.busy:
            self.notify(f"{self.busy} is under way", severity="warning")
            return
        self.busy = "profiling"
        self.query_one("#profile-summary", Static).update(f"profiling {self.model_name} ...")
        self._run_profile()

    @work(thread=True, exclusive=True, group="profile", exit_on_error=False)
    def _run_profile(self) -> ModelProfile:
        return self._profile()

    def show(self, profile: ModelProfile) -> None:
        self.profile = profile
        self.query_one("#profile-summary", Static).update(short_summary(profile))
        table = self.query_one("#modules", DataTable)
        table.clear(columns=True)
        shown = self.columns()
        table.add_columns(*shown)
        for g in profile.groups:
            row = dict(zip(COLUMNS, cells(g)))
            table.add_row(*(Text(row[c], justify="right" if c in RIGHT else "left") for c in shown),
                          key=g.name or "(model)")
        if profile.ranked_groups:
            table.move_cursor(row=profile.groups.index(profile.ranked_groups[0]))
        table.focus()
        self._detail(self.selected())

    def selected(self) -> ModuleGroup | None:
        if self.profile is None or not self.profile.groups:
            return None
        row = self.query_one("#modules", DataTable).cursor_row
        return self.profile.groups[row] if 0 <= row < len(self.profile.groups) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail(self.selected())

    def _detail(self, m: ModuleGroup | None) -> None:
        if m is None:
            self.query_one("#module-detail", Static).update("")
            return
        sigs = "; ".join(f"{s.key} x{s.calls}" for s in m.signatures[:3])
        more = f" (+{len(m.signatures) - 3} more)" if len(m.signatures) > 3 else ""
        members = f" ({', '.join(m.members[:4])}{', ...' if len(m.members) > 4 else ''})" if len(m.members) > 1 else ""
        lines = [f"{m.name or '(the whole model)'}{members}: {m.class_name}, {counted(m.calls, 'call')} per forward, "
                 f"{m.time_ms:.3g} ms",
                 (f"reaches {100 * m.roofline:.0f}% of its roofline; " if m.roofline is not None else "")
                 + f"headroom {100 * m.headroom:.0f}% (floor {m.floor_ms:.3g} ms, library {m.library_ms:.3g} ms)",
                 f"signatures: {sigs}{more}"]
        if m.library:
            lines.append("one vendor library call: a kernel rarely beats it")
        self.query_one("#module-detail", Static).update("\n".join(lines))

    # --- choosing -----------------------------------------------------------------------------
    def action_choose(self) -> None:
        m = self.selected()
        if getattr(self.app, "running", False):
            self.notify("the run is starting", severity="warning")
            return
        if m is None or self.busy:
            if self.busy:
                self.notify(f"{self.busy} is under way", severity="warning")
            return
        self.busy = f"extracting {m.name or 'the model'}"
        self.query_one("#module-detail", Static).update(f"{self.busy}: capturing it and checking the task file "
                                                        "against the module ...")
        self._run_choose(m)

    def say(self, text: str) -> None:
        """A line about the choice (what is starting, what was kept), where the detail goes."""
        self.query_one("#module-detail", Static).update(text)

    def start_failed(self, error: KevinError, more: str = "") -> None:
        """The run the choice started could not start: why, what to do, and the detail again."""
        text = error.message + (f"\nhint: {error.hint}" if error.hint else "") + (f"\n{more}" if more else "")
        self.notify(text, title="the run cannot start", severity="error", timeout=30, markup=False)
        self.say(f"the run cannot start: {error.message}")

    @work(thread=True, exclusive=True, group="choose", exit_on_error=False)
    def _run_choose(self, m: ModuleGroup) -> None:
        self._choose(m)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group not in ("profile", "choose") or event.state not in (
                WorkerState.SUCCESS, WorkerState.ERROR):
            return
        self.busy = ""
        if event.state is WorkerState.SUCCESS:
            if event.worker.group == "profile":
                self.show(event.worker.result)
            return
        error = event.worker.error
        if not isinstance(error, KevinError):
            raise error
        text = error.message + (f"\nhint: {error.hint}" if error.hint else "")
        self.notify(text, severity="error", timeout=20, markup=False)
        if event.worker.group == "profile":
            self.query_one("#profile-summary", Static).update(f"{self.model_name}: the profile failed")
        else:
            self._detail(self.selected())
