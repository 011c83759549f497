"""Snapshots of the run and history screens, small and large terminals.

Built from fixed records (no clock, fixed run ids), so the pictures only change when the
screens do. Update them with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and
look at the SVGs in tests/__snapshots__/ before accepting.
"""

from __future__ import annotations

import pytest

from kevin_agent.events import EvalOutput, EvalStage, GenerationFinished, TokenDelta, TurnStarted
from kevin_agent.results import Stage
from kevin_agent.results import TurnRecord
from kevin_agent.store import RunStore
from kevin_agent.tui import KevinApp
from kevin_agent.tui.messages import message_for
from kevin_agent.tui.screens.dialogs import ConfirmScreen, commit_summary

from ..tui_support import (better_module_plan, build_store, confirmed_run_events, every_kind, fixed_info, fixed_records,
                           run_events)

SIZES = [(80, 24), (160, 48)]
sizes = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
BUILD_LOG = [
    "[1/3] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=affine_v3 -O3 -c main.cpp -o main.o",
    "[2/3] c++ -MMD -MF affine.o.d -DTORCH_EXTENSION_NAME=affine_v3 -O3 -c affine.cpp -o affine.o",
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_app(tmp_path, clock=lambda: 0.0) -> KevinApp:
    return KevinApp(runs_root=build_store(tmp_path / "runs"), clock=clock)


async def finished_run(pilot) -> None:
    pilot.app.switch_mode("run")
    await pilot.pause()
    for event in run_events():
        pilot.app.post_message(message_for(event))
    await pilot.pause()


async def compiling(pilot) -> None:
    """Trajectory 1's third turn is building, 42 s in, while the rest of the run is done."""
    app, clock = pilot.app, pilot.app.run_screen._clock
    app.switch_mode("run")
    await pilot.pause()
    for event in run_events()[:-3]:
        app.post_message(message_for(event))
    app.post_message(message_for(TurnStarted(trajectory=1, turn=3)))
    await pilot.pause()
    app.sink.emit(TokenDelta(trajectory=1, turn=3, channel="reasoning", text="The constant was wrong. " * 6))
    app.sink.emit(TokenDelta(trajectory=1, turn=3, channel="text", text="```python\nclass ModelNew: ...\n```"))
    clock.now += 64
    app.post_message(message_for(GenerationFinished(trajectory=1, turn=3, seconds=64.0)))
    app.post_message(message_for(EvalStage(trajectory=1, turn=3, stage=Stage.COMPILE)))
    await pilot.pause()
    for line in BUILD_LOG:
        app.sink.emit(EvalOutput(trajectory=1, turn=3, text=line + "\n"))
    clock.now += 42
    await pilot.pause(1.2)


async def compile_error_selected(pilot) -> None:
    await finished_run(pilot)
    await pilot.press("up", "up", "up", "up")  # from the last turn up to trajectory 1's compile error
    await pilot.pause()


async def best_turn_diff(pilot) -> None:
    await pilot.press("down", "enter")  # open the completed run
    await pilot.press("down", "down", "d")  # trajectory 0, turn 3
    await pilot.pause()


@sizes
def test_run_screen(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=finished_run)


@sizes
def test_run_screen_compiling(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path, Clock()), terminal_size=size, run_before=compiling)


def test_run_screen_selected_compile_error(snap_compare, tmp_path):
    assert snap_compare(make_app(tmp_path), terminal_size=(80, 24), run_before=compile_error_selected)


@sizes
def test_history_screen(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, press=["down"])


@sizes
def test_history_of_every_kind(snap_compare, tmp_path, size):
    """Runs, an optimize, a bench and a damaged run, by kind; the optimize's run says its commit."""
    runs, benches = every_kind(tmp_path)
    app = KevinApp(runs_root=runs, benches_root=benches, clock=lambda: 0.0)
    assert snap_compare(app, terminal_size=size)


@sizes
def test_history_diff(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=best_turn_diff)


async def confirmed_run(pilot) -> None:
    """The run ended and its best kernels were confirmed: the turn list, the chart and the header
    say which number is which."""
    pilot.app.switch_mode("run")
    await pilot.pause()
    for event in confirmed_run_events():
        pilot.app.post_message(message_for(event))
    await pilot.pause()


def delivery_question(root):
    plan = better_module_plan(root)

    async def ask(pilot) -> None:
        await confirmed_run(pilot)
        title, yes = plan.question()
        pilot.app.push_screen(ConfirmScreen(title, commit_summary(plan), yes=yes))
        await pilot.pause()

    return ask


async def help_screen(pilot) -> None:
    await confirmed_run(pilot)
    await pilot.press("question_mark")
    await pilot.pause()


def long_lineage_app(tmp_path) -> KevinApp:
    """A stored run whose one chain of twelve turns is wider than any pane."""
    root = tmp_path / "runs"
    store = RunStore.create(root, fixed_info("20250101-120000-affine-0001", status="completed",
                                             created_at="2025-01-01T12:00:00+00:00", turns=12))
    first: TurnRecord = fixed_records()[0]
    for turn in range(1, 13):
        store.append(first.model_copy(update={"turn": turn}))
    return KevinApp(runs_root=root)


@sizes
def test_run_screen_confirmed(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=confirmed_run)


@sizes
def test_delivery_question_with_a_better_module_there(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=delivery_question(tmp_path / "proj"))


@sizes
def test_help(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=help_screen)


@sizes
def test_history_lineage(snap_compare, tmp_path, size):
    assert snap_compare(long_lineage_app(tmp_path), terminal_size=size, press=["enter", "l"])


async def finished_run_with_a_notice(pilot) -> None:
    """A short notification: over the speedup chart, as wide as the side column."""
    await finished_run(pilot)
    pilot.app.notify("wrote layers/my_relu_kevin.py and its report", title="delivery", markup=False)
    await pilot.pause()


@sizes
def test_run_screen_with_a_notification(snap_compare, tmp_path, size):
    assert snap_compare(make_app(tmp_path), terminal_size=size, run_before=finished_run_with_a_notice)


def profile_app(tmp_path) -> KevinApp:
    """The profile screen of examples/mlp_block.py with a fixed profile: the header's time per
    forward is the table's model row, the flushed one beside it."""
    import shutil

    from kevin_agent.config import load_config
    from kevin_agent.model.modelfile import load_model_file
    from kevin_agent.tui.profile import ProfileApp
    from kevin_agent.tui.screens.profile import ProfileScreen

    from ..conftest import EXAMPLES
    from .test_model_tui import example_profile

    shutil.copy(EXAMPLES / "mlp_block.py", tmp_path / "mlp_block.py")
    config = load_config({"device": "cpu"})
    app = ProfileApp(load_model_file(tmp_path / "mlp_block.py"), config, config.eval_settings("cpu"), forwards=2)
    measured = example_profile().model_copy(update={"forward_ms": 118.0, "profiled_forward_ms": 60.0})
    app.profile_screen = ProfileScreen("mlp_block.py", lambda: measured, lambda m: None)
    return app


async def profile_with_a_notice(pilot) -> None:
    from ..tui_support import wait_for

    await wait_for(pilot, lambda: pilot.app.profile_screen.profile is not None, 30, "the profile")
    pilot.app.notify("vLLM is not installed\nhint: pass --backend openai --base-url URL, or --backend scripted "
                     "--responses FILE", title="the run cannot start", severity="error", markup=False)
    await pilot.pause()


@sizes
def test_profile_screen(snap_compare, tmp_path, size):
    assert snap_compare(profile_app(tmp_path), terminal_size=size, run_before=profile_with_a_notice)


def model_app(tmp_path):
    """The model screen of a recorded optimize, held in its second group's run."""
    from kevin_agent.tui.optimize import OptimizeApp

    from .optimize_replay import ReplaySession

    return OptimizeApp(ReplaySession(tmp_path, hold=True), clock=lambda: 0.0)


async def model_mid_way(pilot) -> None:
    from ..tui_support import screen_lines, wait_for

    await wait_for(pilot, lambda: "running turn 3/4" in "\n".join(screen_lines(pilot.app)), 30, "the second run")
    await pilot.pause()


@sizes
def test_model_screen(snap_compare, tmp_path, size):
    assert snap_compare(model_app(tmp_path), terminal_size=size, run_before=model_mid_way)
