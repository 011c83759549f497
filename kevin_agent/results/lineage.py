"""A run's trajectories as a tree: which turn continued which, for `show`, the history screen
and the report. A chain of turns of one trajectory is one line; a turn continued by another
trajectory (a beam slot, a branch) starts an indented line under the turn it came from."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .turns import TurnRecord

Key = tuple[int, int]


def outcome(record: TurnRecord) -> str:
    """A turn's outcome in a word or two: the speedup of a correct turn (as ``formatting`` writes
    one), else how it failed (``Status.label``)."""
    if not record.correct:
        return record.status.label
    return "-" if record.speedup is None else f"{record.speedup:.2f}x"


def path_to(records: Sequence[TurnRecord], key: Key | None) -> list[TurnRecord]:
    """The turns that led to ``key``, oldest first, ``key`` itself last."""
    by_key = {(r.trajectory, r.turn): r for r in records}
    path: list[TurnRecord] = []
    while key is not None and (rec := by_key.get(key)) is not None:
        path.append(rec)
        key = rec.previous()
    return path[::-1]


ARROW = " -> "


def tree_lines(records: Sequence[TurnRecord], winner: Key | None = None,
               label: Callable[[TurnRecord], str] = outcome) -> list[str]:
    """The trajectories as text lines; turns on the winner's path carry a ``*``."""
    return [head + ARROW.join(cells) for head, cells in tree_chains(records, winner, label)]


def wrap_chain(head: str, cells: Sequence[str], width: int) -> list[str]:
    """One chain in lines of at most ``width`` characters, broken between turns only; the lines
    after the first start under the first turn, with the arrow."""
    indent = " " * len(head)
    lines, line = [], head + (cells[0] if cells else "")
    for cell in cells[1:]:
        if len(line) + len(ARROW) + len(cell) > width and line.strip():
            lines.append(line)
            line = indent + ARROW.lstrip() + cell
        else:
            line += ARROW + cell
    return [*lines, line]


def tree_chains(records: Sequence[TurnRecord], winner: Key | None = None,
                label: Callable[[TurnRecord], str] = outcome) -> list[tuple[str, list[str]]]:
    """The trajectories as chains: each a head (indent, trajectory, where it came from) and its
    turns' cells, ``2:compile error*``."""
    finished = [r for r in records if r.finished]
    keys = {(r.trajectory, r.turn) for r in finished}
    children: dict[Key | None, list[TurnRecord]] = {}
    for rec in sorted(finished, key=lambda r: (r.turn, r.trajectory)):
        parent = rec.previous()
        children.setdefault(parent if parent in keys else None, []).append(rec)
    on_path = {(r.trajectory, r.turn) for r in path_to(finished, winner)}
    lines: list[tuple[str, list[str]]] = []

    def cell(rec: TurnRecord) -> str:
        star = "*" if (rec.trajectory, rec.turn) in on_path else ""
        return f"{rec.turn}:{label(rec)}{star}"

    def chain(start: TurnRecord, indent: str, origin: str) -> None:
        cells, forks, rec = [cell(start)], [], start
        while True:
            kids = children.get((rec.trajectory, rec.turn), [])
            same = [k for k in kids if k.trajectory == rec.trajectory]
            forks += [(rec, k) for k in kids if k.trajectory != rec.trajectory]
            if not same:
                break
            forks += [(rec, k) for k in same[1:]]
            rec = same[0]
            cells.append(cell(rec))
        lines.append((f"{indent}t{start.trajectory}{origin}  ", cells))
        for parent, kid in forks:
            chain(kid, indent + "  ", f" (from t{parent.trajectory} turn {parent.turn})")

    for root in children.get(None, []):
        chain(root, "", "")
    return lines
