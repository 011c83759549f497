"""The TUI driven through Textual's Pilot.

Screens are tested against stored runs and against events posted to the app; the run
screen is then driven by real scripted runs on the CPU device (real compiles, cached for
the session), including stopping, cancelling, resuming and committing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, OptionList, Static, TabbedContent

from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.config import RunConfig
from kevin_agent.events import EvalOutput, TokenDelta
from kevin_agent.registry import build_registry
from kevin_agent.results import Status
from kevin_agent.run.launch import resume_run, start_run
from kevin_agent.store import RunStore, list_runs
from kevin_agent.tui import KevinApp
from kevin_agent.tui.messages import TuiSink, message_for
from kevin_agent.tui.screens.dialogs import ConfirmScreen, ErrorScreen, HelpScreen
from kevin_agent.tui.screens.history import HistoryScreen
from kevin_agent.tui.screens.run import RunScreen
from kevin_agent.tui.state import best_curve

from ..conftest import git_init
from ..tui_support import build_store, fixed_records, offered_keys, run_events, screen_lines, text_of, wait_for

TASK = '''"""y = x * 2 + 1"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
'''

GOOD = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>

torch::Tensor affine_cpu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        po[i] = px[i] * 2.0f + 1.0f;
    }
    return out;
}
"""

affine = load_inline(name="affine_tui", cpp_sources=source, functions=["affine_cpu"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine = affine

    def forward(self, x):
        return self.affine.affine_cpu(x)
'''
BAD = GOOD.replace("const int64_t n = xc.numel();", "").replace("affine_tui", "affine_tui_bad")
RESPONSES = [
    {"reasoning": "The op is an affine map. " * 40, "text": "A kernel would help here, but I am not sure how."},
    {"reasoning": "Write a loop in C++.", "text": "```python\n" + BAD + "```\nA plain C++ loop."},
    {"reasoning": "Fix the missing size.", "text": "```python\n" + GOOD + "```\nA C++ loop with a fused multiply-add."},
]


def make_project(root: Path, responses: list[dict] = RESPONSES) -> Path:
    repo = git_init(root)
    (repo / "affine.py").write_text(TASK)
    (repo / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses))
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my layer"], check=True)
    return repo


def config_for(repo: Path, **extra) -> RunConfig:
    settings = dict(backend="scripted", responses=repo / "responses.jsonl", device="cpu", turns=3,
                    timed_runs=5, warmup_runs=1, correctness_trials=2, min_speedup=0)
    return RunConfig(**{**settings, **extra})


# --- pieces ---------------------------------------------------------------------------------
def test_sink_coalesces_tokens_and_build_output_into_one_pending_message():
    class Target:
        def __init__(self):
            self.posted = []

        def post_message(self, message):
            self.posted.append(message)
            return True

    target = Target()
    sink = TuiSink(target)
    for i in range(500):
        sink.emit(TokenDelta(trajectory=0, turn=1, channel="reasoning", text=f"{i} "))
    sink.emit(TokenDelta(trajectory=0, turn=1, channel="text", text="answer"))
    assert len(target.posted) == 1
    chunks = sink.drain()
    assert chunks == [(0, 1, "reasoning", "".join(f"{i} " for i in range(500))), (0, 1, "text", "answer")]
    sink.emit(TokenDelta(trajectory=0, turn=2, channel="text", text="x"))
    assert len(target.posted) == 2 and sink.drain() == [(0, 2, "text", "x")]
    # A build's output comes as fast, and rides the same wake-up.
    for i in range(300):
        sink.emit(EvalOutput(trajectory=1, turn=2, text=f"line {i}\n"))
    sink.emit(TokenDelta(trajectory=0, turn=3, channel="text", text="y"))
    assert len(target.posted) == 3
    assert sink.drain() == [(1, 2, "eval", "".join(f"line {i}\n" for i in range(300))), (0, 3, "text", "y")]


def test_best_curve_is_the_running_maximum_over_turns():
    assert best_curve(fixed_records()) == [0.0, 1.25, 2.0]
    assert best_curve([]) == []


# --- screens on fixed data ------------------------------------------------------------------
async def test_run_screen_from_events_selects_finished_turns(tmp_path):
    app = KevinApp(runs_root=build_store(tmp_path / "runs"), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        app.switch_mode("run")
        await pilot.pause()
        events = run_events()
        for event in events[:-2]:  # trajectory 1's last turn is still generating
            app.post_message(message_for(event))
        app.sink.emit(TokenDelta(trajectory=1, turn=3, channel="reasoning", text="still thinking"))
        await pilot.pause(0.3)
        screen = app.screen
        assert isinstance(screen, RunScreen)
        header = text_of(app, "#run-header")
        assert "affine" in header and "cpu" in header and "Test CPU" in header and "2.00x" in header
        options = [str(o.prompt) for o in screen.query_one(OptionList).options]
        assert any("turn 3" in o and "2.00x" in o for o in options)
        assert any("compile error" in o for o in options)
        # Pick the compile error: its log and the error show, though the run is "live".
        screen.query_one(OptionList).focus()
        index = next(i for i, o in enumerate(options) if "compile error" in o)
        screen.query_one(OptionList).highlighted = index
        await pilot.pause()
        feedback = text_of(app, "#feedback-text")
        assert "compile log" in feedback and "'n' was not declared" in feedback
        assert screen.pinned == (1, 2)
        # Pick the best turn: timings against eager.
        await pilot.press("up", "up")  # past trajectory 1's first turn and the trajectory heading
        assert screen.pinned == (0, 3)
        feedback = text_of(app, "#feedback-text")
        assert "5/5 trials" in feedback and "2.00x" in feedback and "eager" in feedback
        assert "pragma omp simd" in text_of(app, "#code-text")
        # Back to the live turn: the streamed reasoning shows.
        await pilot.press("v")
        await pilot.pause(0.3)
        assert screen.pinned is None
        assert "still thinking" in str(screen.query_one("#reasoning", Static).render())
        for event in events[-2:]:
            app.post_message(message_for(event))
        await pilot.pause()
        assert "finished" in text_of(app, "#run-header")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = text_of(app, "#help-keys")
        for word in ("Stop the run", "Cancel the generation", "Commit the best", "History", "Quit"):
            assert word in keys
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)


async def test_history_lists_runs_turns_and_diffs(tmp_path):
    app = KevinApp(runs_root=build_store(tmp_path / "runs"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        table = screen.query_one("#runs", DataTable)
        assert table.row_count == 2
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(2)]
        assert rows[0][:3] == ["20250102-090000-affine-0002", "run", "interrupted"]
        assert rows[1] == ["20250101-120000-affine-0001", "run", "completed", "6/6", "2.00x unconfirmed", "affine"]
        await pilot.press("down")
        assert screen.run_id == "20250101-120000-affine-0001"
        turns = screen.query_one("#history-turns", OptionList)
        turns.focus()
        # trajectory 0: turn 1, 2, 3 -> the best turn is the third of trajectory 0.
        target = next(i for i, o in enumerate(turns.options) if o.id == "t0-3")
        turns.highlighted = target
        await pilot.pause()
        assert screen.turn is not None and (screen.turn.trajectory, screen.turn.turn) == (0, 3)
        await pilot.press("d")
        assert screen.query_one(TabbedContent).active == "tab-diff"
        diff = text_of(app, "#tab-diff-text")
        assert "--- trajectory 0 turn 2" in diff and "+++ trajectory 0 turn 3" in diff
        assert "+    #pragma omp simd" in diff and "-    for (int64_t i = 0; i < x.numel(); ++i)" in diff
        await pilot.press("k")
        assert "ModelNew" in text_of(app, "#tab-kernel-text")
        await pilot.press("p")
        assert "Replace the operators" in text_of(app, "#tab-prompt-text")
        await pilot.press("m")
        assert "Vectorised" in text_of(app, "#tab-summary-text")
        # A finished run does not resume.
        await pilot.press("r")
        assert not app.running
        await pilot.press("q")
    assert app.return_code == 0


async def test_engine_failures_are_handled_in_one_place(tmp_path):
    missing = tmp_path / "missing.py"
    config = RunConfig(backend="scripted", responses=tmp_path / "r.jsonl", device="cpu")
    app = KevinApp(lambda sink: start_run(config, missing, sink), runs_root=tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: not app.running, 60, "the start to fail")
        assert app.exit_code == 2
        assert "failed" in text_of(app, "#run-header")
        # Laid out for the toast: lines broken at spaces (and paths at a "/").
        messages = [" ".join(n.message.split()) for n in app._notifications]
        assert any("no such file" in m and "hint:" in m for m in messages), messages

    # As `kevin-opt FILE` opens it: a run that cannot start closes the app with the error's code.
    app = KevinApp(lambda sink: start_run(config, missing, sink), runs_root=tmp_path / "runs",
                   exit_on_start_error=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.start_error is not None, 60, "the start to fail")
    assert app.exit_code == 2 and "no such file" in app.start_error.message

    def broken(sink):
        raise RuntimeError("a bug")

    app = KevinApp(broken, runs_root=tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorScreen), 60, "the error screen")
        assert "RuntimeError: a bug" in text_of(app, "#traceback")
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)


async def test_cancel_is_offered_while_generating_and_the_cancelled_turn_is_marked(tmp_path):
    # Answers without code: no compile, only the task's probe runs in a worker.
    repo = make_project(tmp_path / "proj", [RESPONSES[0], RESPONSES[0]])
    config = config_for(repo, turns=1)
    registry = build_registry()
    registry.backends["scripted"] = lambda cfg, skip=0: ScriptedBackend(cfg.responses, skip=skip, chunk_delay_s=0.05)
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink, registry=registry),
                   runs_root=repo / ".kevin" / "runs", deliver_at_end=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "x" in offered_keys(app), 300, "cancel to be offered")
        assert app.engine is not None and app.engine.generating
        await pilot.press("x")
        await wait_for(pilot, lambda: app.outcome is not None, 120, "the run to end")
        await pilot.pause(1.2)
        assert "x" not in offered_keys(app)
        options = [str(o.prompt) for o in app.screen.query_one(OptionList).options]
        assert options == ["⊝ turn 1  cancelled", "? turn 1  parse error"]


async def test_the_footer_stops_offering_to_stop_once_the_run_has_ended(tmp_path):
    # An answer without code, streamed for a few seconds: nothing compiles, and nothing happens
    # after the run's end that would redraw the footer for another reason (no delivery, no question).
    repo = make_project(tmp_path / "proj", [RESPONSES[0]])
    config = config_for(repo, turns=1)
    registry = build_registry()
    registry.backends["scripted"] = lambda cfg, skip=0: ScriptedBackend(cfg.responses, skip=skip, chunk_delay_s=0.1)
    def start(sink):
        # Its workers take a moment to end after the run has said it finished, as a GPU's do.
        engine = start_run(config, repo / "affine.py", sink, registry=registry)
        close = engine.close
        engine.close = lambda: (time.sleep(1.5), close())
        return engine

    app = KevinApp(start, runs_root=repo / ".kevin" / "runs", deliver_at_end=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "Stop" in screen_lines(app)[-1], 300, "the run to be offered a stop")
        app.screen.query_one("#feedback").focus()  # reading the feedback: the focus stays put to the end
        await wait_for(pilot, lambda: app.outcome is not None, 300, "the run to end")
        await pilot.pause()
        footer = screen_lines(app)[-1]
        assert "Stop" not in footer and "Cancel" not in footer and "History" in footer, footer
        assert "Commit" not in footer  # there is no kernel to commit


# --- real scripted runs on the CPU device ----------------------------------------------------
@pytest.mark.slow
async def test_scripted_run_to_the_end_then_history_and_delivery(tmp_path):
    repo = make_project(tmp_path / "proj")
    config = config_for(repo)
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink), runs_root=repo / ".kevin" / "runs")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.outcome is not None, what="the run to finish")
        # The TUI asks before it commits, and says what it would commit.
        # Pushed is not yet composed: wait for the body too.
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#dialog-body Static"),
                       60, "the commit question")
        # Its rows as text: rendered before the dialog's first layout, they wrap at a few columns.
        assert "affine_kevin.py" in app.screen.query_one("#dialog-body Rows").plain
        await pilot.press("y")
        await wait_for(pilot, lambda: app.delivery is not None, 120, "the delivery")
        screen = app.run_screen
        assert [r.status for r in app.outcome.records] == [Status.PARSE_ERROR, Status.COMPILE_ERROR, Status.CORRECT]
        best = app.outcome.best
        assert best is not None and best.turn == 3
        header = text_of(app, "#run-header")
        # The header's best is the confirmed median; the turn's row keeps the turn's own number.
        assert best.confirmation is not None and best.speedup == best.confirmation.speedup_median
        assert "finished" in header and f"{best.speedup:.2f}x confirmed" in header and "turns 3/3" in header
        options = [str(o.prompt) for o in screen.query_one(OptionList).options]
        assert "parse error" in options[0] and "compile error" in options[1]
        assert f"{best.run_speedup:.2f}x" in options[2]
        # Select the compile error, then the parse error.
        await pilot.press("up")
        assert screen.pinned == (0, 2)
        assert "was not declared" in text_of(app, "#feedback-text")
        await pilot.press("up")
        assert "code block was found" in text_of(app, "#feedback-text")
        assert "The op is an affine map" in str(screen.query_one("#reasoning", Static).render())
        # The run was delivered and committed at the end; the footer no longer offers to stop it or
        # to commit it again, and `c` makes no second commit.
        assert app.delivery.committed and app.exit_code == 0
        await pilot.pause()
        footer = screen_lines(app)[-1]
        assert "Stop" not in footer and "Commit" not in footer and "History" in footer, footer
        await pilot.press("c")
        assert app.screen is screen
        count = subprocess.run(["git", "-C", repo, "rev-list", "--count", "HEAD"], capture_output=True, text=True)
        assert count.stdout.strip() == "2"
        log = subprocess.run(["git", "-C", repo, "log", "--format=%s", "-1"], capture_output=True, text=True).stdout
        assert "kevin-opt: affine" in log
        # History: the run is there, and the correct turn diffs against the compile error.
        await pilot.press("h")
        history = app.screen
        assert isinstance(history, HistoryScreen) and history.run_id == app.outcome.run_id
        turns = history.query_one("#history-turns", OptionList)
        turns.focus()
        turns.highlighted = 2
        await pilot.press("d")
        diff = text_of(app, "#tab-diff-text")
        assert "+    const int64_t n = xc.numel();" in diff and '-affine = load_inline(name="affine_tui_bad"' in diff
        await pilot.press("escape")  # from the turns up to the list of runs
        assert app.screen is history
        await pilot.press("escape")  # and back to the run
        assert app.screen is screen
        await pilot.press("q")  # the run is over: no question asked
    assert app.return_code == 0


@pytest.mark.slow
async def test_cancel_stop_quit_question_and_resume(tmp_path):
    # The cancelled generation uses up a response of the script, as it would use up a model's time.
    # It streams for half a minute, so that the keys below come while it does on a busy machine too.
    long = {**RESPONSES[0], "reasoning": "The op is an affine map. " * 600}
    repo = make_project(tmp_path / "proj", [long, *RESPONSES])
    config = config_for(repo)
    registry = build_registry()
    # Stream slowly, so that there is a generation to cancel.
    registry.backends["scripted"] = lambda cfg, skip=0: ScriptedBackend(cfg.responses, skip=skip, chunk_delay_s=0.05)
    runs = repo / ".kevin" / "runs"
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink, registry=registry), runs_root=runs,
                   resume_factory=lambda run_id, sink: resume_run(run_id, sink, runs_root=runs, registry=registry),
                   deliver_at_end=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: 0 in app.run_screen.state.live, 300, "the first turn")
        await wait_for(pilot, lambda: app.run_screen.state.live[0].reasoning_chars > 0, 60, "streamed tokens")
        # q while running asks first; "n" keeps the run going.
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert isinstance(app.screen, RunScreen) and app.running
        assert {"s", "x"} <= offered_keys(app)  # a run is going, and generating
        await pilot.press("s", "x")
        await wait_for(pilot, lambda: app.outcome is not None, what="the run to stop")
        await pilot.pause()
        assert "s" not in offered_keys(app)  # nothing to stop any more
        assert app.outcome.reason == "stopped"
        # The cancelled turn is kept for review but is no finished turn: resume generates it again.
        assert app.outcome.records == []
        (cancelled,) = RunStore.open(runs, app.outcome.run_id).all_records()
        assert cancelled.status is Status.CANCELLED and "not shown to the model" in cancelled.feedback
        assert "stopped" in text_of(app, "#run-header")
        stopped_id = app.outcome.run_id
        # Resume it from the history screen; it runs to the end in the same window.
        await pilot.press("h")
        history = app.screen
        assert isinstance(history, HistoryScreen) and history.run_id == stopped_id
        await pilot.press("r")
        await wait_for(pilot, lambda: app.outcome is not None and app.outcome.reason == "completed",
                       what="the resumed run")
        assert isinstance(app.screen, RunScreen)
        assert [r.turn for r in app.outcome.records] == [1, 2, 3]
        assert app.outcome.run_id == stopped_id
        # The cancelled generation is listed before the turn that replaced it.
        options = [str(o.prompt) for o in app.screen.query_one(OptionList).options]
        assert len(options) == 4 and options[0] == "⊝ turn 1  cancelled" and "compile error" in options[2]
        # Commit now: the confirmation shows what would be committed; "n" commits nothing.
        await pilot.press("c")
        # Pushed is not yet composed: wait for the body too.
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#dialog-body Static"),
                       60, "the commit question")
        body = app.screen.query_one("#dialog-body Rows").plain
        assert "affine_kevin.py" in body and "trajectory 0 turn 3" in body and "Kevin-Run: " + stopped_id in body
        await pilot.press("y")
        await wait_for(pilot, lambda: app.delivery is not None, 120, "the commit")
        assert app.delivery.committed
    info, records = next((i, r) for i, r in list_runs(runs) if i.run_id == stopped_id)
    assert info.status == "completed" and info.commit == app.delivery.commit and len(records) == 3


@pytest.mark.slow
async def test_quit_while_running_stops_the_run_first(tmp_path):
    repo = make_project(tmp_path / "proj")
    config = config_for(repo)
    registry = build_registry()
    registry.backends["scripted"] = lambda cfg, skip=0: ScriptedBackend(cfg.responses, skip=skip, chunk_delay_s=0.05)
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink, registry=registry),
                   runs_root=repo / ".kevin" / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: 0 in app.run_screen.state.live, 300, "the first turn")
        await pilot.press("q")
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.running, 120, "the run to stop")
    assert app.exit_code == 130
    assert app.outcome is not None and app.outcome.reason == "stopped"


# --- the real terminal ----------------------------------------------------------------------
def capture(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)")
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_cli_in_tmux_shows_turns_feedback_and_speedups(tmp_path, size):
    """`kevin-opt FILE` on a real terminal opens the TUI; the screen shows the run at both sizes."""
    repo = make_project(tmp_path / "proj")
    session = f"kevin-tui-{size[0]}x{size[1]}-{os.getpid()}"
    status = tmp_path / "exit-status"
    env = {k: v for k, v in os.environ.items() if k != "CI" and (not k.startswith("KEVIN_") or k == "KEVIN_CACHE_DIR")}
    command = (
        f"{shlex.quote(sys.executable)} -m kevin_agent.cli run affine.py --device cpu --backend scripted "
        f"--responses responses.jsonl --turns 3 --timed-runs 5 --min-speedup 0; echo $? > {shlex.quote(str(status))}"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]),
                    "-c", str(repo), command], check=True, env={**env, "TERM": "xterm-256color"})
    try:
        deadline = time.monotonic() + 900
        screen = ""
        while time.monotonic() < deadline:
            screen = capture(session)
            if "commit the best kernel?" in screen:
                subprocess.run(["tmux", "send-keys", "-t", session, "y"], check=True)
            status_line = (screen.splitlines() or [""])[1:2]
            if status_line and re.match(r"\s*(finished · (committed|written|nothing)|failed|stopped)", status_line[0]):
                break
            time.sleep(1)
        else:
            raise AssertionError(f"the run did not finish on screen:\n{screen}")
        assert re.search(r"finished · committed [0-9a-f]{10}", screen), screen
        for _ in range(40):  # let the delivery notification fade so nothing covers the panes
            time.sleep(0.5)
            screen = capture(session)
            if "wrote " not in screen:
                break
        lines = screen.splitlines()
        assert len(lines) == size[1] and max(len(x) for x in lines) <= size[0]
        assert "affine" in lines[0] and "cpu" in lines[0]
        assert "parse error" in screen and "compile error" in screen
        assert re.search(r"✓ turn 3\s+\d+\.\d\dx", screen), screen
        assert re.search(r"best \d+\.\d\dx", screen) and "feedback" in screen
        assert "speedup:" in screen and "vs eager" in screen
        assert "q Quit" in screen and "? Keys" in screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        for _ in range(60):
            if status.exists() and status.read_text().strip():
                break
            time.sleep(0.5)
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


async def test_b_branches_a_selected_turn_into_a_new_trajectory(tmp_path):
    """`b` on a finished turn of a running run continues it in a new chain, recorded with its parent."""
    repo = make_project(tmp_path / "proj", [{"reasoning": f"thought {i} " * 60, "text": f"answer {i} has no code"}
                                           for i in range(6)])
    config = config_for(repo)
    registry = build_registry()
    registry.backends["scripted"] = lambda cfg, skip=0: ScriptedBackend(cfg.responses, skip=skip, chunk_delay_s=0.02)
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink, registry=registry),
                   runs_root=repo / ".kevin" / "runs", deliver_at_end=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: (0, 1) in app.run_screen.state.records, 300, "turn 1")
        assert "b" not in offered_keys(app), "nothing selected yet"
        turns = app.screen.query_one(OptionList)
        turns.focus()
        turns.highlighted = next(i for i, o in enumerate(turns.options) if o.id == "t0-1")
        await pilot.pause()
        assert "b" in offered_keys(app)
        await pilot.press("b")
        await wait_for(pilot, lambda: app.outcome is not None, 300, "the run to end")
    keys = sorted((r.trajectory, r.turn, r.parent_trajectory, r.parent_turn) for r in app.outcome.records)
    branch = [k for k in keys if k[0] == 1]
    assert branch and branch[0][2:] == (0, 1), keys
    assert all(k[2:] == (None, None) for k in branch[1:])


class Quiet:
    def emit(self, event) -> None:
        pass


def stopped_run(repo: Path, config: RunConfig) -> str:
    """A run of one turn, stopped after it (resumable), driven headless."""
    engine = start_run(config.model_copy(update={"turns": 1}), repo / "affine.py", Quiet())
    engine.request_stop()
    try:
        outcome = engine.run()
    finally:
        engine.close()
        engine.store.release()
    assert outcome.reason == "stopped"
    return outcome.run_id


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_run_resumed_from_the_history_after_a_burst_of_keys_shows_and_asks_on_top(tmp_path):
    """Arrows held in the history, `r`, more arrows: the run screen shows at once and says what
    it does, the run goes on on screen, and the question at its end is the dialog on top, the one
    a `y` answers."""
    from textual import events

    from .test_tui_screens import ten_runs

    repo = make_project(tmp_path / "proj", [RESPONSES[0], RESPONSES[2]])
    config = config_for(repo, turns=2)
    runs = ten_runs(repo / ".kevin" / "runs")
    run_id = stopped_run(repo, config)
    app = KevinApp(runs_root=runs, resume_factory=lambda rid, sink: resume_run(rid, sink, runs_root=runs,
                                                                               overrides={"turns": 2}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        history = app.screen
        table = history.query_one(DataTable)
        assert table.coordinate_to_cell_key((0, 0)).row_key.value == run_id  # the newest
        for key in ["down"] * 5 + ["up"] * 5:
            app._driver.send_message(events.Key(key, None))
        await wait_for(pilot, lambda: history.run_id == run_id and table.cursor_row == 0, 10, "the stopped run")
        await pilot.press("r")
        assert isinstance(app.screen, RunScreen)
        assert f"resuming {run_id}: loading the task" in text_of(app, "#run-header")
        for key in ["down", "up", "down"]:
            app._driver.send_message(events.Key(key, None))
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#yes"), 300,
                       "the question at the end")
        assert app.screen_stack[-2] is app.run_screen  # on top of the run it is about
        await pilot.pause()
        lines = screen_lines(app)
        assert "turns 2/2" in lines[0]  # the run screen under it kept up with the run
        assert any("commit the best kernel?" in line for line in lines), lines
        await pilot.press("y")
        await wait_for(pilot, lambda: app.delivery is not None, 120, "the delivery")
        assert app.delivery.committed
        await pilot.press("q")
    assert app.return_code == 0
