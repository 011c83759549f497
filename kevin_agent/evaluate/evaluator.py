"""``LocalEvaluator``: compile candidates in parallel, then check and time them one at a time.

Phase 1 builds every candidate of a call in its own worker, ``parallel_compiles`` at once,
through the build cache (an identical source builds once). Phase 2 runs one worker per built
candidate, sequentially and holding a lock on the device, so timings never overlap.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..config import EvalSettings
from ..errors import EnvironmentUnavailable, TaskError
from ..protocols import StageCallback
from ..results import EvalResult, Stage, Status
from ..task import Task, TaskProbe
from . import cache
from .logs import tail, trim_compile_error
from .pool import WorkerRun, kill_all_workers, run_worker, scrubbed_env


def detect_device() -> Literal["cuda", "cpu"]:
    """cuda when torch was built with CUDA and ``nvidia-smi`` lists a GPU; no CUDA context is made."""
    if not cache.torch_cuda_version():
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    return "cuda" if out.returncode == 0 and "GPU" in out.stdout else "cpu"


def host_device_name(device: str) -> str:
    """The device's name without starting a worker (the probe refines it)."""
    if device == "cuda":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=False)
            return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
        except (OSError, subprocess.SubprocessError):
            return ""
    return cache.cpu_name()


@dataclass
class _Build:
    ok: bool
    folder: Path
    cached: bool = False
    compile_s: float = 0.0
    log: str = ""
    error: str = ""
    status: Status = Status.COMPILE_ERROR


class LocalEvaluator:
    """Evaluates candidates for one task on this machine (implements ``protocols.Evaluator``)."""

    def __init__(self, task: Task, settings: EvalSettings) -> None:
        self.task = task
        self.settings = settings
        self.device = settings.device
        self.device_name = host_device_name(self.device)
        self._worker_versions: dict[str, str] = {}
        self._lock = threading.Lock()
        self._aborted = threading.Event()
        self._device_free = threading.Event()
        self._device_free.set()
        self._builds = ThreadPoolExecutor(max_workers=settings.parallel_compiles, thread_name_prefix="kevin-eval")
        self.settings.cache_dir.mkdir(parents=True, exist_ok=True)

    # --- environment ---------------------------------------------------------------------
    def _env(self, build_folder: Path | None) -> dict[str, str]:
        # One compile thread: inductor's process pool costs more to start than a small graph takes.
        extra = {"TORCHINDUCTOR_CACHE_DIR": str(self.settings.cache_dir / "inductor"),
                 "TORCHINDUCTOR_COMPILE_THREADS": "1"}
        if build_folder is not None:
            extra["TORCH_EXTENSIONS_DIR"] = str(build_folder)
        extra.update(cache.toolchain_env(self.device))
        if self.settings.visible_devices is not None:
            # The GPU placement chose the kernels' GPU: the worker's cuda:0 is that one.
            extra["CUDA_VISIBLE_DEVICES"] = self.settings.visible_devices
        return scrubbed_env(extra)

    def _job(self, mode: str, candidate: Path | None = None) -> dict:
        return dict(mode=mode, settings=self.settings, task_path=str(self.task.path),
                    class_name=self.task.class_name, candidate_path=str(candidate or ""))

    # --- probe ---------------------------------------------------------------------------
    def probe(self) -> TaskProbe:
        """Build the task once in a worker; raise TaskError / EnvironmentUnavailable if it can't."""
        if self.device == "cuda" and detect_device() != "cuda":
            raise EnvironmentUnavailable("the cuda device was asked for but no NVIDIA GPU is visible",
                                         hint="run on a machine with a GPU, or pass --device cpu")
        with tempfile.TemporaryDirectory(prefix="kevin-probe-") as tmp:
            run = run_worker(self._job("probe"), env=self._env(Path(tmp)), timeout_s=self.settings.run_timeout_s)
        reply = run.reply
        where = str(self.task.path)
        if reply is None:
            what = (f"building the task's inputs timed out after {self.settings.run_timeout_s:g} s"
                    if run.timed_out else f"building the task crashed: {run.died()}\n{tail(run.log, 10)}")
            raise TaskError(f"{where}: {what}", hint="run the file's get_inputs() and Model by hand")
        if reply.error_kind == "environment":
            raise EnvironmentUnavailable(reply.error, hint="pass --device cpu to run on the CPU")
        if not reply.ok or reply.probe is None:
            raise TaskError(f"{where}: {reply.error}", hint="fix the task file so that "
                            f"{self.task.class_name}(*get_init_inputs())(*get_inputs()) runs")
        self.device_name = reply.device_name or self.device_name
        self._worker_versions = reply.versions
        self.task.probe = reply.probe
        return reply.probe

    def versions(self) -> dict[str, str]:
        return {**cache.toolchain(self.device), **self._worker_versions}

    # --- phase 1 -------------------------------------------------------------------------
    def _build(self, source: str) -> _Build:
        key = cache.build_key(source, self.device, self.settings.fast_build)
        folder = self.settings.cache_dir / key
        folder.mkdir(parents=True, exist_ok=True)
        candidate = folder / "candidate.py"
        if cache.is_built(folder) and candidate.is_file():
            return _Build(ok=True, folder=folder, cached=True)
        candidate.write_text(source, encoding="utf-8")
        cache.clear_locks(folder)
        run = run_worker(self._job("compile", candidate), env=self._env(folder),
                         timeout_s=self.settings.compile_timeout_s)
        log = run.log[-200_000:]
        if run.timed_out:
            cache.clear_locks(folder)
            return _Build(ok=False, folder=folder, compile_s=run.wall_s, log=log, status=Status.TIMEOUT,
                          error=f"compile timed out after {self.settings.compile_timeout_s:g} s "
                          "(compile_timeout_s); the build was killed")
        if run.reply is None:
            cache.clear_locks(folder)
            return _Build(ok=False, folder=folder, compile_s=run.wall_s, log=log,
                          error=f"{run.died()} while building\n{tail(run.log)}")
        if not run.reply.ok:
            compiler = trim_compile_error(log, str(folder)) if "rror" in log else ""
            error = run.reply.error if not compiler else f"{compiler}\n{run.reply.error.splitlines()[-1]}"
            return _Build(ok=False, folder=folder, compile_s=run.wall_s, log=log, error=error)
        cache.mark_built(folder, run.wall_s)
        return _Build(ok=True, folder=folder, compile_s=run.wall_s, log=log)

    # --- phase 2 -------------------------------------------------------------------------
    def _run(self, build: _Build, on_stage) -> EvalResult:
        s = self.settings
        lock_path = s.cache_dir / f".{self.device}.lock"
        with self._lock, open(lock_path, "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            run = run_worker(self._job("run", build.folder / "candidate.py"), env=self._env(build.folder),
                             timeout_s=s.run_timeout_s, on_stage=on_stage)
        if run.reply is None:
            cache.clear_locks(build.folder)
        return self._from_run(run)

    def _from_run(self, run: WorkerRun) -> EvalResult:
        stage = run.stage or Stage.LOAD
        if run.timed_out:
            return EvalResult(status=Status.TIMEOUT, stage=stage, wall_s=run.wall_s,
                              error=f"timed out after {self.settings.run_timeout_s:g} s during "
                              f"{stage.value} (run_timeout_s); the worker and its children were killed")
        if run.reply is None or run.reply.eval is None:
            detail = run.reply.error if run.reply is not None else f"{run.died()} during {stage.value}"
            return EvalResult(status=Status.RUNTIME_ERROR, stage=stage, wall_s=run.wall_s,
                              error=f"{detail}\n{tail(run.log)}".strip())
        return run.reply.eval.model_copy(update={"wall_s": run.wall_s})

    def evaluate(self, sources: Sequence[str], *, on_stage: StageCallback | None = None) -> list[EvalResult]:
        """One result per source, in order; a bad candidate gives a failed result, never an exception."""
        started = time.monotonic()
        keys = [cache.build_key(src, self.device, self.settings.fast_build) for src in sources]
        unique = {k: src for k, src in zip(keys, sources)}
        for i in range(len(sources)):
            if on_stage:
                on_stage(i, Stage.COMPILE)
        with ThreadPoolExecutor(max_workers=self.settings.parallel_compiles) as pool:
            builds = dict(zip(unique, pool.map(self._build, unique.values())))
        results: list[EvalResult] = []
        for i, key in enumerate(keys):
            build = builds[key]
            common = dict(device=self.device, device_name=self.device_name, compile_log=build.log,
                          compile_s=build.compile_s, cached_build=build.cached)
            if not build.ok:
                res = EvalResult(status=build.status, stage=Stage.COMPILE, error=build.error,
                                 wall_s=time.monotonic() - started, **common)
            elif self._aborted.is_set():
                res = EvalResult(status=Status.RUNTIME_ERROR, stage=Stage.LOAD, error="the run was interrupted",
                                 **common)
            else:
                t0 = time.monotonic()
                res = self._run(build, (lambda st, i=i: on_stage(i, st)) if on_stage else None)
                res = res.model_copy(update={**common, "wall_s": build.compile_s + (time.monotonic() - t0)})
            results.append(res)
        return results

    # --- one candidate at a time, as answers arrive ----------------------------------------
    def submit(self, source: str, *, on_stage=None, on_output=None) -> Future[EvalResult]:
        """Build now (threads, ``parallel_compiles`` at once); run once the device is free."""
        future: Future[EvalResult] = Future()

        def evaluate_one() -> None:
            try:
                if on_stage:
                    on_stage(Stage.COMPILE)
                started = time.monotonic()
                build = self._build(source)
                common = dict(device=self.device, device_name=self.device_name, compile_log=build.log,
                              compile_s=build.compile_s, cached_build=build.cached)
                if not build.ok:
                    future.set_result(EvalResult(status=build.status, stage=Stage.COMPILE, error=build.error,
                                                 wall_s=time.monotonic() - started, **common))
                    return
                self._device_free.wait()
                if self._aborted.is_set():
                    future.set_result(EvalResult(status=Status.RUNTIME_ERROR, stage=Stage.LOAD,
                                                 error="the run was interrupted", **common))
                    return
                t0 = time.monotonic()
                res = self._run(build, on_stage)
                future.set_result(res.model_copy(update={**common, "wall_s": build.compile_s + time.monotonic() - t0}))
            except BaseException as exc:  # the future must always resolve
                future.set_exception(exc)

        self._builds.submit(evaluate_one)
        return future

    @contextlib.contextmanager
    def device_busy(self):
        self._device_free.clear()
        try:
            yield
        finally:
            self._device_free.set()

    def abort(self) -> None:
        """Kill every worker and compiler now; what is still to evaluate is not started."""
        self._aborted.set()
        self._device_free.set()
        kill_all_workers()

    def close(self) -> None:
        """Nothing stays running between calls; builds stay in the cache."""
        self._builds.shutdown(wait=False, cancel_futures=True)
