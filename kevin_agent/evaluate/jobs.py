"""The evaluation's kind of worker (``EvalWorker``) and its messages: a ``Job`` in, a ``WorkerReply``
out, and on the pipes between them the messages every worker speaks (``workers.messages``: the
stages it enters, ``want candidate``, ``want device``, ``want timing``) plus the evaluation's own:
an ``Assignment`` answers ``want candidate``, and a confirmation worker says which kernel's code
runs next (``Running``) so that a crash or a hang is laid at the right kernel's door. Kept free of
torch so the parent can use it without importing torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .. import workers
from ..results import Confirmed, EvalResult, MemoryUse
from ..task import TaskProbe
from .memory import Footprint

INTERRUPTED = "the run was interrupted"
"""The error of a candidate (or a confirmed kernel) whose evaluation the run's end cut short."""


class Assignment(workers.Message):
    """The answer to a run worker's ``want candidate``: what to load, from where."""

    KIND = "assignment"

    candidate_path: str
    build_dir: str
    """The candidate's build folder (its ``TORCH_EXTENSIONS_DIR``)."""
    lean: bool = False
    """Poison less memory: the evaluation is tried again after the harness ran out of device memory."""


class Running(workers.Message):
    """A confirmation worker runs this kernel's code next (``-``: the reference's)."""

    KIND = "running"
    kernel: str


class Job(workers.Job):
    """An evaluation worker's job; its ``settings`` are the run's, resolved for the device, as the
    evaluator has them."""

    KIND = "evaluate-job"
    mode: Literal["probe", "compile", "run", "confirm"]
    task_path: str = ""
    class_name: str = "Model"
    candidate_path: str = ""
    """compile: the candidate to build. run: empty, the candidate comes as an ``Assignment``."""
    reference_dir: str = ""
    """Where the task's reference data lives (probe: made there when missing; run: read)."""
    kernels: list[Assignment] = Field(default_factory=list)
    """confirm: the kernels to verify again and time head to head."""
    seed: int = 0
    """confirm: base seed of the fresh inputs."""
    budget_s: float = 0.0
    """confirm: the timing rounds stop once they have taken this long (at least the fewest rounds)."""


class TimedRounds(BaseModel):
    """One callable's raw times in a confirmation worker's rounds (ms)."""

    stream_ms: list[float]
    """The headline's, round by round."""
    host_waits: int = 0
    """Rounds in which the GPU waited for the host inside the call (``TimingStats.host_waits``)."""
    launched_ms: list[float] = Field(default_factory=list)
    """cuda: with its launches in the time, after the rounds."""


class KernelRounds(BaseModel):
    """A confirmation worker's raw times of one kernel and of what it was timed against in the same
    rounds: the parent makes every confirmed number from them, over all its workers (``rounds.pooled``)."""

    kernel: TimedRounds
    reference: TimedRounds
    compiled: TimedRounds | None = None


class WorkerReply(workers.Reply):
    KIND = "evaluate-reply"
    error_kind: Literal["", "task", "environment", "compile", "runtime", "harness"] = ""
    """``harness``: the evaluation itself failed (it ran out of device memory in its own work, or
    left the candidate no room): not the candidate's doing, and never reported as its result."""
    eval: EvalResult | None = None
    """Run mode: the result as far as the worker knows it (no compile fields)."""
    confirmed: list[Confirmed] | None = None
    """Confirm mode: one verdict per kernel, in order."""
    rounds: list[KernelRounds | None] | None = None
    """Confirm mode: each kernel's rounds, beside its verdict (None: it was not timed)."""
    memory: MemoryUse | None = None
    """Confirm mode: the worker's peak memory from its first fresh set to its last verdict."""
    probe: TaskProbe | None = None
    footprint: Footprint | None = None
    """Probe: the task's own device memory."""
    capacity_bytes: int | None = None
    """Probe: the device memory the evaluation may use (``memory.capacity``)."""


class EvalWorker(workers.WorkerProcess):
    """An evaluation worker: ``worker.main`` with a ``Job``, answering a ``WorkerReply``."""

    ENTRY = "kevin_agent.evaluate.worker.main"
    JOB = Job
    REPLY = WorkerReply
    PREFIX = "kevin-job-"
