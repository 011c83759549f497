"""The history screen lists every kind of record the store holds, by kind: runs, optimizes, benches,
and the damaged ones with why; enter opens each (a run's turns, an optimize's groups and their runs,
a bench's table); an optimize's run says the optimize's commit as its own."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from kevin_agent.tui import KevinApp
from kevin_agent.tui.screens.history import HistoryScreen

from ..tui_support import BENCH_ID, DAMAGED_RUN, GROUP_RUN, OPTIMIZE_ID, every_kind, screen_lines, text_of

RUN_ID = "20250101-120000-affine-0001"
sizes = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")


def _rows(table: DataTable) -> list[tuple[str, str, str]]:
    return [(str(r[0]), str(r[1]), str(r[2])) for r in (table.get_row_at(i) for i in range(table.row_count))]


async def _select(pilot, history: HistoryScreen, key: str) -> None:
    table = history.query_one(DataTable)
    while table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value != key:
        await pilot.press("down")
    await pilot.pause()


@sizes
async def test_the_history_lists_every_kind_by_kind_and_opens_each(tmp_path, size):
    runs, benches = every_kind(tmp_path)
    app = KevinApp(runs_root=runs, benches_root=benches)
    async with app.run_test(size=size, notifications=True) as pilot:
        await pilot.pause()
        history = app.screen
        assert isinstance(history, HistoryScreen)
        table = history.query_one(DataTable)
        assert _rows(table) == [(GROUP_RUN, "run", "interrupted"), (RUN_ID, "run", "completed"),
                                (OPTIMIZE_ID, "optimize", "delivered"), (BENCH_ID, "bench", "completed"),
                                (DAMAGED_RUN, "run", "damaged")]
        # The optimize's run says the optimize's commit, not that it was never committed.
        header = text_of(app, "#history-header")
        assert f"in {OPTIMIZE_ID}'s commit 3d405aa17a" in header or size[0] < 120
        assert "--no-commit" not in header
        # An optimize: its groups, each one's state and run, in the preview; enter gives it the screen.
        await _select(pilot, history, OPTIMIZE_ID)
        assert history.selected == OPTIMIZE_ID and history.run_id is None
        assert screen_lines(app)[0].startswith(f" history  {OPTIMIZE_ID}  optimize  delivered")
        text = text_of(app, "#history-other-text")
        assert f"1. layers.*.act x3 (38.0% of the forward): kept 2.00x  run {GROUP_RUN}" in text
        assert "2. head (8.0% of the forward): dropped: slower in the whole model" in text
        await pilot.press("enter")
        assert history.detail and not table.display and app.focused is history.query_one("#history-other")
        assert any(GROUP_RUN in line for line in screen_lines(app))
        await pilot.press("escape")
        assert not history.detail and app.focused is table
        # A bench: its table.
        await _select(pilot, history, BENCH_ID)
        said = text_of(app, "#history-other-text")
        assert "| tasks/softmax | failed (below) |" in said and "no Model" in said.split("## Failed tasks")[1]
        # A damaged run: listed as damaged, with why; it cannot be resumed, and r says why.
        await _select(pilot, history, DAMAGED_RUN)
        said = text_of(app, "#history-other-text")
        assert said.startswith(f"run {DAMAGED_RUN} is damaged: run.json is unreadable: task: field required")
        assert "r" not in {k for k, b in history.active_bindings.items() if b.binding.show and b.enabled}
        await pilot.press("r")
        await pilot.pause()
        said = [" ".join(n.message.split()) for n in app._notifications]  # laid out for the toast's width
        assert any(f"run {DAMAGED_RUN} is damaged: it cannot be resumed" in m for m in said), said
        # Back to a run: its turns again.
        await pilot.press(*["up"] * 4)
        await pilot.pause()
        assert history.run_id == GROUP_RUN and not history.has_class("-other")
        assert history.query_one("#history-body").display


async def test_a_folder_holding_only_a_bench_lists_the_bench(tmp_path):
    _, benches = every_kind(tmp_path)
    app = KevinApp(runs_root=benches, benches_root=tmp_path / "none")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert _rows(app.screen.query_one(DataTable)) == [(BENCH_ID, "bench", "completed")]
        assert "no runs" not in "\n".join(screen_lines(app))
    nothing = tmp_path / "elsewhere" / "runs"  # and no benches beside it
    empty = KevinApp(runs_root=nothing)
    async with empty.run_test(size=(160, 24)) as pilot:
        await pilot.pause()
        assert f"no runs, optimizes or benches in {nothing}" in screen_lines(empty)[0]
