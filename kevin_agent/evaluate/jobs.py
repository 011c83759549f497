"""What the parent and a worker process exchange: a job file in, a reply file out, and two
pipes in between.

The worker writes one line per stage it enters to ``progress_fd`` (and ``want <what>`` when it
needs an answer), and reads the parent's answers, one JSON object per line, from
``control_fd``. A confirmation worker also writes ``kernel <i>`` (or ``kernel -`` for the
reference) before it runs each kernel's code, so that a crash or a hang is laid at the right
kernel's door. Kept free of torch so the parent can use it without importing torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..config import EvalSettings
from ..results import Confirmed, EvalResult, MemoryUse
from ..task import TaskProbe
from .memory import Footprint

WANT = "want "
"""Prefix of a worker's request line: ``want candidate``, ``want timing``."""
KERNEL = "kernel "
"""Prefix of a confirmation worker's line naming the kernel whose code runs next."""
REPLIED = "replied"
"""The worker's last line: its reply file is complete, and the parent need not wait for it to exit
(a CUDA context takes a while to tear down, and nothing of it is the candidate's)."""
INTERRUPTED = "the run was interrupted"
"""The error of a candidate (or a confirmed kernel) whose evaluation the run's end cut short."""


class Assignment(BaseModel):
    """The answer to a run worker's ``want candidate``: what to load, from where."""

    candidate_path: str
    build_dir: str
    """The candidate's build folder (its ``TORCH_EXTENSIONS_DIR``)."""
    lean: bool = False
    """Poison less memory: the evaluation is tried again after the harness ran out of device memory."""


class Job(BaseModel):
    mode: Literal["probe", "compile", "run", "confirm"]
    settings: EvalSettings
    """The run's evaluation settings, resolved for the device, as the evaluator has them."""
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
    reply_path: str
    progress_fd: int
    control_fd: int


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


class WorkerReply(BaseModel):
    ok: bool
    error_kind: Literal["", "task", "environment", "compile", "runtime", "harness"] = ""
    """``harness``: the evaluation itself failed (it ran out of device memory in its own work, or
    left the candidate no room): not the candidate's doing, and never reported as its result."""
    error: str = ""
    eval: EvalResult | None = None
    """Run mode: the result as far as the worker knows it (no compile fields)."""
    confirmed: list[Confirmed] | None = None
    """Confirm mode: one verdict per kernel, in order."""
    rounds: list[KernelRounds | None] | None = None
    """Confirm mode: each kernel's rounds, beside its verdict (None: it was not timed)."""
    memory: MemoryUse | None = None
    """Confirm mode: the worker's peak memory from its first fresh set to its last verdict."""
    probe: TaskProbe | None = None
    device_name: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    hint: str = ""
    """What the person can do about ``error`` (task and environment problems)."""
    footprint: Footprint | None = None
    """Probe: the task's own device memory."""
    capacity_bytes: int | None = None
    """Probe: the device memory the evaluation may use (``memory.capacity``)."""
