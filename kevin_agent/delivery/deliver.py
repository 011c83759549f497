"""Carrying a delivery plan out: the kernel module and its report, written and committed
together or not at all, and what was done, in words.

The kernel delivered is the run's winner (``confirmation.winner``): the confirmed one where the
run's best kernels were confirmed, and every number written comes from its confirmation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..results.winner import Winner, winner
from ..errors import GitError, KevinError
from ..model.marks import read_envelope
from ..results import RunInfo, TurnRecord
from ..results.records import E2EResult
from ..task import Task
from . import gitops
from .hub_layer import layer_folder, write_layer
from .kernel_module import check_shapes, render_kernel_module
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
    e2e: E2EResult | None = None
    """The whole model with and without the kernel (a task kevin-opt extract wrote)."""

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


WholeModel = Callable[[Path, Path], E2EResult]
"""Runs ``model_file`` with and without the kernel module at ``kernel_path`` (``delivery.e2e``)."""


def deliver(plan: DeliveryPlan, task: Task, info: RunInfo, records: Sequence[TurnRecord], *,
            declined: bool = False, whole_model: WholeModel | None = None) -> Delivery:
    """Carry the plan out with the records it was made from: write the module and its report
    (all or none), then commit exactly those files. ``declined``: the person said no; nothing
    is touched. ``whole_model``: where the plan names the model the task came from, it is run
    with the written kernel first; the report says what it found, and a model whose outputs
    change, that is slower (without --accept-slower) or that cannot be run is not committed."""
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
    with gitops.opened(plan.kernel_path.parent) as repo:
        # The plan may have waited on a question: a target edited since then is not overwritten.
        now = gitops.path_states(repo, plan.paths)
        changed = [str(p) for p in plan.paths if now[p] != plan.states[p]]
        if changed:
            return Delivery(plan=plan, outcome="refused", notes=[
                f"not written: {', '.join(changed)} changed since the plan was made; deliver again"])
        delivery, held = _write(plan, task, info, records, best, whole_model)
        if held is not None:
            _left_uncommitted(delivery, held)
        elif plan.commit and repo is not None:
            _commit(delivery, repo)
        elif not plan.commit_wanted:
            _left_uncommitted(delivery, "--no-commit")
        else:
            _left_uncommitted(delivery, "; ".join(plan.problems))
        return delivery


def _write(plan: DeliveryPlan, task: Task, info: RunInfo, records: Sequence[TurnRecord], best: Winner,
           whole_model: WholeModel | None) -> tuple[Delivery, str | None]:
    """Write the module, run the whole model with it where the plan says so, then the report (once,
    with what the whole model showed); returns the delivery and why its commit is held back."""
    plan.kernel_path.parent.mkdir(parents=True, exist_ok=True)
    module = render_kernel_module(task, best, info, stem=plan.kernel_path.stem, family=check_shapes(task, best, info))
    plan.kernel_path.write_text(module, encoding="utf-8")
    env = read_envelope(plan.kernel_path)
    layer = write_layer(plan.kernel_path, env) if env is not None else []
    e2e, said, held = (_whole_model(plan, whole_model) if plan.model_file is not None and whole_model is not None
                       else (None, None, None))
    write_report_files(info, records, plan.report, e2e=e2e)
    delivery = Delivery(plan=plan, outcome="written", written=[*plan.paths, *layer], e2e=e2e)
    report = extensions([plan.shown(p) for p in plan.paths[1:]])
    delivery.notes.append(f"wrote {plan.shown(plan.kernel_path)} and {report}")
    if layer:
        delivery.notes.append(f"to use it through kernels: the {env.layer_name} layer repository "
                              f"{plan.shown(layer_folder(plan.kernel_path))}/, its mapping in the module's header")
    if plan.replaces is not None:
        delivery.notes.append(f"replaced {plan.kernel_path.name}, which claimed {plan.replaces.describe()}")
    if plan.flagged is not None:
        delivery.notes.append(f"delivered although flagged: {plan.flagged}")
    if said is not None:
        delivery.notes.append(said)
    return delivery, held


def _whole_model(plan: DeliveryPlan, whole_model: WholeModel) -> tuple[E2EResult | None, str, str | None]:
    """Run the whole model with the written kernel: what it found, the note that says so, and why
    the commit is held back (None: it is not)."""
    try:
        result = whole_model(plan.model_file, plan.kernel_path)
    except KevinError as exc:
        return (None, f"the whole model could not be run with the kernel: {exc.message}",
                "the whole model was not checked with it (pass --no-e2e to commit without that check)")
    said = (f"whole model {plan.shown(plan.model_file)}: {result.speedup:.2f}x with the kernel, "
            + ("outputs match" if result.outputs_match else f"outputs DIFFER ({result.mismatch})"))
    if not result.outputs_match:
        return result, said, "the whole model's outputs differ with the kernel installed"
    if result.slower and not plan.accept_slower:
        return result, said, (f"the whole model is slower with it ({result.speedup:.2f}x); pass --accept-slower "
                              "to commit it anyway")
    return result, said, None


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
        result = gitops.commit_paths(repo, delivery.written, plan.message, branch=plan.branch)
    except GitError as exc:
        _left_uncommitted(delivery, exc.message + (f" ({exc.hint})" if exc.hint else ""))
        return
    delivery.outcome, delivery.commit, delivery.branch = "committed", result.sha, result.branch
    delivery.notes.append(f"committed {result.sha[:12]} on {result.branch}: {', '.join(result.paths)}")
