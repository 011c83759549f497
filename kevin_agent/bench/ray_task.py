"""What a Ray task runs on the node that took it: one bench task, in a folder of its own.

Nothing of the head's file system is assumed on the node: the task file's source, its script
(for a replaying backend) and an unfinished run of it (to resume) come in the payload, and the
run directory goes back to the head as a compressed tar, with the task's row. The node needs
kevin-opt installed (the same version) and, for cuda, its GPU; Ray gives the task one
(``CUDA_VISIBLE_DEVICES``), and the run's evaluation uses it as a run on that machine would.
A bench interrupted on the head stops its tasks through a ``Stop`` actor: each task's run ends as
an interrupted run does and still comes back, to be resumed from its last finished turn.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path

from ..results.bench import BenchTask
from ..store import list_runs

POLL_S = 1.0
"""How often a task asks the head's ``Stop`` whether the bench was interrupted."""


def pack(run_dir: Path) -> bytes:
    """A run directory as a gzipped tar, its own folder at the top."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(run_dir, arcname=run_dir.name, filter=lambda m: None if m.name.endswith("/lock") else m)
    return buffer.getvalue()


def unpack(data: bytes, runs_root: Path, task_path: Path) -> Path:
    """Write a packed run directory under ``runs_root`` (replacing what was there) and point its
    run.json at ``task_path``, where the task file is on this machine (so resume and show find it)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        (name,) = names
        target = runs_root / name
        if target.exists():
            shutil.rmtree(target)
        runs_root.mkdir(parents=True, exist_ok=True)
        tar.extractall(runs_root, filter="data")
    run_json = target / "run.json"
    data_ = json.loads(run_json.read_text(encoding="utf-8"))
    data_["task"]["path"] = str(task_path)
    tmp = run_json.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data_, indent=2) + "\n", encoding="utf-8")
    tmp.replace(run_json)
    return target


class Stop:
    """A Ray actor of the head's that says the bench was interrupted: each task asks it once a
    second and, once told, aborts its run as a signal would on one machine, so the run ends as
    interrupted with its finished turns and goes back to the head as the task's own return value
    (which ``ray.cancel`` would have thrown away)."""

    def __init__(self) -> None:
        self.stopped = False

    def set(self) -> None:
        self.stopped = True

    def is_set(self) -> bool:
        return self.stopped


class _Watch:
    """Aborts the task's engine once the head's ``Stop`` is set (asked every ``POLL_S``)."""

    def __init__(self, stop) -> None:
        self.stop = stop
        self.told = threading.Event()
        self.done = threading.Event()
        self.engine = None
        self._lock = threading.Lock()
        threading.Thread(target=self._poll, name="kevin-bench-stop", daemon=True).start()

    def _poll(self) -> None:
        import ray

        while not self.done.wait(POLL_S):
            try:
                told = ray.get(self.stop.is_set.remote(), timeout=POLL_S * 10)
            except Exception:  # noqa: BLE001 - the head gone: Ray ends this task itself
                continue
            if told:
                self.told.set()
                self._abort()
                return

    def _abort(self) -> None:
        with self._lock:
            engine = self.engine
        if engine is not None:
            engine.abort()

    def on_engine(self, engine) -> None:
        with self._lock:
            self.engine = engine
        if engine is not None and self.told.is_set():
            engine.abort()


def run_payload(payload: dict, stop=None) -> dict:
    """The Ray task: run the bench task the payload describes; its row and its packed run back
    (no row: the run was interrupted, when the head set ``stop``, a ``Stop`` actor)."""
    from ..config import load_config
    from ..registry import build_registry
    from ..run.launch import open_backend
    from ..workers import kill_all_workers
    from .one_task import run_task

    task = BenchTask.model_validate(payload["task"])
    watch = _Watch(stop) if stop is not None else None
    folder = Path(tempfile.mkdtemp(prefix="kevin-bench-task-"))
    try:
        task_file = folder / "task" / Path(task.path).name
        task_file.parent.mkdir()
        task_file.write_text(payload["source"], encoding="utf-8")
        runs_root = folder / "runs"
        runs_root.mkdir()
        overrides = dict(payload["settings"])
        if payload.get("script") is not None:
            scripts = folder / "responses"
            scripts.mkdir()
            (scripts / f"{task_file.stem}.jsonl").write_text(payload["script"], encoding="utf-8")
            overrides["responses"] = scripts
        if payload.get("api_key"):
            overrides["api_key"] = payload["api_key"]
        if payload.get("partial") is not None:
            unpack(payload["partial"], runs_root, task_file)
        config = load_config(overrides)
        registry = build_registry()
        backend = open_backend(config, registry)
        try:
            outcome = run_task(task, config, runs_root, backend=backend, registry=registry, sink=_Quiet(),
                               task_path=task_file, on_engine=watch.on_engine if watch else lambda engine: None)
        finally:
            backend.close()
        runs = [info.run_id for info, _ in list_runs(runs_root)]
        run_id = outcome.run_id or (runs[0] if runs else None)
        return {"result": outcome.result.model_dump_json() if outcome.result is not None else None,
                "run": pack(runs_root / run_id) if run_id else None}
    finally:
        if watch is not None:
            watch.done.set()
        kill_all_workers()
        shutil.rmtree(folder, ignore_errors=True)


class _Quiet:
    """The run's events stay on the node: the head hears each task as it ends."""

    def emit(self, event) -> None:
        pass
