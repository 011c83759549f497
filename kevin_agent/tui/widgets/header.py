"""A header of fixed height whose lines are fitted to the width instead of wrapping: the parts
that matter least give up their room first, each down to a floor, and never spill into the
panes below."""

from __future__ import annotations

from rich.cells import cell_len
from textual.content import Content
from textual.widget import Widget

Part = tuple[str | Content, str, int]
"""(text, its style, the fewest cells it may be cut to: 0 drops it whole rather than cut it);
styled ``Content`` keeps its own styles."""
SEP = "  "


def fit(parts: list[Part], width: int) -> Content:
    """The parts on one line of at most ``width`` cells; later parts are cut first."""
    texts: list[Content | None] = [t if isinstance(t, Content) else Content.styled(t, style)
                                   for t, style, _ in parts if t]
    floors = [floor for t, _, floor in parts if t]
    over = sum(t.cell_length for t in texts if t) + cell_len(SEP) * max(len(texts) - 1, 0) - width
    for i in reversed(range(len(texts))):
        text = texts[i]
        if over <= 0 or text is None:
            break
        if floors[i] == 0:
            texts[i] = None
            over -= text.cell_length + cell_len(SEP)
        elif (room := text.cell_length - floors[i]) > 0:
            cut = min(room, over)
            texts[i] = text.truncate(text.cell_length - cut, ellipsis=True)
            over -= cut
    return Content(SEP).join(t for t in texts if t is not None).truncate(max(width, 0), ellipsis=True)


class FitHeader(Widget):
    """Lines of parts, each fitted to the header's width on every render (so on resize too)."""

    DEFAULT_CSS = """
    FitHeader {
        height: 1;
        padding: 0 1;
        background: $panel;
    }
    """

    def __init__(self, lines: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lines: list[list[Part]] = [[] for _ in range(lines)]
        self.styles.height = lines

    def set_lines(self, *lines: list[Part]) -> None:
        self._lines = [list(line) for line in lines] + [[] for _ in range(len(self._lines) - len(lines))]
        self.refresh()

    def render(self) -> Content:
        width = self.content_size.width
        return Content("\n").join(fit(line, width) for line in self._lines)
