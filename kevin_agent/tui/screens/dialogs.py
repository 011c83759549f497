"""Modal screens: confirmation, error with traceback, help with every key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Static

from ..format import legend

if TYPE_CHECKING:
    from ...delivery import DeliveryPlan


class ConfirmScreen(ModalScreen[bool]):
    """Ask a yes/no question; dismisses with True for yes."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, body: Content | str, *, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self._title = title
        self._body = body
        self._yes = yes
        self._no = no

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as box:
            box.border_title = self._title
            with VerticalScroll(id="dialog-body"):
                yield Static(self._body)
            with Horizontal(id="dialog-buttons"):
                yield Button(f"{self._yes} (y)", id="yes", variant="primary")
                yield Button(f"{self._no} (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class ErrorScreen(ModalScreen[None]):
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

    def action_dismiss(self) -> None:
        self.dismiss(None)


NAVIGATION = [
    ("↑ ↓", "select a run or a turn"),
    ("tab", "move to the next pane"),
    ("ctrl+p", "command palette (themes, screenshots)"),
]


class HelpScreen(ModalScreen[None]):
    """Every key of the screen underneath and of the app, and what each turn's mark means."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, underneath: Screen) -> None:
        super().__init__()
        self._underneath = underneath

    def compose(self) -> ComposeResult:
        rows: list[Content] = []
        seen: set[str] = set()
        for node in (self._underneath, self.app):
            for binding in node.BINDINGS:
                if not isinstance(binding, Binding) or not binding.description:
                    continue
                keys = ", ".join(self.app.get_key_display(Binding(k, "")) for k in binding.key.split(","))
                if binding.description in seen:
                    continue
                seen.add(binding.description)
                what = binding.tooltip or binding.description
                rows.append(Content.assemble((f"{keys:>10}", "bold $text-accent"), "  ", what))
        for keys, what in NAVIGATION:
            rows.append(Content.assemble((f"{keys:>10}", "bold $text-accent"), "  ", what))
        with Vertical(id="dialog") as box:
            box.border_title = "keys"
            with VerticalScroll(id="dialog-body"):
                yield Static(Content("\n").join(rows), id="help-keys")
                yield Static(Content.styled("\nmarks", "bold $text-primary"))
                yield Static(legend(), id="help-legend")
            yield Static(Content.styled("escape closes", "$text-muted"))

    def action_dismiss(self) -> None:
        self.dismiss(None)


def commit_summary(plan: DeliveryPlan) -> Content:
    """The delivery plan's own lines (what stderr and the JSON summary say), for the question."""
    tones = {"refused": "$text-error", "needs --replace": "$text-warning", "replaces": "$text-warning"}
    lines = [
        Content.assemble((f"{label}: " if label else "  ", "bold"), Content.styled(text, tones.get(label, "")))
        for label, text in plan.describe() if label != "message"
    ]
    if plan.commit:
        lines += [Content.styled("message:", "bold"), Content.styled(plan.message.strip(), "$text-muted")]
    return Content("\n").join(lines)
