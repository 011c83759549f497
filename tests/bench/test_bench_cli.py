"""Bad input to `kevin-opt bench`, through the real CLI: each refused with what to do and its exit
code, before any task starts (no bench folder is made)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess

from ..clihelp import kevin
from ..conftest import EXAMPLES, git_init


def project(tmp_path):
    repo = git_init(tmp_path / "proj")
    tasks = repo / "tasks"
    tasks.mkdir()
    shutil.copy(EXAMPLES / "softmax.py", tasks / "softmax.py")
    (repo / "responses").mkdir()
    (repo / "responses" / "softmax.jsonl").write_text(json.dumps({"text": "no code"}) + "\n")
    return repo


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scripted(*extra):
    return ("bench", "tasks", "--device", "cpu", "--backend", "scripted", "--responses", "responses", "--turns", "1",
            "--headless", *extra)


def no_bench(repo) -> bool:
    benches = repo / ".kevin" / "benches"
    return not benches.exists() or not any(benches.iterdir())


def test_a_path_without_task_files_exits_2(tmp_path):
    repo = project(tmp_path)
    (repo / "empty").mkdir()
    proc = kevin("bench", "empty", "--device", "cpu", "--backend", "scripted", cwd=repo)
    assert proc.returncode == 2, proc.stderr
    assert "empty: no task files in this folder" in proc.stderr and "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr and no_bench(repo)
    proc = kevin("bench", "nowhere", cwd=repo)
    assert proc.returncode == 2 and "nowhere: no such folder or file" in proc.stderr


def test_ray_not_installed_says_the_extras_install_line(tmp_path):
    repo = project(tmp_path)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "ray.py").write_text("raise ImportError('No module named ray')\n")
    proc = kevin(*scripted("--ray"), cwd=repo, env={"PYTHONPATH": str(shim)})
    assert proc.returncode == 3, proc.stderr
    assert "--ray needs Ray, which is not installed" in proc.stderr
    assert "pip install 'kevin-opt[ray]'" in proc.stderr and no_bench(repo)


def test_an_unreachable_ray_head_or_endpoint_exits_3_before_any_task(tmp_path):
    repo = project(tmp_path)
    port = closed_port()
    proc = kevin(*scripted("--ray", f"127.0.0.1:{port}"), cwd=repo)
    assert proc.returncode == 3, proc.stderr
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in proc.stderr and "ray start --head" in proc.stderr
    assert "Traceback" not in proc.stderr and no_bench(repo)
    proc = kevin("bench", "tasks", "--device", "cpu", "--backend", "openai", "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--headless", cwd=repo, env={"KEVIN_RETRIES": "0"})
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and no_bench(repo)


def test_on_a_terminal_the_bench_draws_one_live_line(tmp_path):
    """A real pseudo-terminal: the live line (a bar, the counts, the ETA) is redrawn in place, and a
    line per finished task is printed above it; no per-turn lines."""
    import os
    import pty
    import subprocess
    import sys

    repo = project(tmp_path)
    shutil.copy(repo / "tasks" / "softmax.py", repo / "tasks" / "softmax2.py")
    shutil.copy(repo / "responses" / "softmax.jsonl", repo / "responses" / "softmax2.jsonl")
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_") or k == "KEVIN_CACHE_DIR"}
    env.pop("CI", None)
    env.update(TERM="xterm-256color", COLUMNS="120")
    proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", "bench", "tasks", "--device", "cpu",
                             "--backend", "scripted", "--responses", "responses", "--turns", "1"], cwd=repo, env=env,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=600) == 0
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    (tmp_path / "screen.txt").write_text(text)
    assert "\r\x1b[K[" in text and "2/2 done · 0 running · 0 failed" in text
    assert "[2/2] tasks/softmax2: no verified kernel in 1 turn" in text
    assert "turn 1/1]" not in text  # the turns are the headless lines' business
    assert "| tasks/softmax | incorrect |" in text


def test_history_lists_benches_beside_runs_and_show_prints_a_benchs_table(tmp_path):
    from kevin_agent.bench.store import BenchStore
    from kevin_agent.bench.table import write_table
    from kevin_agent.results.bench import BenchInfo, BenchTask, TaskResult

    repo = project(tmp_path)
    info = BenchInfo(bench_id="bench-20250101-000000-tasks-abcd", created_at="2025-01-01T00:00:00+00:00",
                     paths=["tasks"], tasks=[BenchTask(task_id="tasks/softmax", path=str(repo / "tasks/softmax.py"))],
                     device="cpu", backend="scripted", model="scripted", trajectories=1, turns=1)
    store = BenchStore.create(repo / ".kevin" / "benches", info)
    store.record(TaskResult(task_id="tasks/softmax", path=info.tasks[0].path, status="failed", error="no Model"))
    store.update_info(status="completed")
    store.release()
    write_table(store)
    plain = kevin("history", "--plain", cwd=repo)
    assert plain.returncode == 0, plain.stderr
    assert "bench-20250101-000000-tasks-abcd" in plain.stdout and " completed " in plain.stdout
    assert "1/1" in plain.stdout and "no runs" not in plain.stdout  # a bench is something stored
    shown = kevin("show", "bench-20250101", cwd=repo)  # a unique prefix, as for runs
    assert shown.returncode == 0, shown.stderr
    assert "| tasks/softmax | failed (below) |" in shown.stdout and "no Model" in shown.stdout and "fast_p" in shown.stdout
    missing = kevin("show", "bench-nope", cwd=repo)
    assert missing.returncode == 2 and "no bench 'bench-nope'" in missing.stderr


def test_a_bench_of_the_examples_folder_runs_its_tasks_names_what_it_skipped_and_stays_out_of_git(tmp_path):
    """The examples as they are: three task files with device-named scripts (rmsnorm.cpu.jsonl), two
    whole models and, here, a kernel a run delivered; turn 1 of each script is a parse error (no build)."""
    repo = git_init(tmp_path / "proj")
    shutil.copytree(EXAMPLES, repo / "examples")
    (repo / "examples" / "softmax_kevin.py").write_text(
        "import torch\nclass ModelNew(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n")
    proc = kevin("bench", "examples", "--device", "cpu", "--backend", "scripted", "--responses", "examples",
                 "--turns", "1", "--headless", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    bench_dir = next((repo / ".kevin" / "benches").iterdir())
    table = json.loads((bench_dir / "table.json").read_text())
    assert [r["task_id"] for r in table["rows"]] == ["examples/bias_gelu", "examples/rmsnorm", "examples/softmax"]
    assert all(r["status"] == "done" and r["turns_done"] == 1 for r in table["rows"])
    for name, why in (("layer_stack.py", "a whole model (get_model())"), ("mlp_block.py", "a whole model"),
                      ("softmax_kevin.py", "a kernel (class ModelNew)")):
        assert f"skipped examples/{name}: {why}" in proc.stderr  # as the path was given
        assert f"- examples/{name}: {why}" in (bench_dir / "table.md").read_text()
    # Like a run's .kevin/runs, the bench's folder never shows in the person's git status.
    assert ".kevin/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    status = subprocess.run(["git", "-C", repo, "status", "--porcelain"], capture_output=True, text=True).stdout
    assert ".kevin" not in status and "examples/" in status


def test_a_script_missing_or_short_for_any_task_is_refused_before_the_bench_starts(tmp_path):
    repo = project(tmp_path)
    shutil.copy(repo / "tasks" / "softmax.py", repo / "tasks" / "softmax2.py")
    proc = kevin(*scripted()[:-2], "2", "--headless", cwd=repo)  # two turns; softmax's script has one answer
    assert proc.returncode == 2, proc.stderr
    assert "2 tasks cannot be answered from --responses responses" in proc.stderr
    assert "responses/softmax.jsonl has 1 response; 2 turns need 2" in proc.stderr
    assert "looked for softmax2.jsonl, softmax2.cpu.jsonl" in proc.stderr
    assert "Traceback" not in proc.stderr and no_bench(repo)


def test_a_bench_where_no_task_ran_exits_1_and_its_table_says_each_error_in_full(tmp_path):
    repo = project(tmp_path)
    (repo / "tasks" / "softmax.py").unlink()
    for name in ("no_model", "no_model2"):
        (repo / "tasks" / f"{name}.py").write_text("import torch\n\ndef get_inputs():\n    return [torch.randn(4)]\n")
        shutil.copy(repo / "responses" / "softmax.jsonl", repo / "responses" / f"{name}.jsonl")
    proc = kevin(*scripted(), cwd=repo)
    assert proc.returncode == 1, proc.stderr
    assert "no task of the bench ran: all 2 failed" in proc.stderr
    table = (next((repo / ".kevin" / "benches").iterdir()) / "table.md").read_text()
    assert "| tasks/no_model | failed (below) | - | - | - | - |" in table
    error = json.loads(next((repo / ".kevin" / "benches").iterdir()).joinpath("table.json").read_text())["rows"][0]
    assert "\nhint: " in error["error"]
    assert "## Failed tasks" in table and error["error"] in table  # every line of it, hint included
