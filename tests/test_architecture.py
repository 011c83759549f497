"""docs/architecture.md's table of packages is the code's: every package and top-level module is in
it, each imports exactly what its row says, and each row imports only rows above it (layers); and
nothing outside a package reaches past its face (its ``Faces`` section)."""

from __future__ import annotations

import re
from collections import defaultdict

from .clihelp import REPO
from .test_layout import _imports

DOC = REPO / "docs" / "architecture.md"


def _table() -> dict[str, set[str]]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and (m := re.fullmatch(r"`([a-z_]+)`", cells[0])):
            rows[m.group(1)] = set(re.findall(r"`([a-z_]+)`", cells[2]))
    return rows


def _room(module: str) -> str | None:
    """``kevin_agent.evaluate.worker.main`` -> ``evaluate``; the package itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _actual() -> dict[str, set[str]]:
    deps: dict[str, set[str]] = defaultdict(set)
    for module, targets in _imports().items():
        room = _room(module)
        if room is None:
            continue
        deps[room]  # a room that imports nothing still has a row
        for target in targets:
            other = _room(target)
            if other is not None and other != room:
                deps[room].add(other)
    return dict(deps)


def test_every_package_has_its_row_and_imports_what_it_says():
    table, actual = _table(), _actual()
    assert len(table) >= 20, "the table was not found"
    assert set(table) == set(actual), f"missing rows: {set(actual) - set(table)}; no such package: {set(table) - set(actual)}"
    for room in sorted(actual):
        extra, unused = actual[room] - table[room], table[room] - actual[room]
        assert not extra and not unused, (f"{room}: imports {sorted(extra)} its row does not allow; "
                                          f"its row allows {sorted(unused)} it does not import")


def test_rows_are_layers():
    seen: set[str] = set()
    for room, allowed in _table().items():
        assert allowed <= seen, f"{room} imports {sorted(allowed - seen)}, which sit at or below it in the table"
        seen.add(room)


def _reaching_past(face: str, allowed: set[str]) -> list[str]:
    """Imports from outside ``face``'s package of its modules other than ``allowed`` (type-only ones
    included: a face is a face for the type checker too)."""
    inside = face + "."
    return sorted(f"{module} imports {target}" for module, targets in _imports(typing=True).items()
                  if module != face and not module.startswith(inside)
                  for target in targets if target.startswith(inside) and target not in allowed)


def test_worker_processes_are_used_through_their_face_alone():
    assert _reaching_past("kevin_agent.workers", set()) == []


def test_nothing_outside_evaluate_reaches_into_its_parent_or_worker_side():
    # The worker side's own face (``evaluate.worker``) is what other workers measure with.
    sides = ("kevin_agent.evaluate.parent", "kevin_agent.evaluate.worker.")
    past = [line for line in _reaching_past("kevin_agent.evaluate", {"kevin_agent.evaluate.worker"})
            if line.split(" imports ")[1].startswith(sides)]
    assert past == []


def test_the_faces_are_checked_against_real_imports():
    graph = _imports(typing=True)
    assert "kevin_agent.workers" in graph["kevin_agent.model.process"]
    assert "kevin_agent.evaluate.worker" in graph["kevin_agent.model.worker.main"]
    assert "kevin_agent.workers.parent" in graph["kevin_agent.workers"]
