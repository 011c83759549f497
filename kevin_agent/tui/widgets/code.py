"""Code that keeps its lines: scrolled sideways, never soft-wrapped (a wrapped diff line would
lose its +/- and a wrapped kernel line its indentation)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import ScrollableContainer
from textual.content import Content
from textual.widgets import Static


class CodeBlock(ScrollableContainer):
    """Code in a scroller: its text keeps its lines."""

    DEFAULT_CSS = """
    CodeBlock > Static {
        width: auto;
        text-wrap: nowrap;
    }
    """

    def __init__(self, *, id: str | None = None, text_id: str | None = None) -> None:
        super().__init__(id=id)
        self._text_id = text_id

    def compose(self) -> ComposeResult:
        yield Static(id=self._text_id, classes="code-text")

    def update(self, content: Content | str) -> None:
        self.query_one(Static).update(content)
        self.scroll_to(0, 0, animate=False)


class CodeView(CodeBlock, can_focus=False):
    """A block of code inside a taller scroller: as high as the code, as wide as the pane, with
    its own horizontal scrollbar when a line is wider than that."""

    DEFAULT_CSS = """
    CodeView {
        height: auto;
        width: 1fr;
        overflow-x: auto;
        overflow-y: hidden;
        scrollbar-size-horizontal: 1;
    }
    """


class CodePane(CodeBlock):
    """A pane that holds only code and scrolls both ways (the history's kernel and diff)."""

    DEFAULT_CSS = """
    CodePane {
        height: 1fr;
        width: 1fr;
        overflow: auto auto;
        padding: 0 1;
    }
    """
