"""A bench's folder: ``.kevin/benches/<bench-id>/``.

    bench.json     what the bench is and how far it got (``BenchInfo``)
    tasks.jsonl    one ``TaskResult`` per finished task, appended and fsynced as each ends
    runs/          each task's run directory (``kevin-opt show RUN`` finds them)
    kernels/       each task's best kernel, ``<task id>.py``
    table.json, table.csv, table.md, fast_p.png   the table, rewritten as tasks end

A task counts once: the first line of ``tasks.jsonl`` for a task id is its result, and ``record``
refuses a second (a Ray task retried after its node died may come back after another copy did).
One process drives a bench at a time (the same lock as a run's).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from ..errors import RunNotFound, RunUnreadable
from ..results.bench import BENCH_SCHEMAS_READ, BenchInfo, TaskResult
from ..store import RunLock, default_runs_root, lock_owner, now_iso, write_atomic

BENCH_JSON = "bench.json"
TASKS_JSONL = "tasks.jsonl"
RUNS = "runs"
KERNELS = "kernels"


def default_benches_root(start: Path | None = None) -> Path:
    """``.kevin/benches`` beside ``.kevin/runs`` (at the top of the git repository holding ``start``)."""
    return default_runs_root(start).parent / "benches"


def new_bench_id(paths) -> str:
    names = "-".join(Path(p).name.removesuffix(".txt") for p in paths[:2]) or "bench"
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", names).strip("-").lower()[:24] or "bench"
    return f"bench-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def _readable(data, path: Path) -> dict:
    schema = data.get("schema", 1) if isinstance(data, dict) else 1
    if schema not in BENCH_SCHEMAS_READ:
        raise RunUnreadable(f"{path} is of layout (schema) {schema!r}; this kevin-opt reads "
                            + ", ".join(map(str, sorted(BENCH_SCHEMAS_READ))),
                            "a newer kevin-opt wrote it: show or resume it with that version")
    return data


class BenchStore:
    """One bench's folder."""

    def __init__(self, bench_dir: Path, info: BenchInfo) -> None:
        self.dir = bench_dir
        self.info = info
        self.lock: RunLock | None = None

    @property
    def runs_root(self) -> Path:
        return self.dir / RUNS

    @property
    def kernels_dir(self) -> Path:
        return self.dir / KERNELS

    @classmethod
    def create(cls, root: Path, info: BenchInfo) -> BenchStore:
        bench_dir = root / info.bench_id
        (bench_dir / RUNS).mkdir(parents=True, exist_ok=False)
        (bench_dir / KERNELS).mkdir()
        store = cls(bench_dir, info)
        store.take()
        store.save_info()
        (bench_dir / TASKS_JSONL).touch()
        return store

    @classmethod
    def open(cls, root: Path, bench_id: str) -> BenchStore:
        bench_dir = root / bench_id
        if not (bench_dir / BENCH_JSON).is_file():
            matches = sorted(p.name for p in root.glob(f"{bench_id}*") if (p / BENCH_JSON).is_file()) \
                if root.is_dir() else []
            if len(matches) != 1:
                raise RunNotFound(f"no bench {bench_id!r} in {root}",
                                  f"did you mean one of: {', '.join(matches[:5])}" if matches
                                  else "list benches with `kevin-opt history`")
            bench_dir = root / matches[0]
        return cls(bench_dir, read_bench_info(bench_dir))

    # --- ownership ------------------------------------------------------------------------
    def take(self) -> None:
        if self.lock is None or not self.lock.held:
            self.lock = RunLock.acquire(self.dir, self.info.bench_id)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def status(self) -> str:
        """As ``store.effective_status``: a bench marked running that no live process holds was killed."""
        if lock_owner(self.dir) is not None:
            return "running"
        return "interrupted" if self.info.status == "running" else self.info.status

    # --- bench.json ---------------------------------------------------------------------
    def save_info(self) -> None:
        self.info.updated_at = now_iso()
        write_atomic(self.dir / BENCH_JSON, self.info.model_dump_json(indent=2) + "\n")

    def update_info(self, **changes) -> None:
        for key, value in changes.items():
            setattr(self.info, key, value)
        self.save_info()

    # --- results ------------------------------------------------------------------------
    def results(self) -> dict[str, TaskResult]:
        """Each finished task's result by task id: the first line for it."""
        return read_results(self.dir)

    def record(self, result: TaskResult) -> bool:
        """Append ``result`` unless its task already has one; True when it was written."""
        if result.task_id in self.results():
            return False
        with open(self.dir / TASKS_JSONL, "a", encoding="utf-8") as fh:
            fh.write(result.model_dump_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return True

    def pending(self) -> list:
        """The tasks without a result, in the bench's order."""
        done = self.results()
        return [t for t in self.info.tasks if t.task_id not in done]

    def kernel_path(self, task_id: str) -> Path:
        return self.kernels_dir / f"{task_id.replace('/', '__')}.py"


def read_bench_info(bench_dir: Path) -> BenchInfo:
    path = bench_dir / BENCH_JSON
    try:
        return BenchInfo.model_validate(_readable(json.loads(path.read_text(encoding="utf-8")), path))
    except (OSError, ValueError) as exc:
        raise RunNotFound(f"{path} is unreadable ({exc.__class__.__name__})", "the bench folder is damaged") from None


def read_results(bench_dir: Path) -> dict[str, TaskResult]:
    path = bench_dir / TASKS_JSONL
    out: dict[str, TaskResult] = {}
    if not path.exists():
        return out
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.strip():
            continue
        try:
            result = TaskResult.model_validate(_readable(json.loads(raw), path))
        except (json.JSONDecodeError, ValidationError):
            continue  # a torn final write: the task runs again
        out.setdefault(result.task_id, result)
    return out


def list_benches(root: Path) -> list[BenchStore]:
    """The benches under ``root``, newest first; damaged ones skipped."""
    if not root.is_dir():
        return []
    found = []
    for bench_dir in root.iterdir():
        if (bench_dir / BENCH_JSON).is_file():
            try:
                found.append(BenchStore(bench_dir, read_bench_info(bench_dir)))
            except (RunNotFound, RunUnreadable):
                continue
    found.sort(key=lambda s: s.info.created_at, reverse=True)
    return found


def find_run_dir(run_id: str, benches_root: Path) -> Path | None:
    """The runs folder of the bench holding run ``run_id`` (or a unique prefix of it), if any."""
    if not benches_root.is_dir():
        return None
    for bench_dir in benches_root.iterdir():
        runs = bench_dir / RUNS
        if runs.is_dir() and any(runs.glob(f"{run_id}*/run.json")):
            return runs
    return None
