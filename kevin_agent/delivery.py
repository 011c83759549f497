"""Deliver a run: the kernel module and its report, written and committed together or not at all.

``plan_delivery`` looks at the targets and the repository once and says what delivering would
do; that one ``DeliveryPlan`` is what the TUI's question, stderr and the JSON summary show, and
what ``deliver`` carries out. Problems never raise; they are in the plan or the ``Delivery``.

The kernel delivered is the run's winner (``confirmation.winner``): the confirmed one where the
run's best kernels were confirmed, and every number written comes from its confirmation.

What is never overwritten: a file with uncommitted changes (a person's edit). What is only
overwritten with ``--replace`` (or a yes in the TUI): a file git could not restore (untracked,
or outside a repository), and a module that claims a better kernel on the same device. What is
only delivered with ``--accept-flagged`` (or a yes in the TUI): a winner flagged as faster than the
physical floor allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from . import gitops
from .config import RunConfig
from .confirmation import Winner, current, winner
from .errors import GitError
from .formatting import fmt_confirmed
from .kernel_module import KernelClaim, kernel_claim, module_stem, read_claim, render_kernel_module
from .report import ReportPaths, report_stem_paths, write_report_files
from .results import RunInfo, TurnRecord
from .task import Task

__all__ = ["Delivery", "DeliveryPlan", "commit_message", "deliver", "plan_delivery"]

Outcome = Literal["committed", "written", "declined", "refused", "nothing"]


class DeliveryPlan(BaseModel):
    """What delivering a run's best kernel would do, worked out once."""

    nothing: str | None = None
    """Why there is nothing to deliver (no verified kernel, or none reaches --min-speedup)."""
    kernel: KernelClaim | None = None
    """The kernel to deliver: its speedup, device, run and turn."""
    kernel_path: Path | None = None
    report: ReportPaths | None = None
    states: dict[Path, gitops.TargetState] = Field(default_factory=dict)
    """What each target path holds now."""
    commit_wanted: bool = True
    """Not --no-commit."""
    commit: bool = False
    """A commit follows the writing (wanted, inside a repository, no problem found)."""
    branch: str | None = None
    message: str = ""
    repo_root: Path | None = None
    problems: list[str] = Field(default_factory=list)
    """Why there will be no commit although one is wanted; the files are still written."""
    blocked: list[str] = Field(default_factory=list)
    """Why nothing can be written: a target holds uncommitted changes."""
    needs_replace: list[str] = Field(default_factory=list)
    """What only --replace (or a yes) allows: files git could not restore, a better kernel."""
    replace: bool = False
    """--replace was given, or the person said yes to what ``needs_replace`` lists."""
    replaces: KernelClaim | None = None
    """The kernel the existing module claims, when it claims a better one on the same device."""
    flagged: str | None = None
    """Why the kernel is flagged as implausible (the flag naming the physical floor), or None."""
    accept_flagged: bool = False
    """--accept-flagged was given, or the person said yes to delivering a flagged kernel."""

    @property
    def paths(self) -> list[Path]:
        if self.kernel_path is None or self.report is None:
            return []
        return [self.kernel_path, self.report.markdown, self.report.json, self.report.chart]

    @property
    def trajectory(self) -> int | None:
        return self.kernel.trajectory if self.kernel else None

    @property
    def turn(self) -> int | None:
        return self.kernel.turn if self.kernel else None

    @property
    def speedup(self) -> float | None:
        return self.kernel.speedup if self.kernel else None

    @property
    def writable(self) -> bool:
        return (self.kernel is not None and not self.blocked and (self.replace or not self.needs_replace)
                and (self.accept_flagged or self.flagged is None))

    def allowing_replace(self) -> DeliveryPlan:
        return self.model_copy(update={"replace": True})

    def consented(self) -> DeliveryPlan:
        """The plan once the person said yes to what it asks: replacing files, a flagged kernel."""
        return self.model_copy(update={"replace": self.replace or bool(self.needs_replace),
                                       "accept_flagged": self.accept_flagged or self.flagged is not None})

    def question(self) -> tuple[str, str]:
        """The TUI's question about this plan and its yes button."""
        verb = " and commit" if self.commit else ""
        if self.flagged is not None and not self.accept_flagged:
            also = " and replace the existing files" if self.needs_replace and not self.replace else ""
            return f"deliver a kernel flagged as implausible{also}?", "Deliver flagged" + verb
        if self.needs_replace and not self.replace:
            return "replace the existing files?", "Replace" + verb
        return ("commit the best kernel?", "Commit") if self.commit else ("write the best kernel?", "Write")

    def why_not_written(self) -> str:
        """Why ``deliver`` would write nothing (empty when it would write)."""
        if self.nothing:
            return self.nothing
        if self.blocked:
            return "; ".join(self.blocked)
        if self.flagged is not None and not self.accept_flagged:
            return f"the best kernel is flagged: {self.flagged}. Pass --accept-flagged to deliver it anyway"
        if self.needs_replace and not self.replace:
            return "; ".join(self.needs_replace) + ": pass --replace to overwrite"
        return ""

    def commit_line(self) -> str:
        if self.commit:
            where = f"on new branch {self.branch}" if self.branch else "on the current branch"
            return f"{where} in {self.repo_root}"
        if not self.commit_wanted:
            return "no (--no-commit): the files are written only"
        return "no: " + "; ".join(self.problems)

    def describe(self) -> list[tuple[str, str]]:
        """The plan in words, as (label, text) lines: the TUI's dialog and stderr both print these."""
        if self.kernel is None:
            return [("nothing to deliver", self.nothing or "")]
        k = self.kernel
        speedup = fmt_confirmed(k.confirmation) + " confirmed" if k.confirmation is not None else f"{k.speedup:.2f}x"
        lines = [("best kernel", f"trajectory {k.trajectory} turn {k.turn}, {speedup} on {k.device_name}")]
        if self.flagged is not None:
            lines.append(("flagged" if self.accept_flagged else "needs --accept-flagged", self.flagged))
        lines += [("writes" if i == 0 else "", f"{p} ({_STATE_WORDS[self.states.get(p, 'new')]})")
                  for i, p in enumerate(self.paths)]
        if self.replaces is not None:
            lines.append(("replaces", f"{self.kernel_path.name}, which claims {self.replaces.describe()}"))
        lines += [("refused", b) for b in self.blocked]
        lines += [("needs --replace" if not self.replace else "replacing", n) for n in self.needs_replace]
        lines.append(("commit", self.commit_line()))
        if self.commit:
            lines.append(("message", self.message.strip().splitlines()[0]))
        return lines


_STATE_WORDS = {"new": "new file", "clean": "replaces the committed version", "modified": "has uncommitted changes",
                "untracked": "exists, not tracked by git"}


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


def commit_message(task: Task, info: RunInfo, best: Winner | TurnRecord) -> str:
    best = best if isinstance(best, Winner) else Winner(best)
    ev = best.record.eval
    speedup = best.speedup
    speedups = f"{speedup:.2f}x eager"
    if best.headline is not None:
        low, high = best.headline.ci95
        speedups += f" (95% interval {low:.2f}-{high:.2f}x, {best.headline.runs} rounds head to head)"
    if best.speedup_vs_compile is not None:
        speedups += f", {best.speedup_vs_compile:.2f}x torch.compile"
    device = (ev.device_name if ev else "") or info.device_name or info.device
    trailers = f"Kevin-Run: {info.run_id}\nKevin-Model: {info.model}\nKevin-Speedup: {speedups}\n"
    if best.flag is not None:
        trailers += f"Kevin-Flagged: {best.flag}\n"
    return f"kevin-opt: {task.name} {task.class_name} kernel, {speedup:.2f}x faster on {device}\n\n{trailers}"


def target_paths(task: Task, config: RunConfig) -> tuple[Path, ReportPaths]:
    """The kernel module (``--out``, or ``<task>_kevin.py`` beside the task) and its report
    beside it: ``<task>_kevin_report.*``, or ``<out stem>_kevin_report.*`` with ``--out``."""
    if config.out is not None:
        kernel = Path(config.out).expanduser().absolute()
        stem = kernel.stem.removesuffix("_kevin")
    else:
        kernel = task.path.parent / f"{module_stem(task)}.py"
        stem = task.name
    return kernel, report_stem_paths(kernel.parent, stem)


def nothing_to_deliver(info: RunInfo, records: Sequence[TurnRecord], min_speedup: float) -> str | None:
    best = winner(info, records)
    if best is None:
        confirmation = current(info, records)
        if confirmation is not None and confirmation.kernels:
            return "no kernel survived the confirmation: each was dropped on a second look"
        return "no turn produced a verified kernel"
    if best.speedup < min_speedup:
        what = "confirmed at" if best.confirmed is not None else "reached"
        return f"the best verified kernel {what} {best.speedup:.2f}x, below --min-speedup {min_speedup:.2f}x"
    return None


def plan_delivery(task: Task, info: RunInfo, records: Sequence[TurnRecord], config: RunConfig, *,
                  replace: bool = False, accept_flagged: bool = False) -> DeliveryPlan:
    """What delivering the run's winner (``confirmation.winner``) would do; ``deliver`` takes the
    same records."""
    nothing = nothing_to_deliver(info, records, config.min_speedup)
    if nothing is not None:
        return DeliveryPlan(nothing=nothing, commit_wanted=config.commit)
    best = winner(info, records)
    kernel_path, report = target_paths(task, config)
    plan = DeliveryPlan(kernel=kernel_claim(best, info), kernel_path=kernel_path, report=report,
                        commit_wanted=config.commit, branch=config.branch, message=commit_message(task, info, best),
                        replace=replace, flagged=best.flag, accept_flagged=accept_flagged)
    repo = gitops.find_repo(kernel_path.parent)
    try:
        plan.states = gitops.path_states(repo, plan.paths)
        if repo is not None:
            plan.repo_root = Path(repo.working_tree_dir) if repo.working_tree_dir else None
            if config.commit:
                plan.problems = gitops.commit_problems(repo, plan.paths, branch=config.branch)
        elif config.commit:
            plan.problems = [f"{kernel_path.parent} is not inside a git repository"]
    finally:
        if repo is not None:
            repo.close()  # GitPython keeps `git cat-file` processes per Repo
    _judge_targets(plan)
    plan.commit = config.commit and plan.repo_root is not None and not plan.problems
    return plan


def _judge_targets(plan: DeliveryPlan) -> None:
    modified = [p for p, s in plan.states.items() if s == "modified"]
    if modified:
        plan.blocked.append("uncommitted changes in " + ", ".join(map(str, modified))
                            + ": commit, stash or discard them first (they are never overwritten)")
    untracked = [p for p, s in plan.states.items() if s == "untracked"]
    if untracked:
        plan.needs_replace.append(", ".join(map(str, untracked)) + " already exist and git could not restore them")
    existing = read_claim(plan.kernel_path) if plan.states.get(plan.kernel_path) != "new" else None
    k = plan.kernel
    if existing is not None and existing.same_device(k.device, k.device_name) and existing.speedup > k.speedup:
        plan.replaces = existing
        plan.needs_replace.append(f"{plan.kernel_path} claims {existing.describe()}, better than this run's "
                                  f"{k.speedup:.2f}x")


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
    delivery.notes.append("wrote " + ", ".join(map(str, plan.paths)))
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
