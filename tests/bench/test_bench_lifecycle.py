"""A bench stopped by a signal loses nothing finished, and `resume BENCH` skips the finished tasks
and continues the interrupted one from its last finished turn: real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..clihelp import kevin
from ..conftest import EXAMPLES, git_init
from ..run.test_lifecycle import SLOW_CXX

SETTINGS = ("--device", "cpu", "--backend", "scripted", "--responses", "responses", "--turns", "2", "--headless",
            "--timed-runs", "5", "--correctness-trials", "2", "--confirm-rounds", "5", "--confirm-top", "1")


def project(tmp_path: Path) -> tuple[Path, dict]:
    """Task a answers without code twice (no build); task b answers without code, then with the
    examples' first verified rmsnorm kernel, whose build a compiler that never ends holds up."""
    repo = git_init(tmp_path / "proj")
    (repo / "tasks").mkdir()
    (repo / "responses").mkdir()
    for name in ("a_softmax", "b_rmsnorm"):
        source = "softmax.py" if name.startswith("a") else "rmsnorm.py"
        (repo / "tasks" / f"{name}.py").write_text((EXAMPLES / source).read_text())
    words = [json.dumps({"text": f"[hand-written test response] no code yet ({i})"}) for i in range(2)]
    (repo / "responses" / "a_softmax.jsonl").write_text("\n".join(words) + "\n")
    kernel = (EXAMPLES / "rmsnorm.cpu.jsonl").read_text().splitlines()[3]
    (repo / "responses" / "b_rmsnorm.jsonl").write_text(words[0] + "\n" + kernel + "\n")
    cxx = tmp_path / "slow-cxx"
    cxx.write_text(SLOW_CXX)
    cxx.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_") or k == "KEVIN_CACHE_DIR"}
    env.update(CI="true", PYTHONUNBUFFERED="1", KEVIN_LOAD_TIMEOUT_S="600")
    slow = dict(env, CXX=str(cxx), SLOW_CXX_PIDS=str(tmp_path / "pids"), KEVIN_CACHE_DIR=str(tmp_path / "cache"))
    return repo, {"env": env, "slow": slow, "pids": tmp_path / "pids"}


def interrupted_bench(tmp_path, signum):
    repo, envs = project(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", "bench", "tasks", *SETTINGS], cwd=repo,
                            env=envs["slow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not (envs["pids"].exists() and envs["pids"].read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1]
        time.sleep(0.2)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    (bench_dir,) = (repo / ".kevin" / "benches").iterdir()
    return repo, envs, bench_dir, out, err


def results(bench_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (bench_dir / "tasks.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sigterm_keeps_the_finished_task_and_marks_the_bench_interrupted(tmp_path):
    repo, _, bench_dir, out, err = interrupted_bench(tmp_path, signal.SIGTERM)
    assert "Traceback" not in err
    assert [r["task_id"] for r in results(bench_dir)] == ["tasks/a_softmax"]
    assert json.loads((bench_dir / "bench.json").read_text())["status"] == "interrupted"
    assert not (bench_dir / "lock").exists()
    assert f"kevin-opt resume {bench_dir.name}" in err and "| tasks/a_softmax | incorrect |" in out
    table = json.loads((bench_dir / "table.json").read_text())
    assert table["pending"] == ["tasks/b_rmsnorm"] and table["tasks_done"] == 1


@pytest.mark.slow
def test_resume_skips_finished_tasks_and_continues_the_interrupted_one(tmp_path):
    repo, envs, bench_dir, _, err = interrupted_bench(tmp_path, signal.SIGINT)
    (run_dir,) = [p for p in (bench_dir / "runs").iterdir() if "rmsnorm" in p.name]
    kept = (run_dir / "turns.jsonl").read_text().splitlines()
    assert len(kept) == 1  # turn 1 finished; turn 2's build was cut short and is not recorded
    again = kevin("resume", bench_dir.name, "--headless", cwd=repo, env=envs["env"], timeout=900)
    assert again.returncode == 0, again.stderr
    assert "2 tasks, 1 done before" in again.stderr and "[tasks/a_softmax] started" not in again.stderr
    assert "resuming after 1 turns" in again.stderr
    done = results(bench_dir)
    assert [r["task_id"] for r in done] == ["tasks/a_softmax", "tasks/b_rmsnorm"]
    assert done[1]["run_id"] == run_dir.name and done[1]["correct"] and done[1]["first_correct_turn"] == 2
    assert (run_dir / "turns.jsonl").read_text().splitlines()[0] == kept[0]
    assert json.loads((bench_dir / "bench.json").read_text())["status"] == "completed"
