"""Candidates' builds, from the parent's side: one compile worker per source, through the build
cache, ``parallel_compiles`` at once, an identical source building once however many submit it;
and the toolchain warmed before the first candidate arrives.

The worker side of a build is ``toolchain.build`` (the fast ``load_inline`` path); this module
only starts compile workers and reads the cache, so it never imports torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ...config import EvalSettings
from ...protocols import OutputCallback
from ...results import Status
from ..toolchain import cache, triton_build
from ...workers import Limit, StageClock, WorkerProcess, WorkerRun, WorkerSet, scrubbed_env
from ..jobs import Assignment, EvalWorker
from .gate import DeviceGate, GaveUp
from .logs import tail, trim_compile_error
from .warm import WarmPool


@dataclass
class Build:
    """One source's build: where it is, whether it succeeded, and what the compiler said."""

    ok: bool
    folder: Path
    cached: bool = False
    compile_s: float = 0.0
    log: str = ""
    error: str = ""
    status: Status = Status.COMPILE_ERROR

    @property
    def candidate(self) -> Path:
        return self.folder / "candidate.py"


def compile_in(folder: Path, source: str, *, settings: EvalSettings, env: dict[str, str],
               job: dict, on_output: OutputCallback | None = None, root: Path | None = None,
               registry: WorkerSet | None = None,
               hold: Callable[[int], AbstractContextManager] | None = None,
               ready: Callable[[], WorkerProcess] | None = None, cached: bool = True) -> Build:
    """Build ``source`` in a compile worker whose extensions folder is ``folder`` (with ``cached``, a
    cache hit when a successful build is already there and ninja has nothing left to do): one that
    ``ready`` hands out, already waiting with torch imported, or else one started for it."""
    # Another process building the same source (a second run, a bench's other task) would share the
    # folder, its candidate file and torch's build lock: it builds alone, and this one finds it built.
    try:
        with cache.locked(folder, give_up=(lambda: registry.closed) if registry is not None else None):
            return _compile_locked(folder, source, settings=settings, env=env, job=job, on_output=on_output, root=root,
                                   registry=registry, hold=hold, ready=ready, cached=cached)
    except cache.GaveUpWaiting:
        return Build(ok=False, folder=folder, error="the run was stopped while another process built this source")


def _compile_locked(folder: Path, source: str, *, settings: EvalSettings, env: dict[str, str], job: dict,
                    on_output: OutputCallback | None, root: Path | None, registry: WorkerSet | None,
                    hold: Callable[[int], AbstractContextManager] | None,
                    ready: Callable[[], WorkerProcess] | None, cached: bool) -> Build:
    candidate = folder / "candidate.py"
    if cached and cache.is_built(folder) and candidate.is_file() and cache.up_to_date(folder):
        return Build(ok=True, folder=folder, cached=True)
    candidate.write_text(source, encoding="utf-8")
    cache.clear_locks(folder)
    if ready is not None:
        run = _compile_on(ready(), candidate, folder, settings, on_output, registry, hold)
    else:
        run = EvalWorker.run({**job, "mode": "compile", "candidate_path": str(candidate)}, env=env,
                             timeout_s=settings.compile_timeout_s, on_output=on_output, root=root, registry=registry,
                             hold=hold)
    log = run.log[-200_000:]
    if run.timed_out:
        cache.clear_locks(folder)
        return Build(ok=False, folder=folder, compile_s=run.wall_s, log=log, status=Status.TIMEOUT,
                     error=f"compile timed out after {settings.compile_timeout_s:g} s "
                     "(compile_timeout_s); the build was killed")
    if run.reply is None:
        cache.clear_locks(folder)
        return Build(ok=False, folder=folder, compile_s=run.wall_s, log=log,
                     error=f"{run.died()} while building\n{tail(run.log)}")
    if not run.reply.ok:
        compiler = trim_compile_error(log, str(folder)) if "rror" in log else ""
        error = run.reply.error if not compiler else f"{compiler}\n{run.reply.error.splitlines()[-1]}"
        return Build(ok=False, folder=folder, compile_s=run.wall_s, log=log, error=error)
    cache.mark_built(folder, run.wall_s)
    return Build(ok=True, folder=folder, compile_s=run.wall_s, log=log)


def _compile_on(worker: WorkerProcess, candidate: Path, folder: Path, settings: EvalSettings,
                on_output: OutputCallback | None, registry: WorkerSet | None,
                hold: Callable[[int], AbstractContextManager] | None) -> WorkerRun:
    """Hand a waiting compile worker its candidate and follow the build to its end or its limit."""
    limit = Limit(settings.compile_timeout_s, f"{settings.compile_timeout_s:g} s")
    try:
        with hold(worker.pid) if hold is not None else contextlib.nullcontext():
            worker.output()  # what it printed getting ready is not this build's
            worker.send(Assignment(candidate_path=str(candidate), build_dir=str(folder)))
            exceeded = worker.follow(limit=lambda _: limit, on_output=on_output)
        run = worker.result(exceeded)
    finally:
        worker.remove()
        if registry is not None:
            registry.discard(worker)
    # Its wall time from the candidate's arrival: getting ready was before the build was asked for.
    return dataclasses.replace(run, wall_s=time.monotonic() - worker.assigned_at)


def build_once(source: str, folder: Path, device: str = "cuda", *, fast: bool = True,
               timeout_s: float = 600) -> Build:
    """``source`` built in ``folder`` as a run builds it (``fast``) or as a plain ``load_inline``
    does, outside any evaluator (the build benchmark, the build tests), whatever the folder holds
    already (``load_inline``'s own ninja still skips what is up to date). The compiler's log is
    also left in ``folder/compile.log``."""
    settings = EvalSettings(device=device, fast_build=fast, compile_timeout_s=timeout_s, cache_dir=folder.parent)
    env = scrubbed_env({"TORCH_EXTENSIONS_DIR": str(folder), **cache.toolchain_env(device)})
    build = compile_in(folder, source, settings=settings, env=env, job={"settings": settings}, cached=False)
    (folder / "compile.log").write_text(build.log, encoding="utf-8")
    return build


def warm_toolchain(root: Path, device: str, timeout_s: float = 900) -> tuple[float, bool]:
    """Make, under ``root/toolchain`` (beside the build folders under ``root``), the light CUDA
    header and the precompiled bindings header of the flag sets most candidates use, so that a
    cold build finds them: (wall seconds, ready). A ready toolchain returns in about a second."""
    warmer = ToolchainWarmer(root, device)
    start = time.monotonic()
    warmer.start()
    ready = warmer.wait(timeout_s)
    return time.monotonic() - start, ready


class ToolchainWarmer:
    """The toolchain made in the background while the model writes its first responses: one
    process, in a session of its own so that stopping it stops its compiler too."""

    def __init__(self, root: Path, device: str) -> None:
        self.root, self.device = root, device
        self._proc: subprocess.Popen | None = None
        self._made = False

    made: set[tuple[str, str]] = set()
    """(cache folder, device) whose toolchain a warm-up of this process has made: a bench's next
    task (another evaluator, the same cache) starts none, rather than one more process that
    imports torch beside its probe to find the headers made."""

    def start(self) -> None:
        if (str(self.root), self.device) in ToolchainWarmer.made:
            self._made = True
            return
        folder = self.root / "warm"
        folder.mkdir(parents=True, exist_ok=True)
        env = scrubbed_env({"TORCH_EXTENSIONS_DIR": str(folder), **cache.toolchain_env(self.device)})
        with open(folder / "warm.log", "wb") as log:
            self._proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.evaluate.toolchain.build", "warm",
                                           self.device], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout_s: float) -> bool:
        """Whether the toolchain is ready; stops the warm-up at ``timeout_s``."""
        if self._made:
            return True
        if self._proc is None:
            return False
        try:
            ready = self._proc.wait(timeout=timeout_s) == 0
            if ready:
                ToolchainWarmer.made.add((str(self.root), self.device))
            return ready
        except subprocess.TimeoutExpired:
            self.stop()
            return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() == 0:
            ToolchainWarmer.made.add((str(self.root), self.device))
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()


class Builds:
    """The builds of one evaluator: ``parallel_compiles`` at once, through the build cache; a
    source already being built by another submission waits for that build. Compile workers are
    started ahead of need (``WarmPool``), each importing torch and its extension builder while
    nothing asks for it yet, and each builds one candidate."""

    def __init__(self, settings: EvalSettings, *, job: Callable[[], dict], env: Callable[[Path | None], dict[str, str]],
                 scratch: Path, registry: WorkerSet, gate: DeviceGate, aborted: threading.Event) -> None:
        self.settings = settings
        self._job, self._env, self._scratch, self._registry = job, env, scratch, registry
        self._hold, self._aborted = gate.pausable, aborted
        self._slots = threading.BoundedSemaphore(settings.parallel_compiles)
        self._pending: dict[str, Future[Build]] = {}
        self._lock = threading.Lock()
        # A waiting compile worker only loads the processor: it is stopped, as builds are, while a
        # timing runs (not a sharer of the device).
        self.pool = WarmPool(self._start_worker, size=settings.parallel_compiles, gate=gate, give_up=aborted.is_set,
                             prep_limit=Limit(settings.load_timeout_s, f"load_timeout_s = {settings.load_timeout_s:g} s"),
                             registry=registry)
        self._opened = False

    def _start_worker(self) -> WorkerProcess:
        return EvalWorker({**self._job(), "mode": "compile", "candidate_path": ""}, env=self._env(None),
                          root=self._scratch)

    def folder(self, source: str) -> Path:
        if self.settings.language == "triton":
            return self.settings.cache_dir / triton_build.build_key(source, self.settings.device)
        return self.settings.cache_dir / cache.build_key(source, self.settings.device, self.settings.fast_build)

    def build(self, source: str, on_output: OutputCallback | None = None) -> Build:
        """Build ``source`` now (no slot, no sharing: the caller holds them). A Triton source is only
        written: it compiles at its first call, in the run worker (``toolchain.triton_build``)."""
        folder = self.folder(source)
        if self.settings.language == "triton":
            cached = triton_build.write_module(folder, source)
            return Build(ok=True, folder=folder, cached=cached, log=triton_build.BUILD_NOTE)

        def ready() -> WorkerProcess:
            # Opened at the first build the cache cannot answer: none waits in an evaluator that
            # builds nothing; from then on one more is ready whenever one is taken.
            with self._lock:
                if not self._opened:
                    self._opened = True
                    self.pool.open()
            with self.pool.need() as need:
                return need.take()

        return compile_in(folder, source, settings=self.settings, env=self._env(folder), job=self._job(),
                          on_output=on_output, root=self._scratch, registry=self._registry, hold=self._hold,
                          ready=ready)

    def close(self) -> None:
        """Stop the waiting compile workers."""
        self.pool.close()

    def get(self, source: str, clock: StageClock | None = None, on_output: OutputCallback | None = None) -> Build:
        """``source``'s build, waiting for a slot, or for the same source's build already running."""
        key = self.folder(source).name
        with self._lock:
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = Future()
        if not owner:
            return self._wait(pending)
        try:
            acquire(self._slots, self._aborted)
            try:
                if clock is not None:
                    clock.switch("compile")
                build = self.build(source, on_output)
            finally:
                self._slots.release()
            pending.set_result(build)
            return build
        except BaseException as exc:
            pending.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def _wait(self, future: Future[Build]) -> Build:
        while True:
            try:
                return future.result(timeout=0.1)
            except FutureTimeout:
                if self._aborted.is_set():
                    raise GaveUp() from None


def acquire(semaphore: threading.Semaphore, aborted: threading.Event) -> None:
    """Take ``semaphore``; raises ``GaveUp`` once ``aborted`` is set."""
    while not semaphore.acquire(timeout=0.1):
        if aborted.is_set():
            raise GaveUp()
