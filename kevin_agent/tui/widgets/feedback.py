"""The feedback of one turn: checks, compile log, correctness numbers, timings."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from ...results import TurnRecord
from ..format import feedback_content


class FeedbackView(VerticalScroll):
    DEFAULT_CSS = """
    FeedbackView { height: 1fr; }
    FeedbackView > Static { width: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static(Content.styled("no finished turn yet", "$text-muted"), id="feedback-text")

    def on_mount(self) -> None:
        self.border_title = "feedback"

    def show(self, record: TurnRecord | None, placeholder: str = "no finished turn yet") -> None:
        text = feedback_content(record) if record is not None else Content.styled(placeholder, "$text-muted")
        self.query_one("#feedback-text", Static).update(text)
        self.scroll_home(animate=False)
