"""The run directory: ``.kevin/runs/<run-id>/`` with ``run.json``, ``turns.jsonl`` and ``kernels/``.

``turns.jsonl`` is append-only: one line per finished turn, flushed and fsynced before the
turn is reported, so a killed run loses at most the turn in flight and ``resume`` picks up
after the last line. A torn last line (killed mid-write) is ignored on read.

``run.json`` and every line of ``turns.jsonl`` carry ``schema`` (``results.versioned``): a run is
read (and resumed) only in a layout this version knows; one without it is of the first layout.

One process owns a run at a time (``lock``): the store that drives a run holds its lock,
and a run recorded as "running" that no live process holds is shown as "interrupted".
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from ..errors import RunNotFound, RunUnreadable
from ..results import BestKernel, RunInfo, TurnRecord
from ..results.versioned import RUN_SCHEMAS_READ
from .lock import RunLock, lock_owner

RUN_JSON = "run.json"
TURNS_JSONL = "turns.jsonl"
KERNELS = "kernels"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_toplevel(start: Path) -> Path | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def default_runs_root(start: Path | None = None) -> Path:
    """``.kevin/runs`` at the top of the git repository holding ``start``, else under ``start``."""
    start = (start or Path.cwd()).resolve()
    if start.is_file():
        start = start.parent
    return (git_toplevel(start) or start) / ".kevin" / "runs"


def new_run_id(task_name: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", task_name).strip("-").lower()[:24] or "task"
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` whole with ``text``, on disk before it is seen (a killed writer leaves the old file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class RunStore:
    """One run's directory."""

    def __init__(self, run_dir: Path, info: RunInfo) -> None:
        self.dir = run_dir
        self.info = info
        self.lock: RunLock | None = None
        """Held while this process drives the run."""

    # --- creation and lookup -------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, info: RunInfo) -> RunStore:
        """A new run directory, owned by this process (the lock is taken before run.json
        says "running", so no reader ever sees it unowned)."""
        run_dir = root / info.run_id
        (run_dir / KERNELS).mkdir(parents=True, exist_ok=False)
        store = cls(run_dir, info)
        store.take()
        try:
            store.save_info()
            (run_dir / TURNS_JSONL).touch()
        except BaseException:
            store.release()
            raise
        return store

    # --- ownership ---------------------------------------------------------------------------
    def take(self) -> None:
        """Own the run; ``RunLocked`` (exit 2) names the live process that already does."""
        if self.lock is None or not self.lock.held:
            self.lock = RunLock.acquire(self.dir, self.info.run_id)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    @classmethod
    def open(cls, root: Path, run_id: str) -> RunStore:
        run_dir = root / run_id
        if not (run_dir / RUN_JSON).is_file():
            matches = sorted(p.name for p in root.glob(f"{run_id}*") if (p / RUN_JSON).is_file()) if root.is_dir() else []
            if len(matches) == 1:
                run_dir = root / matches[0]
            else:
                hint = (
                    f"did you mean one of: {', '.join(matches[:5])}"
                    if matches
                    else "list runs with `kevin-opt history`"
                )
                raise RunNotFound(f"no run {run_id!r} in {root}", hint)
        return cls(run_dir, read_info(run_dir))

    # --- run.json ----------------------------------------------------------------------------
    def save_info(self) -> None:
        self.info.updated_at = now_iso()
        write_atomic(self.dir / RUN_JSON, self.info.model_dump_json(indent=2) + "\n")

    def update_info(self, **changes) -> None:
        for key, value in changes.items():
            setattr(self.info, key, value)
        self.save_info()

    # --- turns ----------------------------------------------------------------------------
    def kernel_relpath(self, trajectory: int, turn: int) -> str:
        return f"{KERNELS}/t{trajectory}_turn{turn}.py"

    def write_kernel(self, trajectory: int, turn: int, code: str) -> str:
        rel = self.kernel_relpath(trajectory, turn)
        write_atomic(self.dir / rel, code)
        return rel

    def append(self, record: TurnRecord) -> None:
        line = record.model_dump_json() + "\n"
        with open(self.dir / TURNS_JSONL, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def records(self) -> list[TurnRecord]:
        """The finished turns, one per (trajectory, turn)."""
        return read_records(self.dir)

    def all_records(self) -> list[TurnRecord]:
        """Every line of turns.jsonl, cancelled generations included, in the order written."""
        return read_records(self.dir, finished_only=False)

    def record(self, trajectory: int, turn: int) -> TurnRecord | None:
        for rec in self.records():
            if rec.trajectory == trajectory and rec.turn == turn:
                return rec
        return None


def damage(exc: BaseException) -> str:
    """What is wrong with a file that could not be read, in words (for a person, not a traceback)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{where}: {first['msg'].lower()}{more}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    if isinstance(exc, OSError):
        return exc.strerror or exc.__class__.__name__
    return str(exc) or exc.__class__.__name__


def read_info(run_dir: Path) -> RunInfo:
    path = run_dir / RUN_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunInfo.model_validate(_readable(data, path))
    except (OSError, ValueError) as exc:  # ValidationError is a ValueError
        raise RunNotFound(f"{path} is unreadable: {damage(exc)}",
                          "the run directory is damaged; start a new run") from None


def _readable(data, path: Path, line: int | None = None):
    """``data`` (a file's or a line's JSON) when its layout is one this version reads; a file
    without ``schema`` was written before layouts were numbered and is of the first."""
    schema = data.get("schema", 1) if isinstance(data, dict) else 1
    if schema not in RUN_SCHEMAS_READ:
        where = f"{path}" + (f", line {line}," if line is not None else "")
        known = ", ".join(map(str, sorted(RUN_SCHEMAS_READ)))
        raise RunUnreadable(f"{where} is of layout (schema) {schema!r}; this kevin-opt reads {known}",
                            "a newer kevin-opt wrote it: show or resume it with that version, or start a new run")
    return data


def read_records(run_dir: Path, *, finished_only: bool = True, strict: bool = False) -> list[TurnRecord]:
    """The run's turns: by default the finished ones, the first line per (trajectory, turn).
    ``strict``: a line that is not a turn record anywhere but last (where a killed write leaves
    one) raises ``RunNotFound`` saying which and why, instead of being passed over."""
    path = run_dir / TURNS_JSONL
    if not path.exists():
        return []
    records: list[TurnRecord] = []
    seen: set[tuple[int, int]] = set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError) as exc:
        raise RunNotFound(f"{path} is unreadable: {damage(exc)}",
                          "the run directory is damaged; start a new run") from None
    last = max((n for n, raw in enumerate(lines, 1) if raw.strip()), default=0)
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = TurnRecord.model_validate(_readable(json.loads(raw), path, number))
        except ValueError as exc:  # not JSON, or not a turn (ValidationError is a ValueError)
            if strict and number != last:
                raise RunNotFound(f"{path}, line {number}, is not a turn record: {damage(exc)}",
                                  "the run directory is damaged; start a new run") from None
            # Only a torn final write can produce this; the turn is redone on resume.
            continue
        if not finished_only:
            records.append(rec)
            continue
        if not rec.finished:
            continue
        key = (rec.trajectory, rec.turn)
        if key not in seen:
            seen.add(key)
            records.append(rec)
    return records


def effective_status(info: RunInfo, run_dir: Path) -> str:
    """The run's status as it is now: "running" exactly while a live process holds the run; one
    recorded as running that no process holds was killed (``kill -9``, a crash) and is
    "interrupted"."""
    if lock_owner(run_dir) is not None:
        return "running"
    return "interrupted" if info.status == "running" else info.status


class Damaged(NamedTuple):
    """A stored record that could not be read: which folder, what kind, and why."""

    name: str
    kind: str
    """run | optimize | bench"""
    path: Path
    why: str


def why_damaged(exc: RunNotFound | RunUnreadable, folder: Path) -> str:
    """The error's message, its paths said from inside ``folder`` (a listing names the folder)."""
    return exc.message.replace(f"{folder}{os.sep}", "")


def list_runs(root: Path, damaged: list[Damaged] | None = None) -> list[tuple[RunInfo, list[TurnRecord]]]:
    """Runs under ``root``, newest first, each with ``status`` as ``effective_status`` has it and
    ``best`` as it stands. A run whose run.json or turns.jsonl cannot be read (damaged, or of
    another version's layout) is left out, and told in ``damaged`` with why."""
    if not root.is_dir():
        return []
    runs = []
    for run_dir in root.iterdir():
        if not (run_dir / RUN_JSON).is_file():
            if (run_dir / TURNS_JSONL).is_file() and damaged is not None:
                damaged.append(Damaged(run_dir.name, "run", run_dir, f"{RUN_JSON} is missing"))
            continue
        try:
            info, records = read_info(run_dir), read_records(run_dir, strict=True)
        except (RunNotFound, RunUnreadable) as exc:  # damaged, or another version's
            if damaged is not None:
                damaged.append(Damaged(run_dir.name, "run", run_dir, why_damaged(exc, run_dir)))
            continue
        recorded, info.status = info.status, effective_status(info, run_dir)
        if "running" in (recorded, info.status) or (info.best is None and info.confirmation is None):
            # run.json is brought up to date when a run ends; until then (or when it was killed
            # before it could) the best so far is that of the finished turns.
            info.best = BestKernel.of(records, run_dir) or info.best
        runs.append((info, records))
    runs.sort(key=lambda r: r[0].created_at, reverse=True)
    return runs
