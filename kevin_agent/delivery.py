"""Deliver a run: the kernel module and report next to the task, and the commit.

``plan_delivery`` says what would happen (the TUI shows it before asking); ``deliver`` does
it. Problems with the repository never raise: the files are written, nothing is committed,
and the reason goes into ``Delivery.notes``. A file with uncommitted changes is never
overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from . import gitops
from .config import RunConfig
from .errors import GitError
from .kernel_module import module_stem, render_kernel_module
from .report import ReportPaths, best_record, render_markdown, report_stem_paths, write_report
from .results import RunInfo, TurnRecord
from .task import Task

__all__ = ["Delivery", "DeliveryPlan", "best_record", "commit_message", "deliver", "plan_delivery"]


class DeliveryPlan(BaseModel):
    """What ``deliver`` would do, for a confirmation dialog."""

    kernel_path: Path
    report: ReportPaths
    commit: bool
    """A commit would be attempted (asked for, inside a repository, no problems found)."""
    branch: str | None
    message: str
    repo_root: Path | None
    problems: list[str] = Field(default_factory=list)
    """Why the commit would be refused (dirty target, detached HEAD, ...)."""
    speedup: float
    trajectory: int
    turn: int

    @property
    def paths(self) -> list[Path]:
        return [self.kernel_path, self.report.markdown, self.report.json, self.report.chart]


class Delivery(BaseModel):
    """What ``deliver`` did."""

    kernel_path: Path | None = None
    report: ReportPaths | None = None
    commit: str | None = None
    """Sha of the commit made, if any (record it in ``RunInfo.commit``)."""
    committed: bool = False
    branch: str | None = None
    notes: list[str] = Field(default_factory=list)
    """What was done, and why something was not."""
    in_repo: bool = False
    """The task lies in a git repository (outside one there is nothing to commit into)."""

    def succeeded(self, commit_wanted: bool) -> bool:
        """The headless contract's success: the kernel was written, and committed when a commit
        was wanted and possible."""
        return self.kernel_path is not None and (self.committed or not commit_wanted or not self.in_repo)


def commit_message(task: Task, info: RunInfo, best: TurnRecord) -> str:
    ev = best.eval
    speedup = best.speedup or 0.0
    speedups = f"{speedup:.2f}x eager"
    if ev is not None and ev.speedup_vs_compile is not None:
        speedups += f", {ev.speedup_vs_compile:.2f}x torch.compile"
    device = (ev.device_name if ev else "") or info.device_name or info.device
    return (
        f"kevin-opt: {task.name} {task.class_name} kernel, {speedup:.2f}x faster on {device}\n"
        "\n"
        f"Kevin-Run: {info.run_id}\n"
        f"Kevin-Model: {info.model}\n"
        f"Kevin-Speedup: {speedups}\n"
    )


def _kernel_path(task: Task, config: RunConfig) -> Path:
    if config.out is not None:
        return Path(config.out).expanduser().absolute()
    return task.path.parent / f"{module_stem(task)}.py"


def plan_delivery(task: Task, info: RunInfo, records: Sequence[TurnRecord], config: RunConfig) -> DeliveryPlan | None:
    """None when no verified kernel meets ``config.min_speedup``."""
    best = best_record(records)
    if best is None or best.speedup is None or best.speedup < config.min_speedup:
        return None
    kernel_path = _kernel_path(task, config)
    report = report_stem_paths(task.path.parent, task.name)
    repo = gitops.find_repo(task.path.parent)
    problems: list[str] = []
    if repo is None:
        if config.commit:
            problems.append(f"{task.path.parent} is not inside a git repository")
    else:
        paths = [kernel_path, report.markdown, report.json, report.chart]
        try:
            problems = gitops.committable_problems(repo, paths, branch=config.branch if config.commit else None)
        finally:
            repo.close()
        if not config.commit:
            # Without a commit only a dirty target matters: it would not be overwritten.
            problems = [p for p in problems if p.startswith("uncommitted changes")]
    return DeliveryPlan(
        kernel_path=kernel_path,
        report=report,
        commit=config.commit and repo is not None and not problems,
        branch=config.branch,
        message=commit_message(task, info, best),
        repo_root=Path(repo.working_tree_dir) if repo is not None and repo.working_tree_dir else None,
        problems=problems,
        speedup=best.speedup,
        trajectory=best.trajectory,
        turn=best.turn,
    )


def write_step_summary(markdown: str) -> bool:
    """Append to ``$GITHUB_STEP_SUMMARY`` when it is set (GitHub Actions)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return False
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(markdown.rstrip("\n") + "\n\n")
    return True


def deliver(task: Task, info: RunInfo, records: Sequence[TurnRecord], config: RunConfig) -> Delivery:
    """Write the kernel module and the report, then commit them unless told not to."""
    plan = plan_delivery(task, info, records, config)
    if plan is None:
        write_step_summary(render_markdown(info, records))
        best = best_record(records)
        why = (
            "no turn produced a verified kernel"
            if best is None
            else f"the best verified kernel reached {best.speedup:.2f}x, below --min-speedup {config.min_speedup:.2f}x"
        )
        return Delivery(notes=[f"{why}: nothing written, nothing committed"])

    best = best_record(records)
    assert best is not None  # plan_delivery found one
    repo = gitops.find_repo(task.path.parent)
    try:
        return _write_and_commit(task, info, records, config, plan, best, repo)
    finally:
        if repo is not None:
            repo.close()  # GitPython keeps `git cat-file` processes per Repo


def _write_and_commit(task: Task, info: RunInfo, records: Sequence[TurnRecord], config: RunConfig,
                      plan: DeliveryPlan, best: TurnRecord, repo) -> Delivery:
    keep: set[Path] = set()
    if repo is not None and not repo.bare:
        gitops.ensure_excluded(repo)
        keep = _dirty_targets(repo, plan.paths)

    delivery = Delivery(in_repo=repo is not None)
    notes = delivery.notes
    if plan.kernel_path not in keep:
        plan.kernel_path.parent.mkdir(parents=True, exist_ok=True)
        module = render_kernel_module(task, best, info, stem=plan.kernel_path.stem)
        plan.kernel_path.write_text(module, encoding="utf-8")
        delivery.kernel_path = plan.kernel_path
    if not keep.intersection((plan.report.markdown, plan.report.json, plan.report.chart)):
        delivery.report = write_report(info, records, plan.report.markdown.parent, task.name)
    write_step_summary(render_markdown(info, records))

    written = [delivery.kernel_path, *(delivery.report.model_dump().values() if delivery.report else [])]
    if any(written):
        notes.append("wrote " + ", ".join(str(p) for p in written if p))
    if keep:
        notes.append("not overwritten (uncommitted changes): " + ", ".join(str(p) for p in sorted(keep)))
    if not config.commit:
        notes.append("not committed (--no-commit)")
    if plan.problems:
        notes.append("not committed: " + "; ".join(plan.problems))
    if not plan.commit or repo is None:
        return delivery
    try:
        result = gitops.commit_paths(repo, plan.paths, plan.message, branch=config.branch)
    except GitError as exc:
        notes.append(f"not committed: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
        return delivery
    delivery.commit, delivery.committed, delivery.branch = result.sha, True, result.branch
    notes.append(f"committed {result.sha[:12]} on {result.branch}: {', '.join(result.paths)}")
    return delivery


def _dirty_targets(repo, paths: Sequence[Path]) -> set[Path]:
    """Targets inside the repository with uncommitted changes: never overwritten."""
    root = Path(repo.working_tree_dir).resolve()
    inside = [p for p in paths if p.resolve().is_relative_to(root)]
    rels, _ = gitops.relpaths(repo, inside)
    dirty = set(gitops.dirty_paths(repo, rels))
    return {p for p, rel in zip(inside, rels) if rel in dirty}
