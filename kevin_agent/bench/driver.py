"""A bench from start to end, whatever runs its tasks: made (or taken to resume), each result
recorded once with its kernel kept, the table rewritten as tasks end, the end said in bench.json.

The runner is the only part that differs: ``local`` (tasks in turn on this machine, one backend)
or ``on_ray`` (a Ray task per task file). Both call ``finish_task`` on the head for each result.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from ..config import RunConfig
from ..errors import KevinError, UsageError
from ..events import Event
from ..protocols import BenchSink
from ..results.bench import BenchInfo, TaskResult
from ..results.winner import winner
from ..store import now_iso, read_info, read_records
from .store import BenchStore, new_bench_id
from .table import write_table
from .tasks import scan

SETTINGS = ("turns", "trajectories", "search", "beam_width", "backend", "model", "base_url", "responses", "device",
            "tolerance", "atol", "rtol", "class_name", "target_speedup", "stop_at_roofline", "correctness_trials",
            "timed_runs", "warmup_runs", "compare_compile", "confirm_top", "confirm_rounds", "confirm_workers",
            "temperature", "max_tokens", "context_tokens", "quantization", "kv_cache_dtype", "seed", "cpu_threads",
            "reference_tf32", "fast_build")
"""The run settings a bench records and gives every task (the flags given; the rest are each run's defaults)."""


def bench_settings(overrides: dict) -> dict:
    """The settings a bench keeps: JSON-ready, paths as text, secrets never."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in overrides.items() if k in SETTINGS and v is not None}


def new_bench(paths: Sequence[Path], config: RunConfig, settings: dict, root: Path, *, where: str,
              model: str) -> BenchStore:
    """A new bench over the task files ``paths`` name (``UsageError`` when they name none)."""
    found = scan(paths)
    tasks = found.tasks
    if not tasks:
        raise UsageError("no task files to bench", "pass folders of task files or a text file listing them")
    info = BenchInfo(bench_id=new_bench_id([str(p) for p in paths]), created_at=now_iso(),
                     paths=[str(Path(p).resolve()) for p in paths], tasks=tasks, settings=settings,
                     device=config.device or "", backend=config.backend, model=model,
                     trajectories=config.trajectories, turns=config.turns, where=where, skipped=found.skipped)
    root.mkdir(parents=True, exist_ok=True)
    return BenchStore.create(root, info)


def keep_kernel(store: BenchStore, result: TaskResult) -> TaskResult:
    """Copy the task's best kernel from its run directory to ``kernels/<task>.py`` and name it in the row."""
    if result.run_id is None or not result.correct:
        return result
    run_dir = store.runs_root / result.run_id
    try:
        best = winner(read_info(run_dir), read_records(run_dir))
    except Exception:  # noqa: BLE001 - a damaged run directory keeps its row without the kernel
        return result
    if best is None or not best.record.kernel_path:
        return result
    target = store.kernel_path(result.task_id)
    shutil.copyfile(run_dir / best.record.kernel_path, target)
    return result.model_copy(update={"kernel": str(target.relative_to(store.dir))})


def finish_task(store: BenchStore, result: TaskResult, sink: BenchSink, *, device_name: str = "") -> bool:
    """Record a task's result on the head (once: a second result for it is ignored), keep its kernel
    and rewrite the table. True when it was recorded."""
    if result.task_id in store.results():
        sink.task_finished(result, False)
        return False
    result = keep_kernel(store, result)
    recorded = store.record(result)
    if recorded:
        write_table(store, device_name=device_name)
    sink.task_finished(result, recorded)
    return recorded


def device_name_of(store: BenchStore) -> str:
    """The device the bench's runs name (for the table's head)."""
    for result in store.results().values():
        if result.run_id and (store.runs_root / result.run_id / "run.json").is_file():
            try:
                return read_info(store.runs_root / result.run_id).device_name
            except KevinError:
                continue
    return ""


class TaskEvents:
    """A task's run events, passed on to the bench's sink with the task's id (an ``EventSink``)."""

    def __init__(self, sink: BenchSink, task_id: str) -> None:
        self.sink, self.task_id = sink, task_id

    def emit(self, event: Event) -> None:
        self.sink.task_event(self.task_id, event)
