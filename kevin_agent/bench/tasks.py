"""Which task files a bench runs: folders of KernelBench-convention files, or text files that list them.

A folder contributes each ``*.py`` directly in it that is a task file (it defines ``get_inputs``, and
neither ``get_model``, which makes it a whole model for ``profile``/``optimize``, nor ``ModelNew``,
which makes it a kernel a run wrote), in name order as KernelBench numbers them; the others are
skipped and named (KernelBench's ``level1/`` holds only task files; a folder of a person's own, such
as the examples, holds models, kernels and helpers too). A text file lists task files one per line (blank lines and ``#``
comments skipped), relative to the list's own folder. A listed file that does not load is still a
task: its row says why, and the bench goes on.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..results.bench import BenchTask

LEVEL = re.compile(r"^level\d+$")


def _natural(path: Path) -> list:
    # 2_x before 10_x, as KernelBench numbers its tasks.
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.stem)]


def _not_a_task(path: Path) -> str | None:
    """Why a file in a task folder is not a task file (None: it is one). One that does not parse but
    names ``get_inputs`` is a task, whose row will say why it does not load."""
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    try:
        names = {node.name for node in ast.parse(source).body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    except (SyntaxError, ValueError):
        return None if "get_inputs" in source else "no get_inputs()"
    if "get_model" in names:
        return "a whole model (get_model()): kevin-opt profile or optimize takes it"
    if "ModelNew" in names and "Model" not in names:
        return "a kernel (class ModelNew), not a task"
    if path.stem.endswith("_kevin"):
        return "a kernel a run delivered (*_kevin.py), not a task"
    if "get_inputs" not in names:
        return "no get_inputs()"
    return None


@dataclass
class Found:
    """The task files the paths name, and each file of their folders that was skipped, with why."""

    tasks: list[BenchTask]
    skipped: dict[str, str] = field(default_factory=dict)


def _listed(path: Path) -> list[Path]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the task list {path} ({exc})") from None
    out = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            listed = Path(line).expanduser()
            out.append(listed if listed.is_absolute() else path.parent / listed)
    return out


def find_tasks(paths: Sequence[Path]) -> list[BenchTask]:
    """The bench's tasks, in the order given; ``UsageError`` (exit 2) for a path that does not exist
    or holds no task file."""
    return scan(paths).tasks


def scan(paths: Sequence[Path]) -> Found:
    """``find_tasks``, with the files of the folders that are not tasks, and why."""
    files: list[Path] = []
    skipped: dict[str, str] = {}
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            found = []
            for candidate in sorted((p for p in path.glob("*.py") if p.name != "__init__.py"), key=_natural):
                why = _not_a_task(candidate)
                if why is None:
                    found.append(candidate)
                else:
                    skipped[str(candidate)] = why
            if not found:
                raise UsageError(f"{given}: no task files in this folder (no .py file in it is a task: class Model, "
                                 "get_inputs(), and no get_model())",
                                 "pass folders of KernelBench-convention task files (class Model, get_inputs(), "
                                 "get_init_inputs()), or a text file listing task files")
            files += found
        elif path.is_file() and path.suffix == ".py":
            files.append(path)
        elif path.is_file():
            listed = _listed(path)
            if not listed:
                raise UsageError(f"{given}: the list names no task files", "one task file path per line")
            files += listed
        else:
            raise UsageError(f"{given}: no such folder or file",
                             "pass folders of task files (a KernelBench checkout's level1/) or a text file listing them")
    tasks: list[BenchTask] = []
    seen_paths: set[Path] = set()
    taken: set[str] = set()
    for file in files:
        resolved = file.resolve()
        if resolved in seen_paths:
            continue
        seen_paths.add(resolved)
        folder = resolved.parent.name
        level = folder if LEVEL.match(folder) else None
        base = f"{folder}/{resolved.stem}" if folder else resolved.stem
        task_id, n = base, 2
        while task_id in taken:
            task_id, n = f"{base}-{n}", n + 1
        taken.add(task_id)
        tasks.append(BenchTask(task_id=task_id, path=str(resolved), level=level))
    return Found(tasks, skipped)
