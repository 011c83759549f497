"""The profile screen at 80x24: the ranked table, the module under the cursor in detail, and a
choice that extracts the module and starts a run on it."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from kevin_agent.config import load_config
from kevin_agent.model.marks import extracted_from
from kevin_agent.model.modelfile import ModelError, load_model_file
from kevin_agent.model.ranking import rank
from kevin_agent.tui.profile import ProfileApp, task_path_for
from kevin_agent.tui.screens.dialogs import ConfirmScreen
from kevin_agent.tui.screens.profile import ProfileScreen

from ..conftest import EXAMPLES
from ..model.test_model_ranking import module, profile
from ..tui_support import offered_keys, screen_lines, wait_for


def example_profile():
    return rank(profile(
        module("", 60.0, children=["norm", "up", "act", "down"], library_ms=20.0, cls="MLPBlock"),
        module("norm", 3.0, shape=(4096, 128), cls="RMSNorm"),
        module("up", 10.0, library="gemm", library_ms=10.0, shape=(4096, 128), cls="Linear"),
        module("act", 35.0, shape=(4096, 512), cls="TanhGELU"),
        module("down", 10.0, library="gemm", library_ms=10.0, shape=(4096, 512), cls="Linear"),
    ))


@pytest.fixture
def model_dir(tmp_path):
    shutil.copy(EXAMPLES / "mlp_block.py", tmp_path / "mlp_block.py")
    return tmp_path


async def test_the_table_at_80x24_and_a_choice(model_dir):
    chosen = []
    config = load_config({"device": "cpu"})
    app = ProfileApp(load_model_file(model_dir / "mlp_block.py"), config, config.eval_settings("cpu"), forwards=2)
    app.profile_screen = ProfileScreen("mlp_block.py", example_profile, chosen.append)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None)
        await pilot.pause()
        lines = screen_lines(app)
        assert all(len(line.rstrip()) <= 80 for line in lines)
        rows = [line.split() for line in lines]
        header = next(i for i, r in enumerate(rows) if r[:2] == ["#", "module"])
        assert rows[header + 1][0] == "(model)" and rows[header + 2][:2] == ["1", "act"]
        assert rows[header + 3][:2] == ["2", "norm"] and "GEMM" in lines[header + 4]
        text = "\n".join(lines)
        assert "act: TanhGELU, 1 call per forward" in text and "signatures: float32[4096,512] x1" in text
        assert "enter" in offered_keys(app)
        await pilot.press("down")
        assert "norm: RMSNorm" in "\n".join(screen_lines(app))
        await pilot.press("enter")
        await wait_for(pilot, lambda: chosen)
    assert [m.path for m in chosen] == ["norm"]


def scripted_app(model_dir, **settings):
    # the example's script holds two answers: a run of more turns is refused before it starts
    config = load_config({"device": "cpu", "backend": "scripted", "responses": EXAMPLES / "mlp_block_act.cpu.jsonl",
                          "turns": 2, **settings})
    return ProfileApp(load_model_file(model_dir / "mlp_block.py"), config, config.eval_settings("cpu"), forwards=2)


async def test_a_choice_extracts_the_module_and_starts_its_run(model_dir):
    app = scripted_app(model_dir)
    started = []
    app.start_engine = lambda factory, status="starting": started.append(factory)  # made below, not driven
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None, timeout=60)
        assert app.profile_screen.selected().path == "act"  # the cursor starts on the top-ranked module
        await pilot.press("enter")
        await wait_for(pilot, lambda: started, timeout=60)
        assert app.current_mode == "profile"  # until the run has started
        engine = await asyncio.to_thread(started[0], app.sink)
        try:
            await pilot.pause()
            assert app.current_mode == "run"
        finally:
            engine.close()
            engine.store.release()
    task = model_dir / "mlp_block_act.py"
    meta = extracted_from(task.read_text())
    assert meta.module == "act" and meta.model_file == "mlp_block.py"


async def test_an_edited_task_file_is_replaced_only_when_the_person_says_so(model_dir):
    app = scripted_app(model_dir)
    started = []
    app.start_engine = lambda factory, status="starting": started.append(factory)
    task = model_dir / "mlp_block_act.py"
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None, timeout=60)
        await pilot.press("enter")
        await wait_for(pilot, lambda: started, timeout=60)
        fresh = task.read_text()
        edited = fresh.replace("def get_inputs():", "# my shapes\ndef get_inputs():")
        task.write_text(edited)
        # Extract + run again: the file differs from a fresh extraction; enter answers No.
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#no"), 60,
                       "the question")
        assert "mlp_block_act.py differs from a fresh extraction" in str(app.screen.query_one("#dialog-body Static")
                                                                         .render())
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is app.profile_screen and task.read_text() == edited and len(started) == 1
        assert "kept mlp_block_act.py" in str(app.screen.query_one("#module-detail").render())
        # Asked again, yes replaces it and starts the run.
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#yes"), 60,
                       "the question")
        await pilot.press("y")
        await wait_for(pilot, lambda: len(started) == 2, 10, "the run")
    assert task.read_text() == fresh


async def test_a_run_that_cannot_start_is_said_on_the_profile_screen(model_dir):
    """No backend flags, and no vLLM here: the profile screen stays and says what to pass."""
    config = load_config({"device": "cpu"})
    app = ProfileApp(load_model_file(model_dir / "mlp_block.py"), config, config.eval_settings("cpu"), forwards=2,
                     exit_on_start_error=True)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None, timeout=60)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.profile_screen.query_one("#module-detail").render().plain.startswith(
            "the run cannot start"), 120, "the start to fail")
        await pilot.pause()
        assert app.is_running and app.current_mode == "profile" and app.screen is app.profile_screen
        said = " ".join(" ".join(n.message.split()) for n in app._notifications)
        # No vLLM and no GPU here: whichever the backend finds missing first is said.
        assert ("vLLM is not installed" in said or "needs an NVIDIA GPU" in said), said
        assert "--backend" in said and "kevin-opt profile" in said
        assert not app.running and "enter" in offered_keys(app)  # another choice may follow
        await pilot.press("q")
    assert app.return_code == 0


def test_a_file_in_the_tasks_place_that_is_not_its_task_is_kept(model_dir):
    model_file = load_model_file(model_dir / "mlp_block.py")
    (model_dir / "mlp_block_act.py").write_text("# my own file\n")
    with pytest.raises(ModelError, match="is not the task extracted for `act`"):
        task_path_for(model_file, ["act"])
    assert (model_dir / "mlp_block_act.py").read_text() == "# my own file\n"


async def test_the_header_names_each_time_and_toasts_stay_off_the_table(model_dir):
    """The header's time per forward is the table's model row; the other one is said for what it
    is. A notification sits under the table, never over it."""
    from textual.widgets import DataTable
    from textual.widgets._toast import Toast

    # As the worker reports it: the profiled forward is the model row's time; the flushed one is apart.
    measured = example_profile().model_copy(update={"forward_ms": 118.0, "profiled_forward_ms": 60.0})
    config = load_config({"device": "cpu"})
    app = ProfileApp(load_model_file(model_dir / "mlp_block.py"), config, config.eval_settings("cpu"), forwards=2)
    app.profile_screen = ProfileScreen("mlp_block.py", lambda: measured, lambda m: None)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None)
        app.notify("a notice with two lines\nthe second line of it", markup=False)
        await wait_for(pilot, lambda: bool(app.screen.query(Toast)), 10, "the toast")
        await pilot.pause()
        lines = screen_lines(app)
        model_row = next(line.split() for line in lines if line.split()[:1] == ["(model)"])
        header = " ".join(" ".join(lines[:2]).split())
        assert f"{model_row[1]} ms per forward under the profiler (118 ms with caches flushed)" in header, header
        table = app.screen.query_one(DataTable)
        rows = table.region.y + 1 + table.row_count  # its header row and its rows
        toast = app.screen.query_one(Toast).region
        assert toast.y >= rows and toast.x == 0 and toast.width == 80


async def test_o_optimizes_the_plan_shown_on_the_profile_shown(model_dir):
    """`o` starts the optimize of the plan under the table, on the profile the screen shows (not
    profiled again), with the backend made first; the model screen takes over."""
    from kevin_agent.model.records import ModelProfile

    shown = example_profile()
    app = scripted_app(model_dir)
    app.profile_screen = ProfileScreen("mlp_block.py", lambda: shown, lambda m: None, app.optimize_all)
    started = []
    app.start_optimize = started.append  # made below, not driven
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None)
        await pilot.pause()
        text = "\n".join(screen_lines(app))
        assert "o optimizes 2 groups: act, norm" in text
        assert "o" in offered_keys(app)
        await pilot.press("o")
        await wait_for(pilot, lambda: started, 60, "the optimize to start")
    session = started[0]
    try:
        assert session.backend is not None  # made once, before anything was recorded
        assert ModelProfile.model_validate_json(session.store.profile_path.read_text()) == shown
        assert session.record.model_file == str(model_dir / "mlp_block.py") and session.record.groups == []
    finally:
        session.close()


async def test_o_without_a_backend_is_said_on_the_profile_screen(model_dir):
    config = load_config({"device": "cpu"})
    app = ProfileApp(load_model_file(model_dir / "mlp_block.py"), config, config.eval_settings("cpu"), forwards=2)
    app.profile_screen = ProfileScreen("mlp_block.py", example_profile, lambda m: None, app.optimize_all)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None)
        await pilot.press("o")
        await wait_for(pilot, lambda: app.profile_screen.query_one("#module-detail").render().plain.startswith(
            "the run cannot start"), 120, "the start to fail")
        assert app.screen is app.profile_screen and app.optimize is None
        said = " ".join(" ".join(n.message.split()) for n in app._notifications)
        assert ("vLLM is not installed" in said or "needs an NVIDIA GPU" in said), said
        assert "kevin-opt profile" in said
        assert not (model_dir / ".kevin").exists()  # nothing recorded
        await pilot.press("q")
    assert app.return_code == 0
