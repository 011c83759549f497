"""Delivering a run: files next to the task, the commit, and every way the commit can be refused."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.config import RunConfig
from kevin_agent.delivery import commit_message, deliver, plan_delivery
from kevin_agent.results import Status

from .conftest import git_init
from .run_records import correct, failed, run_info, sample_records, write_task

OUTPUTS = ["my_relu_kevin.py", "my_relu_kevin_report.md", "my_relu_kevin_report.json", "my_relu_kevin_report.png"]


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def project(tmp_path):
    root = git_init(tmp_path / "proj")
    task = write_task(root / "layers")
    (root / "notes.md").write_text("notes\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    return root, task


def test_deliver_writes_and_commits(project):
    root, task = project
    (root / "notes.md").write_text("notes\nunstaged\n")
    info = run_info(task)
    d = deliver(task, info, sample_records(), RunConfig())
    assert d.committed and d.commit == git(root, "rev-parse", "HEAD").strip()
    assert d.kernel_path == task.path.parent / "my_relu_kevin.py"
    committed = sorted(git(root, "show", "--name-only", "--format=", "HEAD").split())
    assert committed == sorted(f"layers/{n}" for n in OUTPUTS)
    assert git(root, "log", "-1", "--format=%s").strip() == "kevin-opt: my_relu MyRelu kernel, 1.83x faster on Test CPU 9000"
    assert "Kevin-Speedup: 1.83x eager, 1.21x torch.compile" in git(root, "log", "-1", "--format=%B")
    assert git(root, "status", "--porcelain").splitlines() == [" M notes.md"]
    assert ".kevin/" in (root / ".git" / "info" / "exclude").read_text().splitlines()
    assert d.report.markdown.read_text().startswith("# kevin-opt report: my_relu")
    assert any(n.startswith("committed ") and "on main" in n for n in d.notes)
    # The delivered module is the best turn's source with its header.
    assert (task.path.parent / "my_relu_kevin.py").read_text().endswith(sample_records()[4].code)


def test_commit_message_without_compile_timing(tmp_path):
    task = write_task(tmp_path)
    msg = commit_message(task, run_info(task), correct(0, 1, 2.5))
    assert msg.splitlines()[0] == "kevin-opt: my_relu MyRelu kernel, 2.50x faster on Test CPU 9000"
    assert msg.splitlines()[-3:] == ["Kevin-Run: 20250101-120000-my-relu-ab12", "Kevin-Model: cognition-ai/Kevin-32B",
                                     "Kevin-Speedup: 2.50x eager"]


def test_no_commit_writes_files_only(project):
    root, task = project
    head = git(root, "rev-parse", "HEAD")
    d = deliver(task, run_info(task), sample_records(), RunConfig(commit=False))
    assert not d.committed and d.commit is None
    assert git(root, "rev-parse", "HEAD") == head
    assert all((task.path.parent / n).exists() for n in OUTPUTS)
    assert "not committed (--no-commit)" in d.notes


def test_branch_delivery(project):
    root, task = project
    head = git(root, "rev-parse", "HEAD")
    d = deliver(task, run_info(task), sample_records(), RunConfig(branch="kevin/relu"))
    assert d.committed and d.branch == "kevin/relu"
    assert git(root, "rev-parse", "HEAD") == head
    assert git(root, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert git(root, "rev-parse", "kevin/relu").strip() == d.commit


def test_outside_a_repository(tmp_path):
    task = write_task(tmp_path / "plain")
    d = deliver(task, run_info(task), sample_records(), RunConfig())
    assert not d.committed
    assert all((task.path.parent / n).exists() for n in OUTPUTS)
    assert any("is not inside a git repository" in n for n in d.notes), d.notes


def test_below_min_speedup_writes_nothing(project, monkeypatch, tmp_path):
    root, task = project
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    config = RunConfig(min_speedup=2.0)
    assert plan_delivery(task, run_info(task), sample_records(), config) is None
    d = deliver(task, run_info(task), sample_records(), config)
    assert d.kernel_path is None and not d.committed
    assert d.notes == ["the best verified kernel reached 1.83x, below --min-speedup 2.00x: nothing written, nothing committed"]
    assert not any((task.path.parent / n).exists() for n in OUTPUTS)
    assert "# kevin-opt report: my_relu" in summary.read_text()  # CI still sees what happened
    only_failures = [failed(0, 1, Status.COMPILE_ERROR, "boom")]
    assert deliver(task, run_info(task), only_failures, RunConfig()).notes[0].startswith("no turn produced a verified kernel")


def test_step_summary_is_appended(project, monkeypatch, tmp_path):
    root, task = project
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    deliver(task, run_info(task), sample_records(), RunConfig(commit=False))
    text = summary.read_text()
    assert text.startswith("earlier step\n# kevin-opt report: my_relu")
    assert "| 3 | **1.83x** (best) | check failed |" in text
    assert "![" not in text  # the chart cannot be shown there


def test_dirty_target_is_not_overwritten(project):
    root, task = project
    deliver(task, run_info(task), sample_records(), RunConfig())
    kernel = task.path.parent / "my_relu_kevin.py"
    kernel.write_text("# the person's own edit\n")
    head = git(root, "rev-parse", "HEAD")
    records = sample_records() + [correct(0, 4, 2.5)]
    plan = plan_delivery(task, run_info(task), records, RunConfig())
    assert not plan.commit and any("uncommitted changes in layers/my_relu_kevin.py" in p for p in plan.problems)
    d = deliver(task, run_info(task), records, RunConfig())
    assert kernel.read_text() == "# the person's own edit\n"  # nothing lost
    assert d.kernel_path is None and not d.committed
    assert git(root, "rev-parse", "HEAD") == head
    assert any("not overwritten (uncommitted changes)" in n and "my_relu_kevin.py" in n for n in d.notes)
    assert '"speedup": 2.5' in d.report.json.read_text()  # the clean report files are refreshed


def test_detached_head_writes_files_and_says_why(project):
    root, task = project
    git(root, "checkout", "-q", "--detach")
    plan = plan_delivery(task, run_info(task), sample_records(), RunConfig())
    assert plan is not None and not plan.commit and plan.problems and "HEAD is detached" in plan.problems[0]
    d = deliver(task, run_info(task), sample_records(), RunConfig())
    assert not d.committed and all((task.path.parent / n).exists() for n in OUTPUTS)
    assert any("HEAD is detached" in n for n in d.notes)


def test_merge_in_progress_writes_files_and_says_why(project):
    root, task = project
    git(root, "checkout", "-q", "-b", "side")
    (root / "notes.md").write_text("side\n")
    git(root, "commit", "-q", "-am", "side")
    git(root, "checkout", "-q", "main")
    (root / "notes.md").write_text("main\n")
    git(root, "commit", "-q", "-am", "main")
    subprocess.run(["git", "-C", str(root), "merge", "-q", "side"], capture_output=True)
    conflicted = (root / "notes.md").read_text()
    d = deliver(task, run_info(task), sample_records(), RunConfig())
    assert not d.committed and any("a merge is in progress" in n for n in d.notes)
    assert all((task.path.parent / n).exists() for n in OUTPUTS)
    assert (root / "notes.md").read_text() == conflicted


def test_failing_hook_writes_files_and_reports_the_output(project):
    root, task = project
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'ruff: E501 line too long'\nexit 1\n")
    hook.chmod(0o755)
    head = git(root, "rev-parse", "HEAD")
    d = deliver(task, run_info(task), sample_records(), RunConfig())
    assert not d.committed and d.commit is None
    assert git(root, "rev-parse", "HEAD") == head
    assert any("pre-commit hook rejected the commit" in n and "ruff: E501 line too long" in n for n in d.notes)
    assert all((task.path.parent / n).exists() for n in OUTPUTS)


def test_out_option_and_plan(project):
    root, task = project
    out = root / "src" / "fast_relu.py"
    config = RunConfig(out=out)
    plan = plan_delivery(task, run_info(task), sample_records(), config)
    assert plan.kernel_path == out and plan.commit and plan.problems == []
    assert plan.repo_root == root and (plan.trajectory, plan.turn, plan.speedup) == (0, 3, 1.83)
    assert plan.report.markdown == task.path.parent / "my_relu_kevin_report.md"
    d = deliver(task, run_info(task), sample_records(), config)
    assert d.committed and "src/fast_relu.py" in git(root, "show", "--name-only", "--format=", "HEAD")
    assert "    from fast_relu import ModelNew" in out.read_text()


@pytest.mark.slow
def test_delivered_module_replaces_the_original_class(tmp_path, monkeypatch, build_cache):
    """The committed module compiles its kernel on import and computes what the original does."""
    import torch

    # In the shared build cache, so a warm CI cache skips the compile.
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(build_cache / "delivered-module"))
    task = write_task(tmp_path / "plain")
    deliver(task, run_info(task), sample_records(), RunConfig(commit=False))
    spec = importlib.util.spec_from_file_location("my_relu_kevin", task.path.parent / "my_relu_kevin.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["my_relu_kevin"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["my_relu_kevin"]
    x = torch.randn(64, 128)
    assert torch.equal(module.ModelNew()(x), torch.relu(x))
    assert "from my_relu_kevin import ModelNew" in module.__doc__


def test_one_success_rule_for_headless_and_tui(tmp_path):
    from kevin_agent.delivery import Delivery

    written = tmp_path / "k_kevin.py"
    assert Delivery(kernel_path=written, in_repo=False).succeeded(commit_wanted=True)  # nothing to commit into
    assert not Delivery(kernel_path=written, in_repo=True).succeeded(commit_wanted=True)  # commit refused
    assert Delivery(kernel_path=written, in_repo=True).succeeded(commit_wanted=False)  # --no-commit
    assert Delivery(kernel_path=written, in_repo=True, committed=True).succeeded(commit_wanted=True)
    assert not Delivery(in_repo=False).succeeded(commit_wanted=False)  # nothing written
