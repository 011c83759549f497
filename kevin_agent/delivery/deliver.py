"""Carrying a delivery plan out: the kernel module and its report, written and committed
together or not at all, and what was done, in words.

The kernel delivered is the run's winner (``confirmation.winner``): the confirmed one where the
run's best kernels were confirmed, and every number written comes from its confirmation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..engine.confirmation import Winner, winner
from ..errors import GitError
from ..results import RunInfo, TurnRecord
from ..task import Task
from . import gitops
from .kernel_module import render_kernel_module
from .plan import DeliveryPlan, extensions
from .report import ReportPaths, write_report_files

__all__ = ["Delivery", "deliver"]

Outcome = Literal["committed", "written", "declined", "refused", "nothing"]


class Delivery(BaseModel):
    """What ``deliver`` did with a plan."""

    plan: DeliveryPlan
    outcome: Outcome
    written: list[Path] = Field(default_factory=list)
    commit: str | None = None
    """Sha of the commit made, if any (recorded in ``RunInfo.commit``)."""
    branch: str | None = None
    notes: list[str] = Field(default_factory=list)
    """What was done, and why something was not, one sentence each."""

    @property
    def committed(self) -> bool:
        return self.outcome == "committed"

    @property
    def kernel_path(self) -> Path | None:
        return self.plan.kernel_path if self.written else None

    @property
    def report(self) -> ReportPaths | None:
        return self.plan.report if self.written else None

    def succeeded(self) -> bool:
        """The one success rule (headless and TUI): the kernel and its report were written, and
        committed unless --no-commit or there is no repository to commit into."""
        if self.outcome == "committed":
            return True
        return self.outcome == "written" and (not self.plan.commit_wanted or self.plan.repo_root is None)

    def headline(self) -> str:
        """One line for the TUI's header, run.json and `history`."""
        if self.outcome == "committed":
            return f"committed {self.commit[:10]} on {self.branch}"
        if self.outcome == "written":
            if not self.plan.commit_wanted:
                return "written, not committed (--no-commit)"
            if self.plan.repo_root is None:
                return "written (not in a git repository)"
            return "written, not committed"
        if self.outcome == "declined":
            return "not written (declined)"
        if self.outcome == "refused":
            return "not written (refused)"
        return "nothing to deliver"


def deliver(plan: DeliveryPlan, task: Task, info: RunInfo, records: Sequence[TurnRecord], *,
            declined: bool = False) -> Delivery:
    """Carry the plan out with the records it was made from: write the module and its report
    (all or none), then commit exactly those files. ``declined``: the person said no; nothing
    is touched."""
    if plan.kernel is None:
        return Delivery(plan=plan, outcome="nothing", notes=[f"{plan.nothing}: nothing written, nothing committed"])
    if declined:
        return Delivery(plan=plan, outcome="declined", notes=[
            "declined: nothing written, nothing committed; the kernel stays in the run directory"])
    if not plan.writable:
        return Delivery(plan=plan, outcome="refused", notes=[f"not written: {plan.why_not_written()}"])
    best = winner(info, records)
    if best is None or (best.trajectory, best.turn) != (plan.kernel.trajectory, plan.kernel.turn):
        raise ValueError("deliver() needs the records the plan was made from")
    repo = gitops.find_repo(plan.kernel_path.parent)
    try:
        # The plan may have waited on a question: a target edited since then is not overwritten.
        now = gitops.path_states(repo, plan.paths)
        changed = [str(p) for p in plan.paths if now[p] != plan.states[p]]
        if changed:
            return Delivery(plan=plan, outcome="refused", notes=[
                f"not written: {', '.join(changed)} changed since the plan was made; deliver again"])
        delivery = _write(plan, task, info, records, best)
        if plan.commit and repo is not None:
            _commit(delivery, repo)
        elif not plan.commit_wanted:
            _left_uncommitted(delivery, "--no-commit")
        else:
            _left_uncommitted(delivery, "; ".join(plan.problems))
        return delivery
    finally:
        if repo is not None:
            repo.close()


def _write(plan: DeliveryPlan, task: Task, info: RunInfo, records: Sequence[TurnRecord],
           best: Winner) -> Delivery:
    plan.kernel_path.parent.mkdir(parents=True, exist_ok=True)
    plan.kernel_path.write_text(render_kernel_module(task, best, info, stem=plan.kernel_path.stem), encoding="utf-8")
    write_report_files(info, records, plan.report)
    delivery = Delivery(plan=plan, outcome="written", written=plan.paths)
    report = extensions([plan.shown(p) for p in plan.paths[1:]])
    delivery.notes.append(f"wrote {plan.shown(plan.kernel_path)} and {report}")
    if plan.replaces is not None:
        delivery.notes.append(f"replaced {plan.kernel_path.name}, which claimed {plan.replaces.describe()}")
    if plan.flagged is not None:
        delivery.notes.append(f"delivered although flagged: {plan.flagged}")
    return delivery


def _left_uncommitted(delivery: Delivery, why: str) -> None:
    """Say that the written files are not committed, why, and which of them git does not track."""
    plan = delivery.plan
    fresh = [p.name for p in plan.paths if plan.states[p] in ("new", "untracked")]
    if plan.repo_root is None:
        state = ""
    elif len(fresh) == len(plan.paths):
        state = "; the files are untracked"
    elif fresh:
        state = f"; {', '.join(fresh)} untracked, the others modified"
    else:
        state = "; the files are modified, not committed"
    delivery.notes.append(f"not committed: {why}{state}")


def _commit(delivery: Delivery, repo) -> None:
    plan = delivery.plan
    try:
        result = gitops.commit_paths(repo, plan.paths, plan.message, branch=plan.branch)
    except GitError as exc:
        _left_uncommitted(delivery, exc.message + (f" ({exc.hint})" if exc.hint else ""))
        return
    delivery.outcome, delivery.commit, delivery.branch = "committed", result.sha, result.branch
    delivery.notes.append(f"committed {result.sha[:12]} on {result.branch}: {', '.join(result.paths)}")
