"""A project of six task files with their own scripts, from the examples' tasks and hand-written
responses (kernels whose builds the examples' tests already cache): three correct, one incorrect,
one that does not compile, one task file that does not load."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from ..conftest import EXAMPLES, git_init

FAST = ("--device", "cpu", "--backend", "scripted", "--responses", "responses", "--turns", "1", "--headless",
        "--timed-runs", "5", "--correctness-trials", "2", "--confirm-rounds", "5", "--confirm-top", "1")
"""A bench's settings in these tests: one turn, few timed runs, a short confirmation."""
ENV = {"KEVIN_LOAD_TIMEOUT_S": "600"}
"""A machine shared with other builds loads slowly; a kernel's load is not what these tests time."""


def lines(name: str) -> list[str]:
    return (EXAMPLES / name).read_text().splitlines()


def six_tasks(tmp_path: Path) -> Path:
    repo = git_init(tmp_path / "proj")
    tasks, scripts = repo / "tasks", repo / "responses"
    tasks.mkdir()
    scripts.mkdir()
    r, b, s = lines("rmsnorm.cpu.jsonl"), lines("bias_gelu.cpu.jsonl"), lines("softmax.cpu.jsonl")
    plan = {"rmsnorm": ("rmsnorm.py", r[3]), "bias_gelu": ("bias_gelu.py", b[7]), "softmax": ("softmax.py", s[7]),
            "rmsnorm_sum": ("rmsnorm.py", r[2]), "rmsnorm_sqrtf": ("rmsnorm.py", r[1])}
    for stem, (source, response) in plan.items():
        shutil.copy(EXAMPLES / source, tasks / f"{stem}.py")
        (scripts / f"{stem}.jsonl").write_text(response + "\n")
    (tasks / "broken.py").write_text("import torch\n\ndef get_inputs():\n    return [torch.randn(4)]\n")
    (scripts / "broken.jsonl").write_text(r[0] + "\n")  # scripts are checked before the bench starts
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "tasks"], check=True)
    return repo


EXPECTED = {"tasks/bias_gelu": True, "tasks/broken": False, "tasks/rmsnorm": True, "tasks/rmsnorm_sqrtf": False,
            "tasks/rmsnorm_sum": False, "tasks/softmax": True}


def table_of(repo: Path, bench_id: str) -> dict:
    return json.loads((repo / ".kevin" / "benches" / bench_id / "table.json").read_text())


def only_bench(repo: Path) -> str:
    (bench,) = [p.name for p in (repo / ".kevin" / "benches").iterdir()]
    return bench
