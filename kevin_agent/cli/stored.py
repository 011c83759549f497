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
from ..results.records import BenchEntry


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


BENCHES = StoredKind(name="bench", json_field="benches", owns=_owns_bench, show=_show_bench, resume=_resume_bench,
                     entries=_bench_entries, lines=_bench_lines)

KINDS: list[StoredKind] = [BENCHES]


def kind_of(ident: str, args) -> StoredKind | None:
    """The kind whose entry ``ident`` names (None: a run)."""
    return next((kind for kind in KINDS if kind.owns(ident, args)), None)
