"""`--responses DIR`: the real CLI serves each task from its own script in a folder of them,
resumes a run where its script left off, and refuses a folder that has no script for the task."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from ..clihelp import REPO, kevin
from ..conftest import git_init

EXAMPLES = REPO / "examples"


def labelled(task: str, i: int) -> dict:
    return {"text": f"<think>[hand-written test response] {task} {i}</think>No code for {task} yet ({i})."}


def project(tmp_path):
    """A repository holding the examples' softmax and rmsnorm tasks, and a folder of scripts."""
    repo = git_init(tmp_path / "proj")
    for name in ("softmax.py", "rmsnorm.py"):
        shutil.copy(EXAMPLES / name, repo / name)
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my layers"], check=True)
    folder = repo / "responses"
    folder.mkdir()
    return repo, folder


def scripted(*args):
    return ("--device", "cpu", "--backend", "scripted", "--headless", "--run-dir", "runs", *args)


@pytest.mark.slow
def test_each_task_is_served_its_own_script_from_the_folder(tmp_path):
    repo, folder = project(tmp_path)
    # The examples' first verified rmsnorm kernel (its build is cached); softmax's script is another task's.
    kernel = (EXAMPLES / "rmsnorm.cpu.jsonl").read_text().splitlines()[3]
    (folder / "rmsnorm.jsonl").write_text(kernel + "\n")
    (folder / "softmax.jsonl").write_text(json.dumps(labelled("softmax", 0)) + "\n")
    proc = kevin("run", "rmsnorm.py", *scripted("--responses", "responses", "--turns", "1", "--json", "s.json",
                                                "--min-speedup", "0", "--no-commit", "--timed-runs", "10",
                                                "--confirm-rounds", "30"), cwd=repo)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((repo / "s.json").read_text())
    assert [t["status"] for t in summary["turns"]] == ["correct"]
    run = repo / "runs" / summary["run_id"]
    (record,) = [json.loads(line) for line in (run / "turns.jsonl").read_text().splitlines()]
    assert record["response"] == json.loads(kernel)["text"]
    assert (repo / "rmsnorm_kevin.py").is_file()


def test_a_resumed_run_takes_up_its_script_where_it_left_off(tmp_path):
    repo, folder = project(tmp_path)
    for task in ("softmax", "rmsnorm"):
        (folder / f"{task}.jsonl").write_text("".join(json.dumps(labelled(task, i)) + "\n" for i in range(3)))
    first = kevin("run", "softmax.py", *scripted("--responses", "responses", "--turns", "1", "--json", "a.json"),
                  cwd=repo)
    assert first.returncode == 1, first.stderr  # nothing verified
    run_id = json.loads((repo / "a.json").read_text())["run_id"]
    again = kevin("resume", run_id, "--turns", "2", "--headless", "--run-dir", "runs", "--json", "b.json", cwd=repo)
    assert again.returncode == 1, again.stderr
    records = [json.loads(line) for line in (repo / "runs" / run_id / "turns.jsonl").read_text().splitlines()]
    assert [r["response"] for r in records] == [labelled("softmax", 0)["text"], labelled("softmax", 1)["text"]]


def test_a_folder_without_the_tasks_script_is_refused_before_the_run_starts(tmp_path):
    repo, folder = project(tmp_path)
    (folder / "rmsnorm.jsonl").write_text(json.dumps(labelled("rmsnorm", 0)) + "\n")
    proc = kevin("run", "softmax.py", *scripted("--responses", "responses", "--turns", "1"), cwd=repo)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "the folder responses given as --responses has no script for this task: looked for softmax.jsonl" in proc.stderr
    assert not (repo / "runs").exists() or not any((repo / "runs").iterdir())
