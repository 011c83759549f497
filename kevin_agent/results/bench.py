"""A bench's records: many task files run with one run's settings, and the paper's table over them.

``bench.json`` (``BenchInfo``) says what the bench is and how far it got; each line of
``tasks.jsonl`` (``TaskResult``) is one task's result, appended when the task ends, the first
line per task id counting (so a task that came back twice, from a retried Ray task, counts
once). The table written for people and their tools is ``BenchTable`` (``table.json``): the
rows and the scores (``Scores``) computed by ``results.scoring``, with the same names in
``docs/records.md`` and ``docs/bench.md``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .records import Record
from .versioned import Versioned, schema_field

BENCH_SCHEMA = 1
"""The layout of a bench folder's own files: ``bench.json`` and each line of ``tasks.jsonl``."""
BENCH_SCHEMAS_READ = frozenset({1})

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
"""The speedup thresholds of KernelBench's fast_p curve."""


class BenchTask(BaseModel):
    """One task file of a bench."""

    task_id: str
    """Unique in the bench: ``<folder>/<file stem>`` (``level1/19_ReLU``)."""
    path: str
    """The task file, absolute, on the machine that drives the bench."""
    level: str | None = None
    """The KernelBench level the file's folder names (``level1``), else None."""

    @property
    def stem(self) -> str:
        return self.path.rsplit("/", 1)[-1].removesuffix(".py")


class BenchInfo(Versioned):
    """``bench.json``: what a bench is, rewritten as its state changes."""

    schema_: int = schema_field(BENCH_SCHEMA)
    bench_id: str
    created_at: str
    updated_at: str = ""
    status: str = "running"
    """running | completed | interrupted | failed"""
    paths: list[str]
    """The paths it was given (folders of task files, or files listing them)."""
    tasks: list[BenchTask]
    settings: dict = Field(default_factory=dict)
    """The run settings every task was given (the flags; the config each run resolved is in its run.json)."""
    device: str = ""
    backend: str = ""
    model: str = ""
    trajectories: int | None = None
    turns: int = 8
    where: str = "local"
    """``local`` (tasks in turn on this machine), or ``ray <address>``."""
    wall_s: float = 0.0
    """Time the bench has been driven, over every session that drove it."""
    skipped: dict[str, str] = Field(default_factory=dict)
    """Files of the given folders that are not task files (a whole model, a kernel, a helper), with why."""


class TrajectoryResult(BaseModel):
    """One trajectory of a task: whether it found a verified kernel, and its best speedup."""

    trajectory: int
    correct: bool
    speedup: float | None = None
    """Its best verified kernel's speedup over eager PyTorch: the confirmed median where that kernel was
    confirmed, else its turn's own number; None when it found none."""
    speedup_vs_compile: float | None = None
    first_correct_turn: int | None = None


class TaskResult(Versioned):
    """One line of ``tasks.jsonl``: a task's result, written once it ended."""

    schema_: int = schema_field(BENCH_SCHEMA)
    task_id: str
    path: str
    level: str | None = None
    status: Literal["done", "failed"]
    """done: the run ended (a verified kernel or not); failed: the task file did not load, or its run
    could not go on (``error`` says why). A failed task counts as incorrect in every score."""
    error: str | None = None
    run_id: str | None = None
    """The task's run, under the bench's ``runs/``."""
    reason: str | None = None
    """How the run ended (completed, target_reached, ...)."""
    trajectories: list[TrajectoryResult] = Field(default_factory=list)
    correct: bool = False
    speedup: float | None = None
    """The task's best kernel: the confirmed winner's median, else the best turn's own number."""
    confirmed: bool = False
    ci95: list[float] | None = None
    speedup_vs_compile: float | None = None
    winner_trajectory: int | None = None
    winner_turn: int | None = None
    first_correct_turn: int | None = None
    """The first turn (over every trajectory) that produced a verified kernel."""
    kernel: str | None = None
    """The best kernel, relative to the bench folder (``kernels/<task>.py``)."""
    turns_done: int = 0
    wall_s: float = 0.0
    """The task's wall time, opening its run to its confirmation."""
    eval_device_s: float = 0.0
    """Seconds the task's candidates held the device (load, correctness, timing: ``StageTimes.device``)."""
    eval_wall_s: float = 0.0
    """Seconds of its candidates' evaluations end to end (queue and compile included)."""
    node: str = ""
    """The host that ran it."""
    attempt: int = 0
    """0 the first time; a Ray task that ran again after its node died says how many times it had started."""


class Scores(BaseModel):
    """The speedup side of the table against one baseline (eager PyTorch or ``torch.compile``)."""

    baseline: str
    speedup_best_at_k: float
    """Mean over tasks of the task's best speedup, an incorrect task counting 0."""
    speedup_avg_at_k: float
    """Mean over tasks of the mean over its k trajectories of each one's best speedup (incorrect = 0)."""
    fast_p: dict[str, float]
    """p -> the share of all N tasks (failures included) with a verified kernel faster than p times the baseline."""
    fast_1: float
    fast_1_5: float
    geomean_correct: float | None = None
    """Geometric mean of the correct tasks' best speedups (None: no correct task)."""


class Metrics(BaseModel):
    """The table over a set of tasks."""

    tasks: int
    """N: every task, failed ones included."""
    k: int
    """Trajectories per task."""
    correct_tasks: int
    correct_best_at_k: float
    """Share of tasks where at least one trajectory found a verified kernel."""
    correct_avg_at_k: float
    """Mean over tasks of the share of its trajectories that found one."""
    eager: Scores
    compile: Scores | None = None
    """Against ``torch.compile`` (None where it was not measured for every correct task)."""


class BenchTable(Record):
    """``table.json`` in the bench folder (and ``kevin-opt show BENCH --json``): the rows and the scores."""

    kind: Literal["bench"] = "bench"
    bench_id: str
    status: str
    created_at: str
    device: str
    device_name: str = ""
    backend: str
    model: str
    trajectories: int | None
    turns: int
    where: str
    tasks_total: int
    tasks_done: int
    """Tasks with a result (done or failed); the scores are over these."""
    pending: list[str] = Field(default_factory=list)
    """Tasks without a result yet (the bench was interrupted): ``kevin-opt resume BENCH``."""
    rows: list[TaskResult]
    overall: Metrics | None = None
    levels: dict[str, Metrics] = Field(default_factory=dict)
    """The same table per KernelBench level, where the paths are levels."""
    skipped: dict[str, str] = Field(default_factory=dict)
    """Files of the bench's folders that are not task files, with why (``BenchInfo.skipped``)."""
    wall_s: float = 0.0
