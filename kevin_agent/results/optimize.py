"""``optimize.json``: one ``kevin-opt optimize`` of a whole model, in the run store beside its runs.

It holds the plan (the groups chosen, in order), each group's state and the run that serves it,
the whole model measured with every kernel kept, and the commit. It is written after every
change of state, so an interrupted optimize resumes from it: finished module runs are kept, the
interrupted one resumes from its last finished turn, and the rest follow. The same record is the
``--json`` summary, the model report's data and what a front end shows (``protocols.OptimizeProgress``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .confirmation import ConfirmedSpeedup
from .records import E2EResult, Record, schema_field

OPTIMIZE_SCHEMA = 3
"""The layout of ``optimize.json``: 2 added how the model file was kept (``model_written``,
``original``, ``original_commit``) and the whole model's ``measured_interval``; 3 added the modules
the person named (``named_modules``). A record of an earlier layout reads as one without them."""
OPTIMIZE_SCHEMAS_READ = frozenset({1, 2, 3})

GroupState = Literal["queued", "extracting", "running", "verified", "kept", "dropped", "skipped", "failed",
                     "no kernel"]
"""Where a group is: ``queued``; ``extracting`` its task; ``running`` its run; ``verified`` (a kernel
confirmed and written to the optimize's folder); after the whole model ran with them, ``kept`` or
``dropped`` (with why); ``skipped`` (it cannot be captured as a task), ``failed`` (its run stopped
on an error) or ``no kernel`` (its run verified none), each with why."""

FINISHED = frozenset({"verified", "kept", "dropped", "skipped", "failed", "no kernel"})
"""States a resumed optimize does not run again."""


class GroupRun(BaseModel):
    """One chosen group: what the plan said of it, and how its run went."""

    name: str
    """As the profile names it: ``layers.*.norm x3``."""
    members: list[str]
    class_name: str
    share: float
    """Its members' summed share of the forward (the profile's)."""
    own_saving: float
    """What a kernel could save of the forward, at its floor."""
    state: GroupState = "queued"
    why: str = ""
    """Why it was skipped, failed or dropped."""
    task_file: str | None = None
    """The task extracted for it (in the optimize's folder)."""
    run_id: str | None = None
    turn: int = 0
    """Turns finished so far in its run."""
    turns: int = 0
    speedup: float | None = None
    """Its kernel's confirmed speedup on its task (the median), or the turn's own where unconfirmed."""
    confirmation: ConfirmedSpeedup | None = None
    kernel_file: str | None = None
    """The kernel module its run wrote (in the optimize's folder), then the one beside the model."""
    signatures: list[str] = Field(default_factory=list)
    """The input signatures its kernel was verified at: the guard runs it at these alone."""
    contribution: float | None = None
    """The whole model's speedup owed to it: with all kept kernels over all but this one."""
    contribution_interval: list[float] | None = None
    kernel_calls: float = 0.0
    fallback_calls: float = 0.0
    """Calls of its members that ran the original forward (a signature outside its envelope)."""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def state_words(self) -> str:
        """``running turn 2/3``, ``verified 3.20x``, ``dropped: why``: the state as a screen shows it."""
        if self.state == "running":
            return f"running turn {min(self.turn + 1, self.turns or self.turn + 1)}/{self.turns or '?'}"
        if self.state in ("verified", "kept") and self.speedup is not None:
            return f"{self.state} {self.speedup:.2f}x"
        return f"{self.state}: {self.why}" if self.why and self.why != self.state else self.state


OptimizeStatus = Literal["running", "interrupted", "nothing", "delivered", "written", "refused", "failed"]


class OptimizeRecord(Record):
    """One optimize of a model: its plan, its module runs, the whole model with their kernels, the commit."""

    schema_: int = schema_field(OPTIMIZE_SCHEMA)
    kind: Literal["optimize"] = "optimize"
    optimize_id: str
    model_file: str
    """As given (absolute)."""
    created_at: str
    updated_at: str = ""
    status: OptimizeStatus = "running"
    why: str = ""
    """Why nothing was delivered, or what stopped it."""
    device: str
    device_name: str = ""
    config: dict = Field(default_factory=dict)
    """The run settings every module run gets (secrets left out)."""
    modules: int
    min_saving: float
    named_modules: list[str] = Field(default_factory=list)
    """The modules named with ``--module``, in order: the plan is their groups, and ``modules`` and
    ``min_saving`` do not apply (empty: the profile's ranking chose). Kept so that a resumed
    optimize interrupted before its plan makes the same one."""
    plan: list[str] = Field(default_factory=list)
    """The plan in words, as it was printed before the first run."""
    forward_ms: float | None = None
    """The model's forward as the profile measured it."""
    groups: list[GroupRun] = Field(default_factory=list)
    e2e: E2EResult | None = None
    """The whole model with the kept kernels and without them (each kernel's effect in ``kernels``)."""
    predicted: float | None = None
    """Amdahl's prediction for the kept kernels together, from their shares and confirmed speedups."""
    measured: float | None = None
    """The whole model's measured speedup with them: the median of the forward without them over the
    forward with them, interleaved, pooled over the rounds' workers."""
    measured_interval: list[float] | None = None
    """Its 95% interval (low, high): the kept kernels are dropped together only where it lies wholly
    below 1, as a single kernel is (``E2EResult.slower``)."""
    model_change: str = ""
    """The diff that installs the kept kernels into the model file."""
    written: list[str] = Field(default_factory=list)
    """The files delivered (relative to the repository, or absolute outside one)."""
    model_written: str | None = None
    """The file holding the model with the kernels: the model file, or ``<stem>_kevin_model.py``
    beside it where the original could not be kept in git (``original``)."""
    original: str = ""
    """How the model file as it was is kept, in words, where git did not hold it already: committed
    first in a commit of its own (``original_commit``), or left untouched beside the new one."""
    original_commit: str | None = None
    commit: str | None = None
    branch: str | None = None
    notes: list[str] = Field(default_factory=list)
    exit_code: int | None = None

    def group(self, name: str) -> GroupRun | None:
        return next((g for g in self.groups if g.name == name), None)

    @property
    def kept(self) -> list[GroupRun]:
        return [g for g in self.groups if g.state == "kept"]
