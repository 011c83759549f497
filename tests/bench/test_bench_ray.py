"""The same bench on this machine and on a local Ray cluster of two nodes, for real: the same
per-task correctness and the same table (speedups within the noise of a shared machine), and a
node stopped mid-bench costs only its task in flight, which runs again on the other node; every
task is reported once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ..clihelp import kevin
from .benchfixtures import ENV, EXPECTED, FAST, only_bench, six_tasks, table_of

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

NODE = dict(num_cpus=1, object_store_memory=100 * 2**20)


@pytest.fixture
def cluster():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 100 * 2**20,
                                                            "include_dashboard": False})
    nodes = [cluster.add_node(**NODE) for _ in range(2)]
    yield cluster, nodes
    cluster.shutdown()


def rows(table: dict) -> dict:
    return {r["task_id"]: r for r in table["rows"]}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_local_and_ray_give_the_same_table_and_a_lost_node_costs_only_its_tasks(tmp_path, cluster):
    cluster, nodes = cluster
    local_repo = six_tasks(tmp_path / "local")
    local = kevin("bench", "tasks", *FAST, cwd=local_repo, env=ENV, timeout=1800)
    assert local.returncode == 0, local.stderr
    local_table = table_of(local_repo, only_bench(local_repo))
    assert {k: r["correct"] for k, r in rows(local_table).items()} == EXPECTED
    assert "no class named 'Model'" in rows(local_table)["tasks/broken"]["error"]

    repo = six_tasks(tmp_path / "ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_") or k == "KEVIN_CACHE_DIR"}
    env.update(CI="true", PYTHONUNBUFFERED="1", **ENV)
    proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", "bench", "tasks", *FAST, "--ray",
                             cluster.address], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        results = repo / ".kevin" / "benches"
        deadline = time.monotonic() + 1200
        # Once two tasks have come back (the head's own failed row and one node's), both nodes hold one.
        while time.monotonic() < deadline and proc.poll() is None:
            done = list(results.glob("*/tasks.jsonl"))
            if done and len(done[0].read_text().splitlines()) >= 2:
                break
            time.sleep(0.5)
        stopped = proc.poll() is None
        if stopped:
            cluster.remove_node(nodes[1])
        out, err = proc.communicate(timeout=1500)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert stopped, "the bench ended before a node could be stopped"
    bench_id = only_bench(repo)
    lines = [json.loads(line) for line in (results / bench_id / "tasks.jsonl").read_text().splitlines()]
    assert sorted(line["task_id"] for line in lines) == sorted(EXPECTED), "every task reported once"
    table = table_of(repo, bench_id)
    assert table["status"] == "completed" and table["pending"] == [] and table["where"].startswith("ray ")
    assert {k: r["correct"] for k, r in rows(table).items()} == EXPECTED
    ours, theirs = table["overall"], local_table["overall"]
    for key in ("tasks", "k", "correct_tasks", "correct_best_at_k", "correct_avg_at_k"):
        assert ours[key] == theirs[key], key
    assert ours["eager"]["fast_p"]["0"] == theirs["eager"]["fast_p"]["0"] == 0.5
    for task_id, row in rows(table).items():
        there = rows(local_table)[task_id]
        assert (row["status"], row["first_correct_turn"]) == (there["status"], there["first_correct_turn"])
        if row["correct"]:
            # One shared 2-core machine timing both: within a factor of 5 is within its noise.
            assert 0.2 < row["speedup"] / there["speedup"] < 5, task_id
            assert (results / bench_id / row["kernel"]).is_file()
    # Each task's run came back to the head: `show` finds it there, and `show BENCH` prints the table.
    run_id = rows(table)["tasks/softmax"]["run_id"]
    shown = kevin("show", run_id, cwd=repo)
    assert shown.returncode == 0 and f"run {run_id}" in shown.stdout, shown.stderr
    shown = kevin("show", bench_id, cwd=repo)
    assert shown.returncode == 0 and "| tasks/softmax | correct |" in shown.stdout
    history = json.loads(kevin("history", "--json", cwd=repo).stdout)
    assert [b["bench_id"] for b in history["benches"]] == [bench_id]
    assert history["benches"][0]["tasks_done"] == 6 and history["benches"][0]["correct"] == 3


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_interrupted_ray_bench_keeps_its_tasks_finished_turns_for_resume(tmp_path, monkeypatch):
    """SIGTERM to the head while a node's build hangs: the task's run (its first turn finished)
    comes back to the head, and `resume BENCH --ray` ships it to another node, which continues it."""
    from .test_bench_lifecycle import SETTINGS, project

    repo, envs = project(tmp_path)
    # The first node's builds go to a compiler that never ends (a node's environment is its tasks').
    for key in ("CXX", "SLOW_CXX_PIDS", "KEVIN_CACHE_DIR"):
        monkeypatch.setenv(key, envs["slow"][key])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 100 * 2**20,
                                                            "include_dashboard": False})
    try:
        slow = cluster.add_node(**NODE)
        proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", "bench", "tasks", *SETTINGS, "--ray",
                                 cluster.address], cwd=repo, env=envs["env"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 600
            while not (envs["pids"].exists() and envs["pids"].read_text().strip()):
                assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1]
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "stopping 1 tasks in flight" in err and "Traceback" not in err
        (bench_dir,) = (repo / ".kevin" / "benches").iterdir()
        assert [json.loads(x)["task_id"] for x in (bench_dir / "tasks.jsonl").read_text().splitlines()] == [
            "tasks/a_softmax"]
        assert json.loads((bench_dir / "bench.json").read_text())["status"] == "interrupted"
        (run_dir,) = [p for p in (bench_dir / "runs").iterdir() if "rmsnorm" in p.name]
        kept = (run_dir / "turns.jsonl").read_text().splitlines()
        assert len(kept) == 1  # turn 1 came back; turn 2's build was cut short and is not recorded
        run = json.loads((run_dir / "run.json").read_text())
        assert run["status"] == "interrupted" and run["task"]["path"] == str(repo / "tasks" / "b_rmsnorm.py")

        # The slow node goes; a node with the real compiler takes the task and its run.
        cluster.remove_node(slow)
        for key in ("CXX", "SLOW_CXX_PIDS", "KEVIN_CACHE_DIR"):
            monkeypatch.delenv(key)
        cluster.add_node(**NODE)
        again = kevin("resume", bench_dir.name, "--headless", "--ray", cluster.address, cwd=repo, env=envs["env"],
                      timeout=900)
    finally:
        cluster.shutdown()
    assert again.returncode == 0, again.stderr
    assert "2 tasks, 1 done before" in again.stderr and "[tasks/a_softmax] started" not in again.stderr
    rows = [json.loads(x) for x in (bench_dir / "tasks.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["tasks/a_softmax", "tasks/b_rmsnorm"]
    # The same run went on from its kept turn: a run started again would have a new id and turn 1 anew.
    assert rows[1]["run_id"] == run_dir.name and rows[1]["correct"] and rows[1]["first_correct_turn"] == 2
    assert (run_dir / "turns.jsonl").read_text().splitlines()[0] == kept[0]
    assert json.loads((bench_dir / "bench.json").read_text())["status"] == "completed"
