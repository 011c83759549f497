"""The model's output for one turn: reasoning (collapsible), answer or kernel, summary."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Collapsible, Static

from ...results import TurnRecord
from ..format import answer_text, kernel_content, reflow
from ..state import LiveTurn
from .code import CodeView

STREAM_TAIL = 8000
"""While streaming, only the end of the text is redrawn: wrapping 60k characters ten times a
second would take the UI's time away from key presses."""


def _tail(text: str, shape: Callable[[str], str] = str) -> Content:
    if len(text) <= STREAM_TAIL:
        return Content(shape(text))
    return Content.assemble((f"… {len(text) - STREAM_TAIL} characters above\n", "$text-muted"),
                            shape(text[-STREAM_TAIL:]))


class ModelOutput(VerticalScroll):
    """Prose wraps to the pane; the kernel keeps its lines and scrolls sideways (← →)."""

    DEFAULT_CSS = """
    ModelOutput { height: 1fr; }
    ModelOutput Collapsible { padding: 0; border-top: none; }
    ModelOutput Collapsible > Contents { padding: 0 0 0 1; }
    ModelOutput #reasoning { color: $text-muted; }
    ModelOutput #summary { margin-top: 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.expand_reasoning: bool | None = None
        """The person's choice; None lets it follow the turn (open while streaming)."""
        self._shown: tuple[int, int, bool] | None = None

    def compose(self) -> ComposeResult:
        with Collapsible(title="reasoning", collapsed=True, id="reasoning-box"):
            yield Static(id="reasoning")
        yield Static(id="answer")
        yield CodeView(id="code", text_id="code-text")
        yield Static(id="summary")

    def on_mount(self) -> None:
        self.border_title = "model output"
        self._show_answer(Content.styled("waiting for the first turn", "$text-muted"))

    def toggle_reasoning(self) -> None:
        box = self.query_one(Collapsible)
        self.expand_reasoning = box.collapsed
        box.collapsed = not box.collapsed

    # The kernel is the one thing here wider than the pane: ← → scroll it.
    def action_scroll_left(self) -> None:
        self.query_one(CodeView).scroll_left(animate=False)

    def action_scroll_right(self) -> None:
        self.query_one(CodeView).scroll_right(animate=False)

    def _set_reasoning(self, text: str, title: str, default_open: bool, *, live: bool = False) -> None:
        box = self.query_one(Collapsible)
        box.display = bool(text)
        box.title = title
        box.collapsed = not (default_open if self.expand_reasoning is None else self.expand_reasoning)
        # The model breaks its lines where it likes; joined, a paragraph wraps to the pane evenly.
        self.query_one("#reasoning", Static).update(_tail(text, reflow) if live else Content(reflow(text)))

    def _show_answer(self, prose: Content | None = None, code: Content | None = None) -> None:
        answer, view = self.query_one("#answer", Static), self.query_one(CodeView)
        answer.display, view.display = prose is not None, code is not None
        answer.update(prose or "")
        view.update(code or "")

    def show_live(self, live: LiveTurn) -> None:
        """Redraw the streaming turn; stays at the bottom unless the person scrolled up."""
        key = (live.trajectory, live.turn, True)
        follow = self._shown != key or self.scroll_y >= self.max_scroll_y - 1
        self._shown = key
        self.border_title = f"model output · trajectory {live.trajectory} turn {live.turn} · {live.phase}"
        reasoning = live.reasoning_text()
        # Open while it streams; once the answer is in, the answer is what to look at.
        self._set_reasoning(reasoning, f"reasoning · {live.reasoning_chars} chars", live.phase == "generating",
                            live=True)
        answer = live.answer_text()
        placeholder = "generating…" if live.phase == "generating" else ""
        self._show_answer(_tail(answer) if answer else Content.styled(placeholder, "italic $text-muted"))
        self.query_one("#summary", Static).update("")
        if follow:
            self.call_after_refresh(self._scroll_end_if_shown, key)

    def _scroll_end_if_shown(self, key: tuple[int, int, bool]) -> None:
        # Scheduled after a redraw; by then another turn may be on show.
        if self._shown == key:
            self.scroll_end(animate=False)

    def show_record(self, record: TurnRecord) -> None:
        key = (record.trajectory, record.turn, False)
        if self._shown != key:
            self.scroll_home(animate=False)
        self._shown = key
        self.border_title = f"model output · trajectory {record.trajectory} turn {record.turn}"
        self._set_reasoning(record.reasoning, f"reasoning · {len(record.reasoning)} chars", False)
        if record.code.strip():
            self._show_answer(code=kernel_content(record.code))
        else:
            # No kernel could be parsed: the answer (after the reasoning) shows what went wrong.
            answer = answer_text(record)
            self._show_answer(Content(answer) if answer else Content.styled("(no answer after the reasoning)"
                                                                            if record.reasoning else "(empty response)",
                                                                            "$text-muted"))
        summary = Content.assemble(("summary: ", "bold"), record.summary) if record.summary.strip() else ""
        self.query_one("#summary", Static).update(summary)

    def show_nothing(self, message: str) -> None:
        self._shown = None
        self.border_title = "model output"
        self._set_reasoning("", "reasoning", False)
        self._show_answer(Content.styled(message, "$text-muted"))
        self.query_one("#summary", Static).update("")
