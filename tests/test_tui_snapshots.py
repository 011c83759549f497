"""Snapshots of the run and history screens, small and large terminals.

Built from fixed records (no clock, fixed run ids), so the pictures only change when the
screens do. Update them with ``pytest tests/test_tui_snapshots.py --snapshot-update`` and
look at the SVGs in tests/__snapshots__/ before accepting.
"""

from __future__ import annotations

import pytest

from kevin_agent.tui import KevinApp
from kevin_agent.tui.messages import message_for

from .tui_support import build_store, run_events

SIZES = [(80, 24), (160, 48)]


def make_app(tmp_path) -> KevinApp:
    return KevinApp(runs_root=build_store(tmp_path / "runs"), clock=lambda: 0.0)


async def finished_run(pilot) -> None:
    pilot.app.switch_mode("run")
    await pilot.pause()
    for event in run_events():
        pilot.app.post_message(message_for(event))
    await pilot.pause()


async def compile_error_selected(pilot) -> None:
    await finished_run(pilot)
    await pilot.press("up", "up", "up", "up")  # from the last turn up to trajectory 1's compile error
    await pilot.pause()


async def best_turn_diff(pilot) -> None:
    await pilot.press("down", "tab")  # the completed run, then its turns
    await pilot.press("down", "down", "d")  # trajectory 0, turn 3
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_run_screen(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=finished_run)


def test_run_screen_selected_compile_error(snap_compare, tmp_path):
    assert snap_compare(make_app(tmp_path), terminal_size=(80, 24), run_before=compile_error_selected)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_history_screen(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, press=["down"])


def test_history_diff(snap_compare, tmp_path):
    assert snap_compare(make_app(tmp_path), terminal_size=(100, 30), run_before=best_turn_diff)
