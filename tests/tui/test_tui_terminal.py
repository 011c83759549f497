"""The TUI on a real terminal (a pty), in a real process: quitting mid-run, and the terminal
going away under it."""

from __future__ import annotations

import json
import signal
import textwrap
import time
from pathlib import Path

import pytest

from ..run.test_lifecycle import SLOW_CXX, Project, Terminal
from .test_tui import GOOD

# A compiler that never finishes and talks all the while, as a long build does: the TUI keeps
# drawing its output into the feedback pane.
CHATTY_CXX = SLOW_CXX.replace(
    "exec sleep 600",
    "while true; do echo 'warning: still compiling kernel.cpp, one line of build output after another'; "
    "sleep 0.05; done",
)

SLOW_SCRIPT_PLUGIN = textwrap.dedent('''
    """The scripted backend at a readable pace: a generation takes seconds, as a model's does."""
    from kevin_agent.registry.hookspecs import hookimpl


    @hookimpl
    def register_backends(register):
        from kevin_agent.backends.scripted import ScriptedBackend

        register("slow-scripted",
                 lambda config, skip=0: ScriptedBackend(config.responses, skip=skip, chunk_delay_s=0.05))
''')


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    yield project
    project.kill_leftovers()


def run_json(project: Project) -> dict:
    (path,) = project.runs()
    return json.loads(path.read_text())


def records(project: Project) -> list[dict]:
    (path,) = project.runs()
    text = (path.parent / "turns.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("dialog", [False, True], ids=["running", "quit-dialog-open"])
def test_a_closed_terminal_ends_the_tui_within_seconds(project, dialog):
    """Closing the terminal (its window, its tmux session) under a TUI run ends the process:
    the run is recorded as interrupted and nothing of it keeps running, whatever was on screen."""
    chatty = project.tmp.parent / "chatty-cxx"
    chatty.write_text(CHATTY_CXX)
    chatty.chmod(0o755)
    env = {**project.env, "CXX": str(chatty)}
    term = Terminal(project, "run", "affine.py", "--device", "cpu", "--backend", "scripted", "--responses",
                    "responses.jsonl", "--turns", "1", size=(80, 24), controlling=True, env=env)
    project.wait_for_compiler()
    time.sleep(1.5)  # the build's output is streaming into the feedback pane
    if dialog:
        term.send("q")  # "quit?" is open when the terminal goes
        time.sleep(1.0)
    term.hang_up()
    try:
        code = term.wait(timeout=120)  # the build it cut short would never have ended
    except Exception:
        term.proc.kill()
        raise AssertionError("the TUI outlived its terminal by 120 s") from None
    assert code == 128 + signal.SIGHUP
    assert run_json(project)["status"] == "interrupted"
    assert records(project) == []  # the build cut short is not recorded as the kernel's failure
    assert project.settled() == [], "a worker or compiler outlived the run"


@pytest.mark.slow
def test_quit_mid_run_starts_nothing_after_yes(project, build_cache):
    """q, then y, while a turn generates: the generation is cancelled, no turn starts after it and
    nothing is confirmed; the run is saved to be resumed, and the process exits 130."""
    plugins = project.tmp.parent / "plugins"
    plugins.mkdir()
    (plugins / "slow_script.py").write_text(SLOW_SCRIPT_PLUGIN)
    slow = {"reasoning": "Think about the loop once more. " * 300, "text": "No code this time."}
    lines = [{"text": "```python\n" + GOOD + "```\nA C++ loop."}, slow, slow, slow]
    (project.root / "responses.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    # The real compiler and the session's build cache: the kernel is the one the TUI tests build.
    env = {k: v for k, v in project.env.items() if k not in ("CXX", "KEVIN_CACHE_DIR")}
    env.update(KEVIN_PLUGINS_DIR=str(plugins), KEVIN_CACHE_DIR=str(build_cache))
    term = Terminal(project, "run", "affine.py", "--device", "cpu", "--backend", "slow-scripted", "--responses",
                    "responses.jsonl", "--turns", "4", "--timed-runs", "5", "--min-speedup", "0",
                    size=(80, 24), env=env)
    try:
        wait_until(lambda: project.runs() and len(records(project)) == 1, 600, "the first turn")
        assert records(project)[0]["status"] == "correct"
        time.sleep(2)  # turn 2 is generating, at 24 characters every 0.05 s
        term.send("q")
        time.sleep(1.5)  # the question is on screen
        term.send("y")
        code = term.wait(timeout=300)
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == 130, term.output
    done = records(project)
    assert [(r["turn"], r["status"]) for r in done] == [(1, "correct"), (2, "cancelled")]
    # Quitting cut the generation in flight short: it did not wait for the rest of it.
    assert len(done[1]["reasoning"]) < len(slow["reasoning"]), "quitting waited for the generation in flight"
    info = run_json(project)
    assert info["status"] == "stopped"
    assert info.get("confirmation") is None, "a confirmation ran after the person quit"
    assert "Continue with: kevin-opt resume " + info["run_id"] in term.output
    assert project.settled() == []
    assert not any(Path(project.root).glob("affine_kevin*"))  # quitting delivers nothing
