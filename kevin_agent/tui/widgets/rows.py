"""Label and text rows whose wrapped lines keep to the text's column (a hanging indent), laid
out again at whatever width the widget gets: the help's keys and marks, the delivery plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.content import Content
from textual.widgets import Static

Row = tuple[Content | str, Content | str]


def _content(value: Content | str) -> Content:
    return value if isinstance(value, Content) else Content(value)


def row_lines(rows: Sequence[Row], width: int, label_width: int | None = None, *, gap: int = 2,
              right: bool = False) -> list[Content]:
    """The rows as lines of at most ``width`` cells. Labels take ``label_width`` cells (default:
    the widest, up to a third of the width); a label wider than that gets a line of its own (so
    with ``label_width=0`` every label heads its text)."""
    labels = [_content(label) for label, _ in rows]
    widest = max((label.cell_length for label in labels), default=0)
    column = label_width if label_width is not None else min(widest, max(width // 3, 1))
    room = max(width - column - gap, 10)
    lines: list[Content] = []
    for label, (_, text) in zip(labels, rows):
        wrapped = _content(text).wrap(room) or [Content("")]
        if label.cell_length > column:
            lines.append(label)
        else:
            pad = " " * (column - label.cell_length)
            head = Content.assemble(pad, label) if right else Content.assemble(label, pad)
            lines.append(Content.assemble(head, " " * gap, wrapped.pop(0)))
        lines += [Content.assemble(" " * (column + gap), line) for line in wrapped]
    return lines


class Rows(Static):
    """A ``Static`` of label and text rows with hanging indents."""

    DEFAULT_CSS = """
    Rows { height: auto; width: 1fr; }
    """

    def __init__(self, rows: Sequence[Row] = (), *, label_width: int | None = None, right: bool = False,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows = list(rows)
        self._label_width = label_width
        self._right = right

    def set_rows(self, rows: Sequence[Row]) -> None:
        self._rows = list(rows)
        self.refresh(layout=True)

    @property
    def plain(self) -> str:
        """The rows as text, one row a line (what a test or a log reads)."""
        return "\n".join(f"{_content(label).plain}  {_content(text).plain}" for label, text in self._rows)

    def _lines(self, width: int) -> list[Content]:
        return row_lines(self._rows, max(width, 20), self._label_width, right=self._right)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._lines(width))

    def render(self) -> Content:
        return Content("\n").join(self._lines(self.content_size.width))


class WrappedLines(Static):
    """Lines that a function lays out for the width the widget gets, every time it gets one."""

    DEFAULT_CSS = """
    WrappedLines { height: auto; width: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._layout: Callable[[int], list[Content]] = lambda width: []

    def set_layout(self, layout: Callable[[int], list[Content]]) -> None:
        self._layout = layout
        self.refresh(layout=True)

    @property
    def plain(self) -> str:
        return "\n".join(line.plain for line in self._layout(10_000))

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._layout(max(width, 20)))

    def render(self) -> Content:
        return Content("\n").join(self._layout(max(self.content_size.width, 20)))
