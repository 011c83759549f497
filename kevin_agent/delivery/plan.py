"""The delivery plan: what delivering a run's best kernel would do, worked out once.

``plan_delivery`` looks at the targets and the repository once; that one ``DeliveryPlan`` is
what the TUI's question, stderr and the JSON summary show, and what ``deliver`` carries out.
``refusals_ahead`` is the part of it known before the first turn, said then so that nobody
waits a whole run to hear it. Problems never raise; they are in the plan.

What is never overwritten: a file with uncommitted changes (a person's edit). What is only
overwritten with ``--replace`` (or a yes in the TUI): a file git could not restore (untracked,
or outside a repository), and a module that claims a better kernel on the same device. What is
only delivered with ``--accept-flagged`` (or a yes in the TUI): a winner flagged as faster than the
physical floor allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from ..config import RunConfig
from ..results.winner import Winner, current, winner
from ..formatting import fmt_confirmed
from ..model.marks import extracted_from
from ..results import RunInfo, TurnRecord
from ..task import Task
from . import gitops
from .kernel_module import KernelClaim, kernel_claim, module_stem, read_claim
from .report import ReportPaths, report_stem_paths

__all__ = ["DeliveryPlan", "commit_message", "plan_delivery", "refusals_ahead", "target_paths"]


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
    model_file: Path | None = None
    """The model a task kevin-opt extract wrote came from: the whole model runs with and without the
    kernel before the commit (None: not an extracted task, its model is not beside it, or --no-e2e)."""
    accept_slower: bool = False
    """--accept-slower: commit even when the whole model is slower with the kernel."""

    @property
    def paths(self) -> list[Path]:
        if self.kernel_path is None or self.report is None:
            return []
        return _targets(self.kernel_path, self.report)

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

    def shown(self, path: Path) -> str:
        """A target as the person reads it: relative to the repository (or else the working
        directory) it is in."""
        return shown_path(path, self.repo_root)

    def describe(self) -> list[tuple[str, str]]:
        """The plan in words, as (label, text) lines: the TUI's dialog and the JSON summary show
        these. Each target is named once, with what happens to it; report files that fare alike
        share a line."""
        if self.kernel is None:
            return [("nothing to deliver", self.nothing or "")]
        k = self.kernel
        speedup = fmt_confirmed(k.confirmation) + " confirmed" if k.confirmation is not None else f"{k.speedup:.2f}x"
        lines = [("best kernel", f"trajectory {k.trajectory} turn {k.turn}, {speedup} on {k.device_name}")]
        if self.flagged is not None:
            lines.append(("flagged" if self.accept_flagged else "needs --accept-flagged", self.flagged))
        lines.append(("module", f"{self.shown(self.kernel_path)}: {self._fate(self.kernel_path)}"))
        report = self.paths[1:]
        for i, fate in enumerate(dict.fromkeys(self._fate(p) for p in report)):
            alike = [self.shown(p) for p in report if self._fate(p) == fate]
            lines.append(("report" if i == 0 else "", f"{extensions(alike)}: {fate}"))
        if self.model_file is not None:
            lines.append(("whole model", f"{self.shown(self.model_file)} runs with and without it before the commit"
                          + ("" if self.accept_slower else "; slower, or other outputs, and it is not committed")))
        lines.append(("commit", self.commit_line()))
        if self.commit:
            lines.append(("message", self.message.strip().splitlines()[0]))
        return lines

    def _fate(self, path: Path) -> str:
        state = self.states.get(path, "new")
        text = _STATE_WORDS["outside" if state == "untracked" and self.repo_root is None else state]
        if path == self.kernel_path and self.replaces is not None:
            claim = self.replaces
            where = f" (run {claim.run_id}, turn {claim.turn})" if claim.run_id and claim.turn is not None else ""
            text += f"; it claims {claim.speedup:.2f}x{where}, better than this run's {self.kernel.speedup:.2f}x"
        if state == "untracked" or (path == self.kernel_path and self.replaces is not None):
            text += ": replaced" if self.replace else ": needs --replace or a yes"
        return text


_STATE_WORDS = {"new": "new", "clean": "replaces what is committed",
                "modified": "has uncommitted changes: nothing is written (they are never overwritten)",
                "untracked": "exists, untracked", "outside": "exists, in no git repository"}


def extensions(paths: Sequence[str]) -> str:
    """``a/x_report.md, .json, .png``: files that differ only in their extension, named once."""
    stem = paths[0].rsplit(".", 1)[0]
    if all(p.rsplit(".", 1)[0] == stem for p in paths):
        return ", ".join([paths[0], *("." + p.rsplit(".", 1)[1] for p in paths[1:])])
    return ", ".join(paths)


def shown_path(path: Path, repo_root: Path | None = None) -> str:
    """``path`` relative to ``repo_root`` when inside it, else to the working directory when
    inside that, else as it is."""
    path = Path(path).absolute()
    for base in (repo_root, Path.cwd()):
        if base is not None and path.is_relative_to(Path(base).absolute()):
            return path.relative_to(Path(base).absolute()).as_posix()
    return str(path)


def _listed(paths: Sequence[str]) -> str:
    """Paths in a phrase; those in the first one's folder by their names only."""
    folder = paths[0].rpartition("/")[0]
    names = [paths[0], *(p.rpartition("/")[2] if p.rpartition("/")[0] == folder else p for p in paths[1:])]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _untracked_words(paths: Sequence[str], in_repo: bool) -> str:
    verb = "exists and is" if len(paths) == 1 else "exist and are"
    return f"{_listed(paths)} {verb} {'not tracked by git' if in_repo else 'in no git repository'}"


def _modified_words(paths: Sequence[str]) -> str:
    return (f"uncommitted changes in {_listed(paths)}: commit, stash or discard them first "
            "(they are never overwritten)")


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


def _targets(kernel_path: Path, report: ReportPaths) -> list[Path]:
    """Every file a delivery writes: the module, then its report."""
    return [kernel_path, report.markdown, report.json, report.chart]


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


def extracted_model(task: Task) -> Path | None:
    """The model file beside a task kevin-opt extract wrote, when it is there."""
    meta = extracted_from(task.source)
    if meta is None:
        return None
    model = task.path.parent / meta.model_file
    return model if model.is_file() else None


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
                        replace=replace, flagged=best.flag, accept_flagged=accept_flagged,
                        model_file=extracted_model(task) if config.e2e else None, accept_slower=config.accept_slower)
    with gitops.opened(kernel_path.parent) as repo:
        plan.states = gitops.path_states(repo, plan.paths)
        if repo is not None:
            plan.repo_root = Path(repo.working_tree_dir) if repo.working_tree_dir else None
            if config.commit:
                plan.problems = gitops.commit_problems(repo, plan.paths, branch=config.branch)
        elif config.commit:
            plan.problems = [f"{kernel_path.parent} is not inside a git repository"]
    _judge_targets(plan)
    plan.commit = config.commit and plan.repo_root is not None and not plan.problems
    return plan


def _judge_targets(plan: DeliveryPlan) -> None:
    modified = [plan.shown(p) for p, s in plan.states.items() if s == "modified"]
    if modified:
        plan.blocked.append(_modified_words(modified))
    untracked = [plan.shown(p) for p, s in plan.states.items() if s == "untracked"]
    if untracked:
        plan.needs_replace.append(_untracked_words(untracked, plan.repo_root is not None))
    existing = read_claim(plan.kernel_path) if plan.states.get(plan.kernel_path) != "new" else None
    k = plan.kernel
    if existing is not None and existing.same_device(k.device, k.device_name) and existing.speedup > k.speedup:
        plan.replaces = existing
        plan.needs_replace.append(f"{plan.shown(plan.kernel_path)} claims {existing.describe()}, better than this "
                                  f"run's {k.speedup:.2f}x")


def refusals_ahead(task: Task, config: RunConfig, *, device: str, device_name: str,
                   replace: bool = False) -> list[str]:
    """What the delivery at the end would refuse, as far as it is known before the first turn,
    each with what to do: targets with uncommitted changes (never overwritten), and without
    --replace, targets git could not restore and a module that claims a kernel on this device
    (a kernel of this run replaces it only if it is faster)."""
    kernel_path, report = target_paths(task, config)
    paths = _targets(kernel_path, report)
    with gitops.opened(kernel_path.parent) as repo:
        states = gitops.path_states(repo, paths)
        root = Path(repo.working_tree_dir) if repo is not None and repo.working_tree_dir else None
    kept = "the run goes on, and its kernels stay in its run directory"
    said: list[str] = []
    if modified := [shown_path(p, root) for p, s in states.items() if s == "modified"]:
        said.append(f"{_modified_words(modified)}; until then {kept}")
    if replace:
        return said
    if untracked := [shown_path(p, root) for p, s in states.items() if s == "untracked"]:
        said.append(f"{_untracked_words(untracked, root is not None)}: pass --replace to overwrite; without it {kept}")
    claim = read_claim(kernel_path) if states[kernel_path] != "new" else None
    if claim is not None and claim.same_device(device, device_name):
        said.append(f"{shown_path(kernel_path, root)} claims {claim.describe()}: a kernel of this run replaces "
                    "it only if it is faster, or with --replace")
    return said
