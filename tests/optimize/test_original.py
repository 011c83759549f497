"""The person's model file is never lost when git does not hold it: an optimize's delivery (and
``install --write``) on the example stack, with a real kernel module (its install footer and guard
as a run writes them, around a norm written in PyTorch that counts its calls, so nothing compiles)
and real git repositories: untracked in a repository (its original committed first, the change on
top), in no repository (the original untouched, the new model beside it, importable and running the
kernel), tracked and clean (one commit, as always). Also: a refusal known before the profile exits 1
and records nothing, and resuming a delivered optimize commits nothing again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.model.modelfile import load_model_file
from kevin_agent.optimize import OptimizeSession
from kevin_agent.optimize import deliver as delivering

from ..clihelp import REPO, kevin
from ..conftest import EXAMPLES, git_init
from .kernels import KERNEL, ORIGINAL, kept_session, kernel_module_source


@pytest.fixture(scope="module")
def kernel_source(tmp_path_factory) -> str:
    return kernel_module_source(tmp_path_factory.mktemp("extract"))


def delivered(folder: Path, kernel_source: str, **settings) -> OptimizeSession:
    """The optimize's delivery, as ``optimize`` carries it out once the kernel was kept (the
    measurement before it is ``test_whole_model``'s)."""
    session = kept_session(folder, kernel_source, **settings)
    try:
        delivering._deliver(session, load_model_file(folder / "layer_stack.py"))
    finally:
        session.close()
    return session


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


RUNS_THE_KERNEL = """
import sys, torch
sys.path.insert(0, '.')
import {module} as model_file, layer_stack_layers_norm_kevin as kernel
model = model_file.get_model()
with torch.no_grad():
    model(*model_file.get_inputs())
print(sum(calls['kernel'] for calls in kernel.kernel_calls(model).values()))
"""


def kernel_calls(folder: Path, module: str) -> int:
    proc = subprocess.run([sys.executable, "-c", RUNS_THE_KERNEL.format(module=module)], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


def test_untracked_in_a_repository_is_committed_first_as_it_was(tmp_path, kernel_source):
    repo = git_init(tmp_path / "fresh")  # a fresh repository: no commit at all yet
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    record = delivered(repo, kernel_source).record
    assert record.status == "delivered", record.why
    log = git(repo, "log", "--format=%H %s").splitlines()
    assert len(log) == 2
    (top, top_subject), (first, first_subject) = (line.split(" ", 1) for line in log)
    assert record.commit == top and record.original_commit == first
    assert first_subject == "kevin-opt: layer_stack.py as it was, before kevin-opt installs its kernels"
    assert git(repo, "show", "--name-only", "--format=", first).split() == ["layer_stack.py"]
    shown = subprocess.run(["git", "-C", repo, "show", f"{first}:layer_stack.py"], capture_output=True, check=True)
    assert shown.stdout == ORIGINAL  # byte for byte
    # the optimize's commit is the change: the diff shows it, revert undoes it
    diff = git(repo, "diff", "HEAD~1", "HEAD", "--", "layer_stack.py")
    assert "+    import layer_stack_layers_norm_kevin" in diff and "-    return model" in diff
    assert record.model_written == "layer_stack.py" and "committed first as it was" in record.notes[-1]
    git(repo, "revert", "--no-edit", "HEAD")
    assert (repo / "layer_stack.py").read_bytes() == ORIGINAL and not (repo / KERNEL).exists()


def test_untracked_with_a_new_branch_puts_both_commits_on_it(tmp_path, kernel_source):
    repo = git_init(tmp_path / "proj")
    (repo / "README").write_text("mine\n")
    git(repo, "add", "README")
    git(repo, "commit", "-qm", "start")
    head = git(repo, "rev-parse", "HEAD").strip()
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    record = delivered(repo, kernel_source, branch="kernels").record
    assert record.status == "delivered" and record.branch == "kernels", record.why
    assert git(repo, "rev-parse", "HEAD").strip() == head  # the checkout stays where it was
    assert git(repo, "log", "--format=%H", "kernels").split() == [record.commit, record.original_commit, head]
    assert subprocess.run(["git", "-C", repo, "show", "kernels~1:layer_stack.py"], capture_output=True,
                          check=True).stdout == ORIGINAL


def test_in_no_repository_the_original_stays_and_the_new_model_is_beside_it(tmp_path, kernel_source):
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "layer_stack.py").write_bytes(ORIGINAL)
    record = delivered(folder, kernel_source).record
    assert record.status == "written" and record.commit is None and record.original_commit is None, record.why
    assert (folder / "layer_stack.py").read_bytes() == ORIGINAL
    beside = folder / "layer_stack_kevin_model.py"
    assert Path(record.model_written) == beside and str(beside) in record.written
    assert "layer_stack.py left untouched (it is in no git repository" in record.notes[-1]
    assert "layer_stack_kevin_model.py beside it" in record.notes[-1]
    assert "+++ b/layer_stack_kevin_model.py" in record.model_change
    # the new model runs the kernel at all three norms; the original runs none
    assert kernel_calls(folder, "layer_stack_kevin_model") == 3
    assert kernel_calls(folder, "layer_stack") == 0
    report = (folder / "layer_stack_kevin_model_report.md").read_text()
    assert "layer_stack_kevin_model.py beside it" in report


def test_ignored_by_git_it_is_never_committed_and_stays_untouched(tmp_path, kernel_source):
    repo = git_init(tmp_path / "proj")
    (repo / ".gitignore").write_text("layer_stack.py\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore my model")
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    record = delivered(repo, kernel_source).record
    assert record.status == "delivered" and record.original_commit is None, record.why
    assert (repo / "layer_stack.py").read_bytes() == ORIGINAL
    assert "layer_stack.py" not in git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert "layer_stack_kevin_model.py" in git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert "(git ignores it" in record.notes[-1]


def test_tracked_and_clean_is_changed_in_place_in_one_commit(tmp_path, kernel_source):
    repo = git_init(tmp_path / "proj")
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    git(repo, "add", "layer_stack.py")
    git(repo, "commit", "-qm", "my model")
    record = delivered(repo, kernel_source).record
    assert record.status == "delivered" and record.original_commit is None and record.original == ""
    assert len(git(repo, "log", "--format=%H").split()) == 2
    assert record.model_written == "layer_stack.py" and not (repo / "layer_stack_kevin_model.py").exists()
    assert "+    import layer_stack_layers_norm_kevin" in git(repo, "diff", "HEAD~1", "HEAD", "--", "layer_stack.py")
    assert kernel_calls(repo, "layer_stack") == 3


def test_a_hook_refusing_the_original_leaves_it_untouched(tmp_path, kernel_source):
    repo = git_init(tmp_path / "proj")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'no commits today' >&2\nexit 1\n")
    hook.chmod(0o755)
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    record = delivered(repo, kernel_source).record
    assert (repo / "layer_stack.py").read_bytes() == ORIGINAL and record.original_commit is None
    assert (repo / "layer_stack_kevin_model.py").is_file() and record.status == "written"
    assert any("committing it failed: the pre-commit hook rejected the commit" in n for n in record.notes)


def test_install_write_never_rewrites_an_untracked_model(tmp_path, kernel_source):
    repo = git_init(tmp_path / "proj")
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    (repo / KERNEL).write_text(kernel_source)
    first = kevin("install", "layer_stack.py", "--kernel", KERNEL, "--write", cwd=repo)
    assert first.returncode == 0, first.stderr
    assert (repo / "layer_stack.py").read_bytes() == ORIGINAL
    assert "wrote the model with the change into layer_stack_kevin_model.py" in first.stdout
    assert "layer_stack.py left untouched (git does not track it" in first.stderr
    assert kernel_calls(repo, "layer_stack_kevin_model") == 3
    # the same change again is the same file; an edit of that file is not overwritten
    assert kevin("install", "layer_stack.py", "--kernel", KERNEL, "--write", cwd=repo).returncode == 0
    (repo / "layer_stack_kevin_model.py").write_text("# mine\n")
    refused = kevin("install", "layer_stack.py", "--kernel", KERNEL, "--write", cwd=repo)
    assert refused.returncode == 2 and "layer_stack_kevin_model.py exists" in refused.stderr
    assert (repo / "layer_stack_kevin_model.py").read_text() == "# mine\n"
    # --replace: the person says to write into the file itself
    replaced = kevin("install", "layer_stack.py", "--kernel", KERNEL, "--write", "--replace", cwd=repo)
    assert replaced.returncode == 0, replaced.stderr
    assert "import layer_stack_layers_norm_kevin" in (repo / "layer_stack.py").read_text()


def test_uncommitted_edits_are_refused_before_the_profile_and_nothing_is_recorded(tmp_path):
    repo = git_init(tmp_path / "proj")
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    git(repo, "add", "layer_stack.py")
    git(repo, "commit", "-qm", "my model")
    (repo / "layer_stack.py").write_bytes(ORIGINAL + b"\n# my edit\n")
    proc = kevin("optimize", "layer_stack.py", "--device", "cpu", "--backend", "scripted", "--responses",
                 str(EXAMPLES / "layer_stack_responses"), "--headless", cwd=repo)
    assert proc.returncode == 1, proc.stderr  # a refused delivery, as the README says
    assert "layer_stack.py has uncommitted changes" in proc.stderr and "profiling" not in proc.stderr
    assert not list(repo.glob(".kevin/runs/opt-*"))
    history = json.loads(kevin("history", "--json", cwd=repo).stdout)
    assert history["optimizes"] == []
    assert (repo / "layer_stack.py").read_bytes() == ORIGINAL + b"\n# my edit\n"


def test_resuming_a_delivered_optimize_commits_nothing_again(tmp_path, kernel_source):
    repo = git_init(tmp_path / "proj")
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    git(repo, "add", "layer_stack.py")
    git(repo, "commit", "-qm", "my model")
    record = delivered(repo, kernel_source).record
    before = git(repo, "log", "--format=%H")
    proc = kevin("resume", record.optimize_id, cwd=repo, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    assert f"already delivered in {record.commit[:12]} on main" in proc.stderr
    assert git(repo, "log", "--format=%H") == before
    stored = json.loads(next((repo / ".kevin" / "runs").glob("opt-*/optimize.json")).read_text())
    assert stored["status"] == "delivered" and stored["commit"] == record.commit


def test_a_kernel_module_in_the_way_is_refused_once_the_plan_names_it_and_nothing_is_recorded(tmp_path):
    repo = git_init(tmp_path / "proj")
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    git(repo, "add", "layer_stack.py")
    git(repo, "commit", "-qm", "my model")
    (repo / "layer_stack_layers_act_kevin.py").write_text("# mine, untracked\n")
    proc = kevin("optimize", "layer_stack.py", "--device", "cpu", "--backend", "scripted", "--responses",
                 str(EXAMPLES / "layer_stack_responses"), "--headless", cwd=repo)
    assert proc.returncode == 1, proc.stderr
    assert "layer_stack_layers_act_kevin.py exists and git does not track it: pass --replace" in proc.stderr
    assert "running turn" not in proc.stderr and not list(repo.glob(".kevin/runs/opt-*"))
    assert json.loads(kevin("history", "--json", cwd=repo).stdout)["optimizes"] == []
    assert (repo / "layer_stack_layers_act_kevin.py").read_text() == "# mine, untracked\n"


def test_an_optimize_never_commits_into_kevin_opts_own_checkout():
    status = git(REPO, "status", "--porcelain")
    head = git(REPO, "rev-parse", "HEAD")
    runs = set(REPO.glob(".kevin/runs/opt-*"))
    # (--min-saving 0.9: were it not refused, it would stop at the plan, committing nothing)
    proc = kevin("optimize", "examples/layer_stack.py", "--device", "cpu", "--backend", "scripted", "--responses",
                 "examples/layer_stack_responses", "--min-saving", "0.9", "--headless", cwd=REPO)
    assert proc.returncode == 1, proc.stderr
    assert "is in kevin-opt's own checkout" in proc.stderr and "profiling" not in proc.stderr
    assert git(REPO, "status", "--porcelain") == status and git(REPO, "rev-parse", "HEAD") == head
    assert set(REPO.glob(".kevin/runs/opt-*")) == runs
