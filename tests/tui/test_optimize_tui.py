"""The model screen of ``kevin-opt optimize`` at 80x24: a recorded optimize replayed through the
progress interface (each group's state, the whole model so far, a group's live run and a stored
one, the question before the one commit, quitting and signals), then one real optimize of the
example stack on the CPU with the scripted backend, committed from the screen."""

from __future__ import annotations

import signal
import subprocess

import pytest

from kevin_agent.config import load_config
from kevin_agent.errors import ExitCode
from kevin_agent.tui.optimize import GroupRunScreen, OptimizeApp, close_optimize
from kevin_agent.tui.screens.dialogs import ConfirmScreen

from ..conftest import EXAMPLES
from ..tui_support import offered_keys, screen_lines, wait_for
from .optimize_replay import STORED_RUN, ReplaySession


def text_of(app) -> str:
    return "\n".join(screen_lines(app))


async def test_the_groups_states_a_live_run_and_a_stored_one(tmp_path):
    session = ReplaySession(tmp_path, hold=True)
    app = OptimizeApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "running turn 3/4" in text_of(app), 30, "the second group's run")
        lines = screen_lines(app)
        assert all(len(line.rstrip()) <= 80 for line in lines)
        text = "\n".join(lines)
        assert "layers.*.act x3" in text and "verified 2.00x" in text and "38.4%" in text
        assert "skipped: cannot be captured" in text
        # Amdahl from the one kernel verified so far: 1 / (1 - 0.384 + 0.384 / 2)
        assert "whole model 1.24x predicted so far" in text
        assert "enter" in offered_keys(app)
        await pilot.press("enter")  # the first group: its run, as it ran live
        await wait_for(pilot, lambda: isinstance(app.screen, GroupRunScreen), 10, "its run screen")
        assert app.screen is app.group_screens["layers.*.act x3"]
        assert app.screen.state.best is not None and app.screen.state.best.speedup == 2.0
        assert "escape" in offered_keys(app)
        await pilot.press("escape")
        assert app.screen is app.model_screen
        await pilot.press("down", "enter")  # the second: the stored run, 2 of its 4 turns
        await wait_for(pilot, lambda: isinstance(app.screen, GroupRunScreen), 10, "the stored run")
        assert app.screen.state.started.run_id == STORED_RUN and len(app.screen.state.records) == 2
        assert app.screen.state.finished.reason == "interrupted"
        await pilot.press("m")
        await pilot.press("down", "enter")  # the skipped one has no run
        assert app.screen is app.model_screen
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10, "the quit question")
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.is_running, 30, "the app to end")
    assert session.aborted and session.record.status == "interrupted"
    assert app.return_code == ExitCode.INTERRUPTED or app.exit_code == ExitCode.INTERRUPTED
    assert close_optimize(app) == ExitCode.INTERRUPTED


@pytest.mark.parametrize("yes", [True, False], ids=["commit", "declined"])
async def test_the_one_commit_is_asked_for(tmp_path, yes):
    session = ReplaySession(tmp_path)
    app = OptimizeApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30, "the question")
        await pilot.pause()
        text = text_of(app)
        assert "commit the 1 kernel into the model?" in text and "1.31x measured" in text
        assert "layer_stack_layers_act_kevin.py" in text
        await pilot.press("y" if yes else "n")
        await wait_for(pilot, lambda: not app.optimizing, 30, "the end")
        await pilot.pause()
        text = text_of(app)
        assert "whole model 1.31x measured (Amdahl predicts 1.43x)" in text
        assert "dropped: the whole model is slower" in text
        if yes:
            assert "committed 3d405aa17a00 on main" in text
        else:
            assert "declined" in text
        assert app.is_running  # the screen stays until q
        await pilot.press("q")
    assert bool(session.asked) is yes
    assert close_optimize(app) == (ExitCode.OK if yes else ExitCode.NONE)


async def test_no_commit_asks_to_write(tmp_path):
    session = ReplaySession(tmp_path, commit=False)
    app = OptimizeApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30, "the question")
        await pilot.pause()
        text = text_of(app)
        assert "write the 1 kernel into the model?" in text and "not committed (--no-commit)" in text
        await pilot.press("n")
        await wait_for(pilot, lambda: not app.optimizing, 30, "the end")
        await pilot.press("q")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_ends_it_resumably_with_the_headless_code(tmp_path, signum):
    session = ReplaySession(tmp_path, hold=True)
    app = OptimizeApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "running turn 3/4" in text_of(app), 30, "the second group's run")
        app.interrupt(signum)
        await wait_for(pilot, lambda: not app.is_running, 30, "the app to end")
    assert session.aborted and session.record.status == "interrupted"
    assert close_optimize(app) == 128 + signum and session.record.exit_code == 128 + signum


# --- one real optimize ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timing
async def test_a_real_optimize_of_the_example_committed_from_the_screen(tmp_path):
    from kevin_agent.optimize import OptimizeSession

    from ..optimize.test_optimize import FILES, head_files, project

    repo = project(tmp_path / "proj")
    # accept_slower: the question does not rest on a busy machine's whole-model timing (as test_optimize's)
    config = load_config({"device": "cpu", "backend": "scripted", "responses": repo / "responses", "turns": 3,
                          "trajectories": 1, "accept_slower": True})
    session = OptimizeSession.new(repo / "layer_stack.py", config, modules=4, min_saving=0.02)
    app = OptimizeApp(session)
    seen_running = []
    async with app.run_test(size=(80, 24)) as pilot:
        def asked() -> bool:
            if "running turn" in text_of(app) and not seen_running:
                seen_running.append(text_of(app))
            return isinstance(app.screen, ConfirmScreen)

        await wait_for(pilot, lambda: app.group_screens, 600, "the first group's run")
        await pilot.press("enter")  # the first group is the highlighted row: its live run
        await wait_for(pilot, lambda: isinstance(app.screen, GroupRunScreen), 10, "its run screen")
        await pilot.press("escape")
        await wait_for(pilot, asked, 900, "the question before the commit")
        await pilot.pause()  # the question's screen drawn: on a loaded machine a frame can come later
        assert "commit the 2 kernels into the model?" in text_of(app), [(g.name, g.state, g.why) for g in
                                                                         session.record.groups]
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.optimizing, 300, "the delivery")
        await pilot.pause()
        text = text_of(app)
        assert "kept" in text and "measured (Amdahl predicts" in text and "committed" in text
        await pilot.press("q")
    assert seen_running and "layers.*.act x3" in seen_running[0]
    record = session.record
    assert record.status == "delivered" and close_optimize(app) == 0
    assert [g.state for g in record.groups] == ["kept", "kept"]
    assert head_files(repo) == FILES
    log = subprocess.run(["git", "-C", repo, "log", "--format=%s"], capture_output=True, text=True).stdout
    assert log.count("kevin-opt:") == 1
    assert EXAMPLES.exists()
