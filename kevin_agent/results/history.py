"""What ``kevin-opt history --json`` writes: the stored runs, optimizes and benches, an entry each."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .records import Record

class HistoryEntry(BaseModel):
    run_id: str
    task: str
    created_at: str
    status: str
    turns_done: int
    turns_total: int = 0
    """Turns x trajectories, as the run was started."""
    best_speedup: float | None = None
    best_confirmed: bool = False
    commit: str | None = None
    """The commit holding the run's kernel: its own, or that of the optimize that made it and kept it."""
    delivery: str | None = None
    optimize_id: str | None = None
    """The optimize that made the run (its kernel is delivered in the optimize's one commit)."""


class DamagedEntry(BaseModel):
    """A stored record that could not be read (damaged, or of a newer kevin-opt's layout), and why."""

    id: str
    kind: str
    """run | optimize"""
    path: str
    why: str


class OptimizeEntry(BaseModel):
    """One optimize in ``history``: its groups, the whole model's speedup, its commit."""

    optimize_id: str
    model: str
    created_at: str
    status: str
    groups: int
    kept: int
    measured: float | None = None
    predicted: float | None = None
    commit: str | None = None
    run_ids: list[str] = Field(default_factory=list)


class BenchEntry(BaseModel):
    """A bench as ``history`` lists it (its table: ``kevin-opt show BENCH``)."""

    bench_id: str
    created_at: str
    status: str
    tasks: int
    tasks_done: int
    correct: int
    failed: int
    where: str
    backend: str
    model: str
    mean_speedup: float | None = None
    """Mean over the finished tasks of each one's best speedup, an incorrect task counting 0 (speedup best@k)."""


class HistoryRecord(Record):
    """``kevin-opt history --json``: the stored runs, optimizes and benches, and the damaged ones."""

    kind: Literal["history"] = "history"
    runs: list[HistoryEntry]
    optimizes: list[OptimizeEntry] = Field(default_factory=list)
    benches: list[BenchEntry] = Field(default_factory=list)
    damaged: list[DamagedEntry] = Field(default_factory=list)
    """What could not be read, listed rather than left out."""
