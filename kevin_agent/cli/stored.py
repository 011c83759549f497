"""The kinds of stored work besides runs that ``history``, ``show`` and ``resume`` reach: each says
whether an id is one of its own, shows and resumes it, and lists its entries for ``history``
(in the plain table and under its own field of ``history --json``). Runs are the default kind,
handled in ``commands``; a new kind is one more entry in ``KINDS``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from ..formatting import fmt_speedup
from ..results.history import BenchEntry, OptimizeEntry


@dataclass(frozen=True)
class StoredKind:
    name: str
    json_field: str
    """Its list's field in ``history --json``."""
    owns: Callable[[str, object], bool]
    show: Callable[[object], int]
    resume: Callable[[object, object], int]
    entries: Callable[[object], list[BaseModel]]
    lines: Callable[[list], list[str]]


def _bench_root(args) -> Path:
    from .bench_commands import benches_root

    return benches_root(args)


def _owns_bench(ident: str, args) -> bool:
    root = _bench_root(args)
    return ident.startswith("bench-") or (root.is_dir() and any(root.glob(f"{ident}*/bench.json")))


def _show_bench(args) -> int:
    from .bench_commands import show_bench

    return show_bench(args)


def _resume_bench(args, registry) -> int:
    from .bench_commands import cmd_resume_bench

    return cmd_resume_bench(args, registry)


def _bench_entries(args) -> list[BenchEntry]:
    from ..bench import list_benches

    out = []
    for store in list_benches(_bench_root(args)):
        results = store.results().values()
        best = [r.speedup for r in results if r.correct and r.speedup]
        out.append(BenchEntry(
            bench_id=store.info.bench_id, created_at=store.info.created_at, status=store.status(),
            tasks=len(store.info.tasks), tasks_done=len(results), correct=sum(1 for r in results if r.correct),
            failed=sum(1 for r in results if r.status == "failed"), where=store.info.where,
            backend=store.info.backend, model=store.info.model,
            mean_speedup=sum(best) / len(results) if results else None))
    return out


def _bench_lines(entries: list[BenchEntry]) -> list[str]:
    if not entries:
        return []
    lines = [f"{'BENCH':<48} {'STARTED':<20} {'STATUS':<12} {'TASKS':>7} {'CORRECT':>7} {'MEAN':>7}  WHERE"]
    for e in entries:
        lines.append(f"{e.bench_id:<48} {e.created_at[:19]:<20} {e.status:<12} {e.tasks_done:>3}/{e.tasks:<3} "
                     f"{e.correct:>7} {fmt_speedup(e.mean_speedup):>7}  {e.where}")
    return lines


def _runs_root(args) -> Path:
    from ..store import default_runs_root

    return args.run_dir or default_runs_root()


def _owns_optimize(ident: str, args) -> bool:
    from ..store.optimizes import PREFIX

    # Every optimize id has the prefix, and a missing one is the optimize store's to say.
    return ident.startswith(PREFIX)


def _show_optimize(args) -> int:
    from .optimize_command import cmd_show_optimize

    return cmd_show_optimize(args)


def _resume_optimize(args, registry) -> int:
    from .optimize_command import cmd_resume_optimize

    return cmd_resume_optimize(args, registry)


def _optimize_entries(args) -> list[OptimizeEntry]:
    from ..store import list_optimizes

    return [OptimizeEntry(optimize_id=o.optimize_id, model=Path(o.model_file).name, created_at=o.created_at,
                          status=o.status, groups=len(o.groups), kept=len(o.kept), measured=o.measured,
                          predicted=o.predicted, commit=o.commit,
                          run_ids=[g.run_id for g in o.groups if g.run_id])
            for o in list_optimizes(_runs_root(args))]


def _optimize_lines(entries: list[OptimizeEntry]) -> list[str]:
    if not entries:
        return []
    lines = [f"{'OPTIMIZE':<44} {'MODEL':<16} {'STARTED':<20} {'STATUS':<12} {'KEPT':>6} {'WHOLE MODEL':<22}  COMMIT"]
    for e in entries:
        whole = f"{e.measured:.2f}x (Amdahl {e.predicted:.2f}x)" if e.measured and e.predicted else "-"
        lines.append(f"{e.optimize_id:<44} {e.model[:16]:<16} {e.created_at[:19]:<20} {e.status:<12} "
                     f"{f'{e.kept}/{e.groups}':>6} {whole:<22}  {(e.commit or '-')[:10]}")
    return lines


OPTIMIZES = StoredKind(name="optimize", json_field="optimizes", owns=_owns_optimize, show=_show_optimize,
                       resume=_resume_optimize, entries=_optimize_entries, lines=_optimize_lines)

BENCHES = StoredKind(name="bench", json_field="benches", owns=_owns_bench, show=_show_bench, resume=_resume_bench,
                     entries=_bench_entries, lines=_bench_lines)

KINDS: list[StoredKind] = [OPTIMIZES, BENCHES]


def kind_of(ident: str, args) -> StoredKind | None:
    """The kind whose entry ``ident`` names (None: a run)."""
    return next((kind for kind in KINDS if kind.owns(ident, args)), None)
