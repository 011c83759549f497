"""The kinds of stored work besides runs that ``history``, ``show`` and ``resume`` reach: each says
whether an id is one of its own, shows and resumes it, and lists its entries for ``history``
(in the plain table and under its own field of ``history --json``). Runs are the default kind,
handled in ``commands``; a new kind is one more entry in ``KINDS``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..formatting import fmt_speedup
from ..results.history import BenchEntry, DamagedEntry, HistoryEntry, OptimizeEntry


@dataclass(frozen=True)
class StoredKind:
    name: str
    json_field: str
    """Its list's field in ``history --json``."""
    owns: Callable[[str, object], bool]
    show: Callable[[object], int]
    resume: Callable[[object, object], int]
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


def table_lines(head: list[str], rows: list[list[str]]) -> list[str]:
    """Columns as wide as their widest cell (ids are of any length); a head ending in ``>`` is
    right-aligned, and the last column is left ragged."""
    if not rows:
        return []
    right = [h.endswith(">") for h in head]
    head = [h.rstrip(">") for h in head]
    widths = [max(len(c) for c in column) for column in zip(head, *rows)]

    def line(cells: list[str]) -> str:
        out = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells[:-1], widths, right)]
        return "  ".join([*out, cells[-1]]).rstrip()

    return [line(head), *(line(row) for row in rows)]


def _bench_lines(entries: list[BenchEntry]) -> list[str]:
    return table_lines(["BENCH", "STARTED", "STATUS", "TASKS>", "CORRECT>", "MEAN>", "WHERE"], [
        [e.bench_id, e.created_at[:19].replace("T", " "), e.status, f"{e.tasks_done}/{e.tasks}", str(e.correct),
         fmt_speedup(e.mean_speedup), e.where] for e in entries])


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


def _optimize_lines(entries: list[OptimizeEntry]) -> list[str]:
    return table_lines(["OPTIMIZE", "MODEL", "STARTED", "STATUS", "KEPT>", "WHOLE MODEL", "COMMIT"], [
        [e.optimize_id, e.model, e.created_at[:19].replace("T", " "), e.status, f"{e.kept}/{e.groups}",
         f"{e.measured:.2f}x (Amdahl {e.predicted:.2f}x)" if e.measured and e.predicted else "-",
         (e.commit or "-")[:10]] for e in entries])


def run_lines(entries: list[HistoryEntry], best: dict[str, str]) -> list[str]:
    """The runs' table; ``best``: each run's best, marked confirmed or a turn's own."""
    return table_lines(["RUN", "TASK", "STARTED", "STATUS", "TURNS>", "BEST", "DELIVERY"], [
        [e.run_id, e.task, e.created_at[:19].replace("T", " "), e.status, f"{e.turns_done}/{e.turns_total}",
         best[e.run_id], e.delivery or "-"] for e in entries])


def damaged_lines(entries: list[DamagedEntry]) -> list[str]:
    return table_lines(["DAMAGED", "KIND", "WHY"], [[e.id, e.kind, e.why] for e in entries])


OPTIMIZES = StoredKind(name="optimize", json_field="optimizes", owns=_owns_optimize, show=_show_optimize,
                       resume=_resume_optimize, lines=_optimize_lines)

BENCHES = StoredKind(name="bench", json_field="benches", owns=_owns_bench, show=_show_bench, resume=_resume_bench,
                     lines=_bench_lines)

KINDS: list[StoredKind] = [OPTIMIZES, BENCHES]


def kind_of(ident: str, args) -> StoredKind | None:
    """The kind whose entry ``ident`` names (None: a run)."""
    return next((kind for kind in KINDS if kind.owns(ident, args)), None)
