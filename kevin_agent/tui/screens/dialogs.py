"""Modal screens: confirmation, error with traceback, help with every key.

A dialog keeps its buttons on screen at any size: its body scrolls, its buttons sit at its
bottom. Its footer offers its own keys only: the app's keys do nothing while it is open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Static

from ..format import legend_rows
from ..widgets.rows import Row, Rows

if TYPE_CHECKING:
    from ...delivery import DeliveryPlan


class Dialog(ModalScreen):
    """A modal screen with its own footer (the keys that work while it is open)."""

    def compose_footer(self) -> ComposeResult:
        yield Footer(compact=True, show_command_palette=False)


class ConfirmScreen(Dialog):
    """Ask a yes/no question; dismisses with True for yes. ``body`` is text, or label and text
    rows (the delivery plan)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, body: Content | str | list[Row], *, yes: str = "Yes", no: str = "No",
                 default: bool = True) -> None:
        """``default``: what enter answers (the button that has the focus)."""
        super().__init__()
        self._title = title
        self._body = body
        self._yes = yes
        self._no = no
        self._default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as box:
            box.border_title = self._title
            with VerticalScroll(id="dialog-body"):
                yield Rows(self._body) if isinstance(self._body, list) else Static(self._body)
            with Horizontal(id="dialog-buttons"):
                yield Button(f"{self._yes} (y)", id="yes", variant="primary", compact=True)
                yield Button(f"{self._no} (n)", id="no", compact=True)
        yield from self.compose_footer()

    def on_mount(self) -> None:
        if not self._default:
            self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class ErrorScreen(Dialog):
    """An unexpected failure, with its traceback: a bug, shown so it can be reported."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "app.exit_now", "Quit"),
    ]

    def __init__(self, title: str, traceback_text: str) -> None:
        super().__init__()
        self._title = title
        self._traceback = traceback_text

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="error") as box:
            box.border_title = self._title
            yield Static(
                Content.styled("This is a bug in kevin-opt. Escape closes this, q quits.", "$text-error"),
            )
            with VerticalScroll(id="dialog-body"):
                yield Static(Content(self._traceback), id="traceback")
        yield from self.compose_footer()

    def action_dismiss(self) -> None:
        self.dismiss(None)


NAVIGATION = [
    ("↑ ↓", "select a run or a turn; in a pane, scroll it"),
    ("tab", "move to the next pane"),
    ("ctrl+p", "command palette (themes, screenshots)"),
]
KEY_COLUMN = 10


def _works_now(node, binding: Binding, app) -> bool:
    target, action = (app, binding.action[4:]) if binding.action.startswith("app.") else (node, binding.action)
    name = action.split("(", 1)[0]
    return target.check_action(name, ()) is not False


def key_rows(underneath: Screen, app) -> list[Row]:
    """Every key of the screen underneath and of the app, once each, with what it does; the
    ones that do nothing right now are dimmed."""
    rows: list[Row] = []
    seen: set[str] = set()
    for node in (underneath, app):
        for binding in node.BINDINGS:
            if not isinstance(binding, Binding) or not binding.description or binding.description in seen:
                continue
            seen.add(binding.description)
            keys = ", ".join(app.get_key_display(Binding(k, "")) for k in binding.key.split(","))
            now = _works_now(node, binding, app) or node is app  # the app's keys: under this help
            style = "bold $text-accent" if now else "$text-muted"
            rows.append((Content.styled(keys, style), Content.styled(binding.tooltip or binding.description,
                                                                    "" if now else "$text-muted")))
    rows += [(Content.styled(keys, "bold $text-accent"), what) for keys, what in NAVIGATION]
    return rows


class HelpScreen(Dialog):
    """Every key of the screen underneath and of the app, and what each turn's mark means."""

    BINDINGS = [Binding("escape,question_mark", "dismiss", "Close")]

    def __init__(self, underneath: Screen) -> None:
        super().__init__()
        self._underneath = underneath

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as box:
            box.border_title = "keys"
            with VerticalScroll(id="dialog-body"):
                yield Static(Content.styled("dimmed: does nothing right now", "$text-muted"))
                yield Rows(key_rows(self._underneath, self.app), label_width=KEY_COLUMN, right=True, id="help-keys")
                yield Static(Content.styled("\nmarks", "bold $text-primary"))
                yield Rows(legend_rows(), id="help-legend")
            yield Static(Content.styled("↑ ↓ scroll · escape closes", "$text-muted"), id="dialog-foot")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.query_one("#dialog-body").focus()  # so that the arrow keys scroll it

    def action_dismiss(self) -> None:
        self.dismiss(None)


def commit_summary(plan: DeliveryPlan) -> list[Row]:
    """The delivery plan's own lines (what the JSON summary says), for the question."""
    tones = {"needs --accept-flagged": "$text-warning", "flagged": "$text-warning"}
    rows: list[Row] = []
    for label, text in plan.describe():
        if label == "message":
            continue
        tone = tones.get(label, "")
        if "needs --replace" in text or "uncommitted changes" in text:
            tone = "$text-warning"
        rows.append((Content.styled(label, "bold"), Content.styled(text, tone)))
    if plan.commit:
        rows.append((Content.styled("message", "bold"), Content.styled(plan.message.strip(), "$text-muted")))
    return rows
