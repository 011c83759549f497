"""One computation, one group: the module instances of a model that compute the same thing.

Two instances are one group when the worker found the same identity for both (their classes and
the classes' source, their settings such as ``eps``, their parameters' and buffers' shapes and
dtypes, their mode: ``worker/identity.py``) and one forward called both at the same signatures.
A repeated layer's norm is then one row of the table, one task, one run and one kernel, installed
at every member on that member's own parameters. Kept free of torch: the profile's parent and the
extract worker both group with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .records import ArgSpec, SignatureCount


def natural_key(path: str) -> list:
    """``layers.10`` after ``layers.9``: numeric parts compare as numbers."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split(".")]


def in_model_order(paths: Iterable[str]) -> list[str]:
    return sorted(paths, key=natural_key)


def pattern(members: Sequence[str]) -> str:
    """The members' paths with the one part they differ in as ``*`` (``layers.*.norm``); empty when
    no single wildcard fits (different depths, more than one part that differs, or a wildcard that
    would be the whole path: ``attn_norm`` and ``mlp_norm``)."""
    if len(members) < 2:
        return members[0] if members else ""
    split = [m.split(".") for m in members]
    if len({len(parts) for parts in split}) != 1 or len(split[0]) < 2:
        return ""
    differ = [i for i in range(len(split[0])) if len({parts[i] for parts in split}) > 1]
    if len(differ) != 1:
        return ""
    parts = list(split[0])
    parts[differ[0]] = "*"
    return ".".join(parts)


def group_name(members: Sequence[str]) -> str:
    """How the table names a group: ``layers.*.norm x3``, or ``enc.norm x2`` (the first member's
    path) where no single wildcard fits; a group of one is its member's path."""
    if len(members) == 1:
        return members[0]
    return f"{pattern(members) or members[0]} x{len(members)}"


def task_part(members: Sequence[str]) -> str:
    """The part of a task file's name that says which modules it is for: ``layers_norm`` for
    ``layers.*.norm``, else the first member's path."""
    named = pattern(members) or members[0]
    return re.sub(r"\W+", "_", named.replace("*", "")).strip("_")


def same_computation(identity: str, signatures: Iterable[str]) -> tuple | None:
    """The key two instances share when they are one group; None for one that groups with nothing
    (no identity recorded)."""
    return (identity, tuple(sorted(signatures))) if identity else None


def partition(entries: Sequence[tuple[str, str, Iterable[str]]]) -> list[list[str]]:
    """(path, identity, signature keys) per module -> the groups' members, each in the model's
    order, the groups in the order of their first members. The model itself (path "") is a group
    of its own."""
    groups: dict[object, list[str]] = {}
    for path, identity, signatures in entries:
        key = same_computation(identity, signatures) if path else None
        groups.setdefault(key if key is not None else ("", path), []).append(path)
    out = [in_model_order(members) for members in groups.values()]
    return sorted(out, key=lambda members: natural_key(members[0]) if members[0] else [])


def merged_signatures(per_member: Sequence[Sequence[SignatureCount]]) -> list[SignatureCount]:
    """The group's envelope: each signature its members use, calls summed over them, the recorded
    values' ranges widened to cover every member's, most frequent first."""
    merged: dict[str, SignatureCount] = {}
    seen: dict[str, int] = {}
    for signatures in per_member:
        for sig in signatures:
            if sig.key not in merged:
                merged[sig.key] = sig.model_copy(deep=True)
                seen[sig.key] = 1
                continue
            mine = merged[sig.key]
            mine.calls += sig.calls
            mine.aliased = mine.aliased and sig.aliased
            mine.args = [_widen(a, b, seen[sig.key]) for a, b in zip(mine.args, sig.args)]
            seen[sig.key] += 1
    return sorted(merged.values(), key=lambda s: -s.calls)


def _widen(a: ArgSpec, b: ArgSpec, n: int) -> ArgSpec:
    """``a`` (the merge of ``n`` specs so far) widened by ``b``: the lowest low, the highest high,
    the means and spreads averaged."""
    out = a.model_copy()
    if a.low is not None and b.low is not None:
        out.low = min(a.low, b.low)
    if a.high is not None and b.high is not None:
        out.high = max(a.high, b.high)
    if a.mean is not None and b.mean is not None:
        out.mean = (a.mean * n + b.mean) / (n + 1)
    if a.std is not None and b.std is not None:
        out.std = (a.std * n + b.std) / (n + 1)
    out.items = [_widen(x, y, n) for x, y in zip(a.items, b.items)]
    return out
