"""Bad input to `kevin-opt bench`, through the real CLI: each refused with what to do and its exit
code, before any task starts (no bench folder is made)."""

from __future__ import annotations

import json
import shutil
import socket

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
