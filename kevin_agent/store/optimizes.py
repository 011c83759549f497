"""An optimize's folder in the run store: ``.kevin/runs/opt-<id>/`` beside its module runs, with
``optimize.json`` (``results.optimize.OptimizeRecord``), the model's ``profile.json``, ``tasks/``
(each group's extracted task, and the kernel module its run wrote beside it) and the lock of
its one owner, as a run has.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import RunNotFound, RunUnreadable
from ..results.optimize import OPTIMIZE_SCHEMAS_READ, OptimizeRecord
from .lock import RunLock, lock_owner
from .runs import Damaged, damage, new_run_id, now_iso, why_damaged, write_atomic

OPTIMIZE_JSON = "optimize.json"
PROFILE_JSON = "profile.json"
TASKS = "tasks"
PREFIX = "opt-"


def new_optimize_id(model_name: str) -> str:
    return PREFIX + new_run_id(model_name)


class OptimizeStore:
    """One optimize's folder, and the record in it."""

    def __init__(self, folder: Path, record: OptimizeRecord) -> None:
        self.dir = folder
        self.record = record
        self.lock: RunLock | None = None

    @property
    def root(self) -> Path:
        """The run store it is in (its module runs are there too)."""
        return self.dir.parent

    @property
    def tasks(self) -> Path:
        return self.dir / TASKS

    @property
    def profile_path(self) -> Path:
        return self.dir / PROFILE_JSON

    @classmethod
    def create(cls, root: Path, record: OptimizeRecord) -> OptimizeStore:
        folder = root / record.optimize_id
        (folder / TASKS).mkdir(parents=True, exist_ok=False)
        store = cls(folder, record)
        store.take()
        store.save()
        return store

    @classmethod
    def open(cls, root: Path, optimize_id: str) -> OptimizeStore:
        folder = root / optimize_id
        if not (folder / OPTIMIZE_JSON).is_file():
            matches = sorted(p.name for p in root.glob(f"{optimize_id}*") if (p / OPTIMIZE_JSON).is_file()) \
                if root.is_dir() else []
            if len(matches) != 1:
                raise RunNotFound(f"no optimize {optimize_id!r} in {root}", "list them with `kevin-opt history`")
            folder = root / matches[0]
        return cls(folder, read_record(folder))

    def take(self) -> None:
        """Own the optimize; ``RunLocked`` (exit 2) names the live process that already does."""
        if self.lock is None or not self.lock.held:
            self.lock = RunLock.acquire(self.dir, self.record.optimize_id)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def save(self) -> None:
        self.record.updated_at = now_iso()
        write_atomic(self.dir / OPTIMIZE_JSON, self.record.model_dump_json(indent=2, by_alias=True) + "\n")


def read_record(folder: Path) -> OptimizeRecord:
    path = folder / OPTIMIZE_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunNotFound(f"{path} is unreadable: {damage(exc)}",
                          "the optimize's folder is damaged; start a new optimize") from None
    schema = data.get("schema", 1) if isinstance(data, dict) else 1
    if schema not in OPTIMIZE_SCHEMAS_READ:
        raise RunUnreadable(f"{path} is of layout (schema) {schema!r}; this kevin-opt reads "
                            f"{', '.join(map(str, sorted(OPTIMIZE_SCHEMAS_READ)))}",
                            "a newer kevin-opt wrote it: show or resume it with that version")
    try:
        return OptimizeRecord.model_validate(data)
    except ValueError as exc:
        raise RunNotFound(f"{path} is unreadable: {damage(exc)}",
                          "the optimize's folder is damaged; start a new optimize") from None


def effective_optimize_status(record: OptimizeRecord, folder: Path) -> str:
    """As ``effective_status``: "running" while a live process holds it, "interrupted" when one
    recorded as running is held by none."""
    if lock_owner(folder) is not None:
        return "running"
    return "interrupted" if record.status == "running" else record.status


def list_optimizes(root: Path, damaged: list[Damaged] | None = None) -> list[OptimizeRecord]:
    """The optimizes under ``root``, newest first, each with its status as it is now; one that
    cannot be read is left out, and told in ``damaged`` with why."""
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        if not (folder / OPTIMIZE_JSON).is_file():
            continue
        try:
            record = read_record(folder)
        except (RunNotFound, RunUnreadable) as exc:
            if damaged is not None:
                damaged.append(Damaged(folder.name, "optimize", folder, why_damaged(exc, folder)))
            continue
        record.status = effective_optimize_status(record, folder)
        found.append(record)
    return sorted(found, key=lambda r: r.created_at, reverse=True)
