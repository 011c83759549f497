"""Delivering a run: files next to the task, the commit, and every way the commit can be refused."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.config import RunConfig
from kevin_agent.delivery import Delivery, commit_message, deliver, plan_delivery
from kevin_agent.delivery.kernel_module import read_claim, render_kernel_module
from kevin_agent.results import Status

from ..conftest import git_init
from ..run_records import correct, failed, run_info, sample_records, write_task

OUTPUTS = ["my_relu_kevin.py", "my_relu_kevin_report.md", "my_relu_kevin_report.json", "my_relu_kevin_report.png"]


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def deliver_now(task, records, config: RunConfig, *, replace: bool = False, **info_changes) -> Delivery:
    """Plan, then carry the plan out, as the finish path does."""
    info = run_info(task, **info_changes)
    return deliver(plan_delivery(task, info, records, config, replace=replace), task, info, records)


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
    d = deliver_now(task, sample_records(), RunConfig())
    assert d.committed and d.commit == git(root, "rev-parse", "HEAD").strip() and d.succeeded()
    assert d.kernel_path == task.path.parent / "my_relu_kevin.py"
    committed = sorted(git(root, "show", "--name-only", "--format=", "HEAD").split())
    assert committed == sorted(f"layers/{n}" for n in OUTPUTS)
    assert git(root, "log", "-1", "--format=%s").strip() == "kevin-opt: my_relu MyRelu kernel, 1.83x faster on Test CPU 9000"
    assert "Kevin-Speedup: 1.83x eager, 1.21x torch.compile" in git(root, "log", "-1", "--format=%B")
    assert git(root, "status", "--porcelain").splitlines() == [" M notes.md"]
    assert d.report.markdown.read_text().startswith("# kevin-opt report: my_relu")
    assert any(n.startswith("committed ") and "on main" in n for n in d.notes)
    assert d.headline() == f"committed {d.commit[:10]} on main"
    # The delivered module is the best turn's source with its header, which says what it claims.
    assert (task.path.parent / "my_relu_kevin.py").read_text().endswith(sample_records()[4].code)
    claim = read_claim(task.path.parent / "my_relu_kevin.py")
    assert (claim.speedup, claim.device, claim.device_name, claim.turn) == (1.83, "cpu", "Test CPU 9000", 3)


def test_commit_message_without_compile_timing(tmp_path):
    task = write_task(tmp_path)
    msg = commit_message(task, run_info(task), correct(0, 1, 2.5))
    assert msg.splitlines()[0] == "kevin-opt: my_relu MyRelu kernel, 2.50x faster on Test CPU 9000"
    assert msg.splitlines()[-3:] == ["Kevin-Run: 20250101-120000-my-relu-ab12", "Kevin-Model: cognition-ai/Kevin-32B",
                                     "Kevin-Speedup: 2.50x eager"]


def test_no_commit_writes_files_only_and_says_they_are_untracked(project):
    root, task = project
    head = git(root, "rev-parse", "HEAD")
    d = deliver_now(task, sample_records(), RunConfig(commit=False))
    assert not d.committed and d.commit is None and d.succeeded()
    assert git(root, "rev-parse", "HEAD") == head
    assert all((task.path.parent / n).exists() for n in OUTPUTS)
    assert d.notes[-1] == "not committed: --no-commit; the files are untracked"
    assert d.headline() == "written, not committed (--no-commit)"


def test_branch_delivery(project):
    root, task = project
    head = git(root, "rev-parse", "HEAD")
    d = deliver_now(task, sample_records(), RunConfig(branch="kevin/relu"))
    assert d.committed and d.branch == "kevin/relu"
    assert git(root, "rev-parse", "HEAD") == head
    assert git(root, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert git(root, "rev-parse", "kevin/relu").strip() == d.commit


def test_outside_a_repository(tmp_path):
    task = write_task(tmp_path / "plain")
    d = deliver_now(task, sample_records(), RunConfig())
    assert not d.committed and d.succeeded()  # there is nothing to commit into
    assert all((task.path.parent / n).exists() for n in OUTPUTS)
    assert any("is not inside a git repository" in n for n in d.notes), d.notes
    # A second run would overwrite files nothing could restore: only with --replace.
    again = deliver_now(task, sample_records() + [correct(0, 4, 2.5)], RunConfig())
    assert again.outcome == "refused" and "--replace" in again.notes[0]
    assert again.notes[0].startswith(f"not written: {task.path.parent}/my_relu_kevin.py, my_relu_kevin_report.md, "
                                     "my_relu_kevin_report.json and my_relu_kevin_report.png exist and are in no git "
                                     "repository"), again.notes
    assert read_claim(task.path.parent / "my_relu_kevin.py").speedup == 1.83
    assert deliver_now(task, sample_records() + [correct(0, 4, 2.5)], RunConfig(), replace=True).succeeded()
    assert read_claim(task.path.parent / "my_relu_kevin.py").speedup == 2.5


def test_below_min_speedup_writes_nothing(project):
    root, task = project
    config = RunConfig(min_speedup=2.0)
    plan = plan_delivery(task, run_info(task), sample_records(), config)
    assert plan.kernel is None and plan.paths == []
    d = deliver(plan, task, run_info(task), sample_records())
    assert d.outcome == "nothing" and d.kernel_path is None and not d.committed and not d.succeeded()
    assert d.notes == ["the best verified kernel reached 1.83x, below --min-speedup 2.00x: nothing written, nothing committed"]
    assert not any((task.path.parent / n).exists() for n in OUTPUTS)
    only_failures = [failed(0, 1, Status.COMPILE_ERROR, "boom")]
    assert deliver_now(task, only_failures, RunConfig()).notes[0].startswith("no turn produced a verified kernel")


def test_a_dirty_target_stops_the_whole_delivery(project):
    """The module and its report are written together or not at all: one edited file keeps all four."""
    root, task = project
    deliver_now(task, sample_records(), RunConfig())
    kernel = task.path.parent / "my_relu_kevin.py"
    kernel.write_text("# the person's own edit\n")
    before = {n: (task.path.parent / n).read_bytes() for n in OUTPUTS}
    head = git(root, "rev-parse", "HEAD")
    records = sample_records() + [correct(0, 4, 2.5)]
    plan = plan_delivery(task, run_info(task), records, RunConfig(), replace=True)  # --replace does not cover it
    assert not plan.writable and any("uncommitted changes in" in b and "my_relu_kevin.py" in b for b in plan.blocked)
    d = deliver(plan, task, run_info(task), records)
    assert d.outcome == "refused" and not d.succeeded() and d.kernel_path is None
    assert {n: (task.path.parent / n).read_bytes() for n in OUTPUTS} == before  # nothing lost, nothing mixed
    assert git(root, "rev-parse", "HEAD") == head
    assert "uncommitted changes in" in d.notes[0] and "never overwritten" in d.notes[0]


def test_an_untracked_target_is_replaced_only_when_asked(project):
    root, task = project
    scratch = task.path.parent / "my_relu_kevin_report.md"
    scratch.write_text("my notes, not in git\n")
    plan = plan_delivery(task, run_info(task), sample_records(), RunConfig())
    assert plan.states[scratch] == "untracked" and not plan.writable
    assert plan.question() == ("replace the existing files?", "Replace and commit")
    lines = plan.describe()
    assert lines[1:4] == [("module", "layers/my_relu_kevin.py: new"),
                          ("report", "layers/my_relu_kevin_report.md: exists, untracked: needs --replace or a yes"),
                          ("", "layers/my_relu_kevin_report.json, .png: new")]
    text = " ".join(t for _, t in lines)
    assert all(text.count(f"layers/{n}") == 1 for n in ("my_relu_kevin.py", "my_relu_kevin_report.md"))
    assert plan.why_not_written() == ("layers/my_relu_kevin_report.md exists and is not tracked by git: "
                                      "pass --replace to overwrite")
    d = deliver(plan, task, run_info(task), sample_records())
    assert d.outcome == "refused" and scratch.read_text() == "my notes, not in git\n"
    assert not (task.path.parent / "my_relu_kevin.py").exists()
    d = deliver(plan.consented(), task, run_info(task), sample_records())  # the TUI's yes
    assert d.committed and scratch.read_text().startswith("# kevin-opt report")


def test_a_better_kernel_is_never_replaced_silently(project):
    root, task = project
    better = sample_records() + [correct(0, 4, 2.38)]
    first = deliver_now(task, better, RunConfig(), run_id="20250101-120000-my-relu-best")
    kernel = task.path.parent / "my_relu_kevin.py"
    committed = kernel.read_text()
    head = git(root, "rev-parse", "HEAD")
    # A later run on the same device finds only 1.83x.
    plan = plan_delivery(task, run_info(task), sample_records(), RunConfig())
    assert plan.replaces is not None and plan.replaces.speedup == 2.38 and not plan.writable
    assert "claims 2.38x on Test CPU 9000 (run 20250101-120000-my-relu-best, turn 4)" in plan.needs_replace[0]
    assert plan.describe()[1:3] == [
        ("module", "layers/my_relu_kevin.py: replaces what is committed; it claims 2.38x (run "
                   "20250101-120000-my-relu-best, turn 4), better than this run's 1.83x: needs --replace or a yes"),
        ("report", "layers/my_relu_kevin_report.md, .json, .png: replaces what is committed")]
    d = deliver(plan, task, run_info(task), sample_records())
    assert d.outcome == "refused" and "pass --replace" in d.notes[0]
    assert kernel.read_text() == committed and git(root, "rev-parse", "HEAD") == head
    # On another device the numbers do not compare: the module is replaced.
    other = plan_delivery(task, run_info(task, device_name="Other CPU"), [
        r.model_copy(update={"eval": r.eval.model_copy(update={"device_name": "Other CPU"})}) if r.eval else r
        for r in sample_records()], RunConfig())
    assert other.replaces is None and other.writable
    # --replace replaces it, and says what it replaced.
    d = deliver_now(task, sample_records(), RunConfig(), replace=True)
    assert d.committed and read_claim(kernel).speedup == 1.83 and first.commit != d.commit
    assert any("replaced my_relu_kevin.py, which claimed 2.38x" in n for n in d.notes)


def test_declining_leaves_the_working_tree_as_it_was(project):
    root, task = project
    status = git(root, "status", "--porcelain", "--untracked-files=all")
    plan = plan_delivery(task, run_info(task), sample_records(), RunConfig(commit=False))
    assert plan.question() == ("write the best kernel?", "Write")
    d = deliver(plan, task, run_info(task), sample_records(), declined=True)
    assert d.outcome == "declined" and not d.succeeded() and d.headline() == "not written (declined)"
    assert git(root, "status", "--porcelain", "--untracked-files=all") == status


def test_a_target_edited_while_the_question_was_open_is_kept(project):
    root, task = project
    plan = plan_delivery(task, run_info(task), sample_records(), RunConfig())
    kernel = task.path.parent / "my_relu_kevin.py"
    kernel.write_text("# written meanwhile\n")
    d = deliver(plan, task, run_info(task), sample_records())
    assert d.outcome == "refused" and "changed since the plan was made" in d.notes[0]
    assert kernel.read_text() == "# written meanwhile\n"


def test_detached_head_writes_files_and_says_why(project):
    root, task = project
    git(root, "checkout", "-q", "--detach")
    plan = plan_delivery(task, run_info(task), sample_records(), RunConfig())
    assert plan.writable and not plan.commit and plan.problems and "HEAD is detached" in plan.problems[0]
    d = deliver(plan, task, run_info(task), sample_records())
    assert not d.committed and not d.succeeded() and all((task.path.parent / n).exists() for n in OUTPUTS)
    assert any("HEAD is detached" in n and "the files are untracked" in n for n in d.notes)


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
    d = deliver_now(task, sample_records(), RunConfig())
    assert not d.committed and any("a merge is in progress" in n for n in d.notes)
    assert all((task.path.parent / n).exists() for n in OUTPUTS)
    assert (root / "notes.md").read_text() == conflicted


def test_failing_hook_writes_files_and_reports_the_output(project):
    root, task = project
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'ruff: E501 line too long'\nexit 1\n")
    hook.chmod(0o755)
    head = git(root, "rev-parse", "HEAD")
    d = deliver_now(task, sample_records(), RunConfig())
    assert not d.committed and d.commit is None and not d.succeeded()
    assert git(root, "rev-parse", "HEAD") == head
    assert any("pre-commit hook rejected the commit" in n and "ruff: E501 line too long" in n for n in d.notes)
    assert all((task.path.parent / n).exists() for n in OUTPUTS)


def test_out_option_puts_the_report_beside_the_module(project):
    root, task = project
    out = root / "src" / "fast_relu.py"
    config = RunConfig(out=out)
    plan = plan_delivery(task, run_info(task), sample_records(), config)
    assert plan.kernel_path == out and plan.commit and plan.problems == [] and plan.writable
    assert plan.repo_root == root and (plan.trajectory, plan.turn, plan.speedup) == (0, 3, 1.83)
    assert plan.report.markdown == root / "src" / "fast_relu_kevin_report.md"
    d = deliver(plan, task, run_info(task), sample_records())
    assert d.committed
    assert sorted(git(root, "show", "--name-only", "--format=", "HEAD").split()) == [
        "src/fast_relu.py", "src/fast_relu_kevin_report.json", "src/fast_relu_kevin_report.md",
        "src/fast_relu_kevin_report.png"]
    assert "    from fast_relu import ModelNew" in out.read_text()
    assert not (task.path.parent / "my_relu_kevin_report.md").exists()


@pytest.mark.slow
def test_delivered_module_replaces_the_original_class(tmp_path, monkeypatch, build_cache):
    """The committed module compiles its kernel on import and computes what the original does."""
    import torch

    # In the shared build cache, so a warm CI cache skips the compile.
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(build_cache / "delivered-module"))
    task = write_task(tmp_path / "plain")
    deliver_now(task, sample_records(), RunConfig(commit=False))
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


def test_one_success_rule_for_headless_and_tui(project):
    root, task = project
    wanted = plan_delivery(task, run_info(task), sample_records(), RunConfig())
    assert Delivery(plan=wanted, outcome="committed", commit="0" * 40).succeeded()
    assert not Delivery(plan=wanted, outcome="written").succeeded()  # the commit was refused
    assert not Delivery(plan=wanted, outcome="declined").succeeded()
    no_commit = plan_delivery(task, run_info(task), sample_records(), RunConfig(commit=False))
    assert Delivery(plan=no_commit, outcome="written").succeeded()
    outside = wanted.model_copy(update={"repo_root": None})
    assert Delivery(plan=outside, outcome="written").succeeded()  # nothing to commit into


def test_the_claim_of_a_module_written_before_the_claim_line_existed(tmp_path):
    task = write_task(tmp_path)
    text = render_kernel_module(task, correct(0, 5, 2.38), run_info(task))
    (claim_line,) = [line for line in text.splitlines() if line.startswith("# kevin-opt-kernel: ")]
    older = tmp_path / "older_kevin.py"
    older.write_text(text.replace(claim_line + "\n", ""))
    claim = read_claim(older)
    assert (claim.speedup, claim.device, claim.device_name, claim.run_id, claim.turn) == (
        2.38, "cpu", "Test CPU 9000", "20250101-120000-my-relu-ab12", 5)
    assert read_claim(tmp_path / "my_relu.py") is None  # not a module kevin-opt wrote
    assert read_claim(tmp_path / "missing.py") is None
