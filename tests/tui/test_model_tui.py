"""The profile screen at 80x24: the ranked table, the module under the cursor in detail, and a
choice that extracts the module and starts a run on it."""

from __future__ import annotations

import shutil

import pytest

from kevin_agent.config import load_config
from kevin_agent.model.marks import extracted_from
from kevin_agent.model.modelfile import ModelError, load_model_file
from kevin_agent.model.ranking import rank
from kevin_agent.tui.profile import ProfileApp, task_path_for
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
        assert "act: TanhGELU, 1 call(s) per forward" in text and "signatures: float32[4096,512] x1" in text
        assert "enter" in offered_keys(app)
        await pilot.press("down")
        assert "norm: RMSNorm" in "\n".join(screen_lines(app))
        await pilot.press("enter")
        await wait_for(pilot, lambda: chosen)
    assert [m.path for m in chosen] == ["norm"]


async def test_a_choice_extracts_the_module_and_starts_its_run(model_dir):
    config = load_config({"device": "cpu", "backend": "scripted", "responses": EXAMPLES / "mlp_block_act.cpu.jsonl"})
    app = ProfileApp(load_model_file(model_dir / "mlp_block.py"), config, config.eval_settings("cpu"), forwards=2)
    started = []
    app.start_engine = started.append  # the real profile and extraction; the run is only recorded
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.profile_screen.profile is not None, timeout=60)
        assert app.profile_screen.selected().path == "act"  # the cursor starts on the top-ranked module
        await pilot.press("enter")
        await wait_for(pilot, lambda: started, timeout=60)
        assert app.current_mode == "run" and callable(started[0])
    task = model_dir / "mlp_block_act.py"
    meta = extracted_from(task.read_text())
    assert meta.module == "act" and meta.model_file == "mlp_block.py"


def test_a_file_in_the_tasks_place_that_is_not_its_task_is_kept(model_dir):
    model_file = load_model_file(model_dir / "mlp_block.py")
    (model_dir / "mlp_block_act.py").write_text("# my own file\n")
    with pytest.raises(ModelError, match="is not the task extracted for `act`"):
        task_path_for(model_file, ["act"])
    assert (model_dir / "mlp_block_act.py").read_text() == "# my own file\n"
