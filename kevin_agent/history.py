"""What the stores hold, every kind, as ``history`` lists it: its table, ``--json`` and the terminal
UI's history screen alike. The runs, the optimizes, the benches, and what could not be read, with
why. A run an optimize made is the optimize's: it commits nothing itself, its kernel goes into the
optimize's one commit, and that commit is said as its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .bench import BenchStore, build_table, list_benches, render_markdown
from .formatting import counted
from .optimize.report import summary_lines
from .results import RunInfo, TurnRecord
from .results.history import BenchEntry, DamagedEntry, HistoryEntry, HistoryRecord, OptimizeEntry
from .results.optimize import OptimizeRecord
from .store import Damaged, list_optimizes, list_runs


@dataclass
class Stored:
    """Everything under a run store (and the benches beside it), each kind newest first."""

    runs_root: Path
    runs: list[tuple[RunInfo, list[TurnRecord]]] = field(default_factory=list)
    optimizes: list[OptimizeRecord] = field(default_factory=list)
    benches: list[BenchStore] = field(default_factory=list)
    damaged: list[Damaged] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.runs or self.optimizes or self.benches or self.damaged)

    def optimize_of(self, run_id: str) -> OptimizeRecord | None:
        """The optimize that made run ``run_id``, if one did."""
        return next((o for o in self.optimizes if any(g.run_id == run_id for g in o.groups)), None)

    def nothing_words(self) -> str:
        return f"no runs, optimizes or benches in {self.runs_root}"

    def counts(self) -> str:
        """``3 runs · 1 optimize · 1 damaged``: what is listed, by kind."""
        parts = [counted(len(self.runs), "run"), counted(len(self.optimizes), "optimize"),
                 counted(len(self.benches), "bench", "benches"), f"{len(self.damaged)} damaged"]
        kept = [p for p, n in zip(parts, (self.runs, self.optimizes, self.benches, self.damaged)) if n]
        return " · ".join(kept) or "nothing stored"

    # --- history --json --------------------------------------------------------------------------
    def run_entry(self, info: RunInfo, records: list[TurnRecord]) -> HistoryEntry:
        optimize = self.optimize_of(info.run_id)
        return HistoryEntry(run_id=info.run_id, task=info.task.name, created_at=info.created_at, status=info.status,
                            turns_done=len(records), turns_total=info.turns * info.trajectories,
                            best_speedup=info.best.speedup if info.best else None,
                            best_confirmed=bool(info.best and info.best.confirmation),
                            commit=run_commit(info, optimize), delivery=delivery_words(info, optimize),
                            optimize_id=optimize.optimize_id if optimize is not None else None)

    def record(self) -> HistoryRecord:
        return HistoryRecord(
            runs=[self.run_entry(info, records) for info, records in self.runs],
            optimizes=[optimize_entry(o) for o in self.optimizes],
            benches=[bench_entry(b) for b in self.benches],
            damaged=[DamagedEntry(id=d.name, kind=d.kind, path=str(d.path), why=d.why) for d in self.damaged])


def gather(runs_root: Path, benches_root: Path | None = None) -> Stored:
    """What ``runs_root`` holds, and the benches in ``benches_root`` (and any in ``runs_root`` itself)."""
    stored = Stored(runs_root)
    stored.runs = list_runs(runs_root, stored.damaged)
    stored.optimizes = list_optimizes(runs_root, stored.damaged)
    seen: set[Path] = set()
    for root in (benches_root, runs_root):
        for bench in list_benches(root) if root is not None else []:
            if bench.dir.resolve() not in seen:
                seen.add(bench.dir.resolve())
                stored.benches.append(bench)
    stored.benches.sort(key=lambda b: b.info.created_at, reverse=True)
    stored.damaged.sort(key=lambda d: d.name, reverse=True)
    return stored


def run_commit(info: RunInfo, optimize: OptimizeRecord | None) -> str | None:
    """The commit that holds the run's kernel: its own, or its optimize's when that one kept it."""
    if optimize is None:
        return info.commit
    kept = any(g.run_id == info.run_id for g in optimize.kept)
    return optimize.commit if kept else None


def delivery_words(info: RunInfo, optimize: OptimizeRecord | None) -> str | None:
    """What became of the run's kernel: the run's own delivery, or where its optimize stands with it."""
    if optimize is None:
        return info.delivery
    group = next(g for g in optimize.groups if g.run_id == info.run_id)
    if group.state == "kept" and optimize.commit:
        return f"in {optimize.optimize_id}'s commit {optimize.commit[:10]}"
    if group.state == "kept":
        return f"kept by {optimize.optimize_id} ({optimize.status})"
    return f"part of {optimize.optimize_id} ({group.state_words()})"


def optimize_entry(o: OptimizeRecord) -> OptimizeEntry:
    return OptimizeEntry(optimize_id=o.optimize_id, model=Path(o.model_file).name, created_at=o.created_at,
                         status=o.status, groups=len(o.groups), kept=len(o.kept), measured=o.measured,
                         predicted=o.predicted, commit=o.commit, run_ids=[g.run_id for g in o.groups if g.run_id])


def bench_entry(store: BenchStore) -> BenchEntry:
    results = store.results().values()
    best = [r.speedup for r in results if r.correct and r.speedup]
    return BenchEntry(
        bench_id=store.info.bench_id, created_at=store.info.created_at, status=store.status(),
        tasks=len(store.info.tasks), tasks_done=len(results), correct=sum(1 for r in results if r.correct),
        failed=sum(1 for r in results if r.status == "failed"), where=store.info.where,
        backend=store.info.backend, model=store.info.model,
        mean_speedup=sum(best) / len(results) if results else None)


def optimize_text(record: OptimizeRecord) -> str:
    """An optimize as ``kevin-opt show OPT`` says it: its groups, each one's run, the whole model."""
    lines = summary_lines(record)
    if record.plan:
        lines += ["", "the plan:", *(f"  {line}" for line in record.plan)]
    return "\n".join([*lines, *record.notes])


def bench_text(store: BenchStore) -> str:
    """A bench's table, as ``kevin-opt show BENCH`` prints it."""
    return (render_markdown(build_table(store))
            + f"\nruns: kevin-opt show RUN (they are in {store.runs_root}); kernels in {store.kernels_dir}\n")
