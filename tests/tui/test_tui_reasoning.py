"""The reasoning pane: the model's hard line breaks inside a paragraph are joined, so a paragraph
wraps to the pane evenly instead of breaking at the model's lines and the pane's both."""

from __future__ import annotations

from kevin_agent.results import Status, TurnRecord
from kevin_agent.tui import KevinApp
from kevin_agent.tui.format import reflow
from kevin_agent.tui.widgets import ModelOutput

from ..tui_support import screen_lines

PARAGRAPH = ("The kernel reads each row once and keeps the running maximum in a register, so the second pass "
             "only rescales what it has already loaded from global memory.")


def _hard_wrapped(text: str, width: int) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = ""
        line = f"{line} {word}".strip()
    return "\n".join([*lines, line])


def test_reflow_joins_a_paragraphs_lines_and_keeps_blocks():
    text = "\n".join([
        _hard_wrapped(PARAGRAPH, 70), "", "Steps:", "1. load the row", "2. reduce", "   across the warp",
        "- a bullet that", "goes on", "", "```cpp", "int x = 1;", "int y = 2;", "```", "# Heading", "next line",
        "| a | b |", "| 1 | 2 |"])
    assert reflow(text).splitlines() == [
        PARAGRAPH, "", "Steps:", "1. load the row", "2. reduce", "   across the warp", "- a bullet that goes on", "",
        "```cpp", "int x = 1;", "int y = 2;", "```", "# Heading", "next line", "| a | b |", "| 1 | 2 |"]
    assert reflow("") == "" and reflow("one line") == "one line"


async def test_the_reasoning_pane_wraps_a_hard_wrapped_paragraph_evenly(tmp_path):
    reasoning = _hard_wrapped(PARAGRAPH, 70)  # wider than the pane: each line would break in two
    record = TurnRecord(trajectory=0, turn=1, status=Status.PARSE_ERROR, feedback="", reasoning=reasoning,
                        response="no code")
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=(100, 30)) as pilot:
        app.switch_mode("run")
        await pilot.pause()
        output = app.screen.query_one(ModelOutput)
        output.expand_reasoning = True
        output.show_record(record)
        await pilot.pause()
        static = output.query_one("#reasoning")
        width = static.content_region.width
        left = static.content_region.x
        rows = [line[left:left + width].rstrip() for line in
                screen_lines(app)[static.content_region.y:static.content_region.bottom]]
        rows = [r for r in rows if r]
        assert " ".join(rows) == PARAGRAPH
        # Every line but the last is filled: the next word would not have fitted on it.
        for row, following in zip(rows, rows[1:]):
            assert len(row) + 1 + len(following.split()[0]) > width, (row, following, width)
