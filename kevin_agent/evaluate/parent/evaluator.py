"""``LocalEvaluator``: each candidate is built as soon as it is submitted, then checked and timed
in a worker of its own that was started before it was needed.

``probe`` builds the task and makes (or finds) the task's reference data (``reference``):
inputs, the reference's answers and timings, once per task and settings. ``submit`` starts a
candidate's pipeline on a thread of its own: a build slot (``parallel_compiles`` at once,
through the build cache, an identical source building once), then a ready worker from the
warm pool (``warm``) that loads it, checks it while sharing the device with other checks, and
times it with the device to itself (``gate``). ``device_busy`` holds every timing back while
the model generates on the evaluation device. Each stage of a worker has its own time limit,
derived from the reference's time (``reference.stage_limit``); every wait and every stage is
clocked into the result's ``stage_s``.

Memory (``memory``): the probe measures the task's footprint and refuses a task whose evaluation
does not fit the device's free memory, before any turn; how many candidates are checked at once
and how many workers wait follow from the footprint. When an evaluation itself runs out of
memory it is tried once more, poisoning less; a second failure ends the run with
``EvaluationOutOfMemory`` (as a worker that cannot get ready ends it with the task's error):
neither is ever a candidate's result.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path

from ...config import EvalSettings
from ...errors import EvaluationOutOfMemory, KevinError, TaskError
from ...protocols import CandidateStageCallback, OutputCallback, StageCallback
from ...results import Confirmation, EvalResult, Stage, Status
from ...task import Task, TaskProbe
from ..toolchain import cache, triton_build
from .. import memory
from .. import reference
from .builds import Build, Builds, ToolchainWarmer, acquire
from .confirmation import Confirmations
from .gate import DeviceGate, GaveUp, Holding
from ...workers import Go, Limit, Message, StageClock, WorkerProcess, WorkerRun, WorkerSet, scrubbed_env
from ..jobs import INTERRUPTED, Assignment, EvalWorker
from .logs import tail
from ..memory import Footprint
from .machine import default_eval_workers, device_facts, gpu_free_bytes, host_device_name
from .probe import probe_task
from .warm import Need, WarmPool, WorkerFailed

class LocalEvaluator:
    """Evaluates candidates for one task on this machine (implements ``protocols.Evaluator``)."""

    def __init__(self, task: Task, settings: EvalSettings) -> None:
        self.task = task
        self.settings = settings
        self.device = settings.device
        self.device_name = host_device_name(self.device, settings.visible_devices)
        self.device_facts = device_facts(settings.visible_devices) if self.device == "cuda" else None
        self._host_device = self.device_name
        """The name the reference data is keyed by (the probe may refine ``device_name``)."""
        self._worker_versions: dict[str, str] = {}
        self._aborted = threading.Event()
        self.settings.cache_dir.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="kevin-eval-"))
        """Every worker's folder lives under here, and goes when the worker does."""
        self.gate = DeviceGate(self.settings.cache_dir / f".{self.device}.lock")
        self.workers_running = WorkerSet()
        """Every worker and compiler this evaluator has running (all killed at once on abort)."""
        self.builds = Builds(settings, job=lambda: self.job("compile"), env=self.env, scratch=self.scratch,
                             registry=self.workers_running, gate=self.gate, aborted=self._aborted)
        self._threads: set[threading.Thread] = set()
        self._reapers: set[threading.Thread] = set()
        """Threads waiting for finished run workers to end (``_retire``)."""
        self.reference: reference.ReferenceData | None = None
        """The task's reference data (after ``probe``)."""
        self._probe_lock = threading.Lock()
        self.footprint: Footprint | None = None
        """The task's own device memory, as the probe measured it."""
        self.capacity_bytes: int | None = None
        """The device memory the evaluation may use, as the probe found it."""
        self.workers = workers = settings.eval_workers or default_eval_workers(self.device)
        self.at_once = workers
        """Candidates checked at the same time (fewer when the task's memory allows no more)."""
        self._run_slots = threading.BoundedSemaphore(workers)
        self.pool = WarmPool(self._start_run_worker, size=workers, gate=self.gate, give_up=self._aborted.is_set,
                             prep_limit=Limit(settings.run_timeout_s, f"run_timeout_s = {settings.run_timeout_s:g} s"),
                             registry=self.workers_running, room=self._gpu_room, share_device=self.device == "cuda")
        self._room_checked = (0.0, True)
        self.confirmations = Confirmations(self)
        self.warmer: ToolchainWarmer | None = None
        if self.device == "cuda" and settings.fast_build and settings.language == "cuda":
            # The precompiled bindings headers take half a minute to make, once per machine: made
            # while the model writes its first responses, they are there for the first cold build.
            self.warmer = ToolchainWarmer(settings.cache_dir, self.device)
            self.warmer.start()
        # Waiting workers exit when their pipe closes; this stops them sooner, and at exit.
        self._finalizer = weakref.finalize(self, _close_quietly, [self.pool, self.builds.pool], self.scratch)

    @property
    def aborted(self) -> bool:
        """The evaluator was aborted: every wait gives up, every pending result is interrupted."""
        return self._aborted.is_set()

    # --- environment ---------------------------------------------------------------------
    def env(self, build_folder: Path | None) -> dict[str, str]:
        """A worker's environment: scrubbed, with its extensions folder and the toolchain's variables."""
        # One compile thread: inductor's process pool costs more to start than a small graph takes.
        extra = {"TORCHINDUCTOR_CACHE_DIR": str(self.settings.cache_dir / "inductor"),
                 "TORCHINDUCTOR_COMPILE_THREADS": "1"}
        if build_folder is not None:
            extra["TORCH_EXTENSIONS_DIR"] = str(build_folder)
        extra.update(cache.toolchain_env(self.device))
        if self.settings.language == "triton":
            extra.update(triton_build.worker_env(self.settings.cache_dir, self.device))
        if self.settings.visible_devices is not None:
            # The GPU placement chose the kernels' GPU: the worker's cuda:0 is that one.
            extra["CUDA_VISIBLE_DEVICES"] = self.settings.visible_devices
        return scrubbed_env(extra)

    def job(self, mode: str, candidate: Path | None = None) -> dict:
        """The fields of a worker's job file for ``mode`` (the worker adds its pipes and reply path)."""
        return dict(mode=mode, settings=self.settings, task_path=str(self.task.path),
                    class_name=self.task.class_name, candidate_path=str(candidate or ""),
                    reference_dir=str(self._reference_dir()))

    def _reference_dir(self) -> Path:
        key = reference.reference_key(self.task, self.settings, self._host_device)
        return self.settings.cache_dir / "reference" / key

    def _start_run_worker(self) -> WorkerProcess:
        folder = self.scratch / "extensions"  # a build a candidate would start goes nowhere shared
        return EvalWorker(self.job("run"), env=self.env(folder), root=self.scratch)

    def _gpu_room(self) -> bool:
        """Whether the evaluation GPU has room for another worker (asked at most every 2 s)."""
        if self.device != "cuda":
            return True
        checked_at, room = self._room_checked
        if time.monotonic() - checked_at > 2.0:
            # Another waiting worker, and still a whole evaluation's room beside it.
            fp = self.footprint
            need = memory.idle_worker(fp) + memory.per_worker(fp) if fp is not None else 1 << 30
            free = gpu_free_bytes(self.settings.visible_devices)
            room = free is None or free > need
            self._room_checked = (time.monotonic(), room)
        return room

    # --- probe ---------------------------------------------------------------------------
    def probe(self) -> TaskProbe:
        """Build the task once in a worker and make (or find) its reference data; raise
        TaskError / EnvironmentUnavailable if it can't. Workers start getting ready after it.
        Once per evaluator: a call while it runs (a candidate submitted before it, whose build
        went on beside it) waits for it and returns what it found."""
        with self._probe_lock:
            if self.reference is not None:  # made, with the task's probe, by an earlier call
                return self.task.probe
            return self._probe()

    def _probe(self) -> TaskProbe:
        reply, made = probe_task(self, self._reference_dir())
        self.device_name = reply.device_name or self.device_name
        self._worker_versions = reply.versions
        self.task.probe = reply.probe
        self.reference = made
        self.footprint, self.capacity_bytes = reply.footprint, reply.capacity_bytes
        if self.footprint is not None and self.capacity_bytes:
            # No candidate is running yet: the slots can still be resized.
            self.at_once, self.pool.size = memory.concurrency(self.footprint, self.capacity_bytes, self.workers)
            self._run_slots = threading.BoundedSemaphore(self.at_once)
        self.pool.open()
        return reply.probe

    def versions(self) -> dict[str, str]:
        return {**cache.toolchain(self.device), **self._worker_versions}

    # --- running ---------------------------------------------------------------------------
    def limit(self, phase: str) -> Limit:
        """How long a run worker's ``phase`` may take (``reference.stage_limit``)."""
        return reference.stage_limit(phase, self.settings, self.reference)

    def _run(self, build: Build, clock: StageClock, need: Need, on_stage: CandidateStageCallback | None,
             on_output: OutputCallback | None, lean: bool = False) -> WorkerRun:
        worker: WorkerProcess | None = None
        holding = Holding(self.gate, lambda: self._aborted.is_set() or (worker is not None and not worker.alive()))
        acquire(self._run_slots, self._aborted)
        try:
            worker = need.take()
            holding.share()
            clock.switch("load")
            worker.send(Assignment(candidate_path=str(build.folder / "candidate.py"), build_dir=str(build.folder),
                                   lean=lean))

            exceeded = worker.follow(limit=self.limit, answer=self.answer(holding), on_stage=on_stage,
                                     on_output=on_output, clock=clock, phase="load")
            holding.release()  # its work on the device is done: the next timing need not wait for its end
            run = worker.result(exceeded)
        finally:
            holding.release()
            if worker is not None:
                self._retire(worker)
            else:
                self._run_slots.release()
        if run.reply is None:
            cache.clear_locks(build.folder)
        return run

    def _retire(self, worker: WorkerProcess) -> None:
        """End a run worker in the background: its process's teardown is not the candidate's time,
        and its run slot (its share of the memory plan) is given back only once it is gone."""
        def reap() -> None:
            try:
                worker.remove()
            finally:
                self.workers_running.discard(worker)
                self._run_slots.release()
                self._reapers.discard(thread)

        thread = threading.Thread(target=reap, name="kevin-reap", daemon=True)
        self._reapers.add(thread)
        thread.start()

    def _checked(self, build: Build, clock: StageClock, need: Need, on_stage: CandidateStageCallback | None,
                 on_output: OutputCallback | None) -> EvalResult:
        """The candidate's result. An evaluation that ran out of memory in the harness's own work
        is tried once more, poisoning less; failing again, or the task failing, raises: it is not
        the candidate's result."""
        run = self._run(build, clock, need, on_stage, on_output)
        if run.error_kind == "harness" and not self._aborted.is_set():
            with self.pool.need() as again:
                run = self._run(build, clock, again, on_stage, on_output, lean=True)
        if not self._aborted.is_set() and (kind := run.error_kind) in ("harness", "task"):
            raise _failure(kind, run.reply.error, str(self.task.path))
        return self._from_run(run)

    def answer(self, holding: Holding) -> Callable[[str], Message]:
        """Answers to a worker's requests: ``want timing`` returns once the device is the
        worker's alone."""
        def answer(what: str) -> Message:
            if what == "timing":
                try:
                    holding.take()
                except GaveUp:
                    if self._aborted.is_set():
                        raise
            return Go()  # a worker that died meanwhile is seen to end by the follow loop
        return answer

    def _from_run(self, run: WorkerRun) -> EvalResult:
        stage = run.stage or Stage.LOAD
        if run.timed_out:
            limit = run.limit or self.limit(stage.value)
            return EvalResult(status=Status.TIMEOUT, stage=stage,
                              error=f"timed out after {limit.seconds:.3g} s during {stage.value}, the stage's "
                              f"limit ({limit.how}); the worker and its children were killed")
        if self._aborted.is_set():
            return _interrupted(stage)
        if run.reply is None or run.reply.eval is None:
            detail = run.reply.error if run.reply is not None else f"{run.died()} during {stage.value}"
            return EvalResult(status=Status.RUNTIME_ERROR, stage=stage, error=f"{detail}\n{tail(run.log)}".strip())
        return run.reply.eval

    # --- the Evaluator protocol ----------------------------------------------------------
    def submit(self, source: str, *, on_stage: CandidateStageCallback | None = None,
               on_output: OutputCallback | None = None) -> Future[EvalResult]:
        """Start evaluating one candidate now; the future resolves to an ``EvalResult``, or to a
        ``KevinError`` when the task or the machine cannot evaluate it (``_checked``)."""
        future: Future[EvalResult] = Future()
        future.set_running_or_notify_cancel()
        clock = StageClock()
        need = self.pool.need()
        thread = threading.Thread(target=self._pipeline, args=(source, future, clock, need, on_stage, on_output),
                                  name="kevin-eval", daemon=True)
        self._threads.add(thread)
        thread.start()
        return future

    def _pipeline(self, source: str, future: Future[EvalResult], clock: StageClock, need: Need,
                  on_stage: CandidateStageCallback | None, on_output: OutputCallback | None) -> None:
        build: Build | None = None
        failure: KevinError | None = None
        try:
            if self._aborted.is_set():
                raise GaveUp()
            if on_stage is not None:
                on_stage(Stage.COMPILE)
            build = self.builds.get(source, clock, on_output)
            if self._aborted.is_set():  # a build cut short by the abort is no compile error
                result = _interrupted(Stage.COMPILE if not build.ok else Stage.LOAD)
            elif not build.ok:
                result = EvalResult(status=build.status, stage=Stage.COMPILE, error=build.error)
            else:
                clock.switch("queue")
                self.probe()
                result = self._checked(build, clock, need, on_stage, on_output)
        except GaveUp:
            result = _interrupted(Stage.COMPILE if build is None else Stage.LOAD)
        except KevinError as exc:  # the task's or the machine's: the run ends, no candidate is blamed
            failure = exc
        except WorkerFailed as exc:
            if exc.kind in ("harness", "task"):
                failure = _failure(exc.kind, str(exc), str(self.task.path))
            else:
                result = EvalResult(status=Status.RUNTIME_ERROR, stage=Stage.LOAD, error=str(exc))
        except BaseException as exc:  # the future must resolve whatever happens in here
            result = EvalResult(status=Status.RUNTIME_ERROR, stage=Stage.LOAD,
                                error=f"the evaluator failed: {type(exc).__name__}: {exc}")
        finally:
            self._threads.discard(threading.current_thread())
            need.drop()  # a candidate that never got to its worker
        if failure is not None:
            future.set_exception(failure)
            return
        extra = {"device": self.device, "device_name": self.device_name, "stage_s": clock.times(),
                 "wall_s": round(clock.elapsed(), 4)}
        if build is not None:
            extra.update(compile_log=build.log, compile_s=build.compile_s, cached_build=build.cached)
        future.set_result(result.model_copy(update=extra))

    def confirm(self, sources: Sequence[str]) -> Confirmation:
        """Verify ``sources`` again on fresh seeds and time them head to head (``Confirmations``)."""
        return self.confirmations.confirm(sources)

    @contextlib.contextmanager
    def device_busy(self) -> Iterator[None]:
        """Held while the model generates on the evaluation device: no timing starts meanwhile;
        builds and correctness checks go on."""
        with contextlib.ExitStack() as held:
            with contextlib.suppress(GaveUp):  # aborted: there is nothing left to hold back
                held.enter_context(self.gate.shared(patient=False))
            yield

    def evaluate(self, sources: Sequence[str], *, on_stage: StageCallback | None = None) -> list[EvalResult]:
        """One result per source, in order; a bad candidate gives a failed result, never an exception."""
        futures = [self.submit(src, on_stage=(lambda st, i=i: on_stage(i, st)) if on_stage else None)
                   for i, src in enumerate(sources)]
        return [f.result() for f in futures]

    def abort(self) -> None:
        """Kill every worker and compiler now, the waiting ones too; pending results resolve as
        interrupted."""
        self._aborted.set()
        if self.warmer is not None:
            self.warmer.stop()
        self.gate.close()
        self.builds.close()
        self.workers_running.kill_all()
        self.pool.close()

    def close(self) -> None:
        """Stop the waiting workers and whatever still runs, and remove their folders; builds and
        reference data stay in the cache."""
        self.pool.close()
        self.builds.close()
        # A warm-up still running is left to finish (a minute at most, once per machine): the next
        # run's first build finds its headers. Only an abort stops it.
        if self._threads:
            self.abort()
            for thread in list(self._threads):
                thread.join(timeout=10)
        for thread in list(self._reapers):
            thread.join(timeout=30)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _close_quietly(pools: list[WarmPool], scratch: Path) -> None:
    for pool in pools:
        pool.close()
    shutil.rmtree(scratch, ignore_errors=True)


def _failure(kind: str, error: str, where: str) -> KevinError:
    if kind == "harness":
        return EvaluationOutOfMemory(error, hint="free device memory (stop other processes on the GPU, lower "
                                     "--gpu-memory-utilization), or allow less with --eval-memory-gib; then resume")
    return TaskError(f"{where}: {error}", hint="fix the task file so that its inputs and reference come out the "
                     "same in every process; then resume")


def _interrupted(stage: Stage) -> EvalResult:
    return EvalResult(status=Status.RUNTIME_ERROR, stage=stage, error=INTERRUPTED)

