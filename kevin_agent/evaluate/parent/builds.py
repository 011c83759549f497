"""Candidates' builds, from the parent's side: one compile worker per source, through the build
cache, ``parallel_compiles`` at once, an identical source building once however many submit it;
and the toolchain warmed before the first candidate arrives.

The worker side of a build is ``toolchain.build`` (the fast ``load_inline`` path); this module
only starts compile workers and reads the cache, so it never imports torch.
"""

from __future__ import annotations

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
from ..toolchain import cache
from .gate import GaveUp
from .logs import tail, trim_compile_error
from .pool import StageClock, WorkerSet, run_worker, scrubbed_env


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
               hold: Callable[[int], AbstractContextManager] | None = None) -> Build:
    """Build ``source`` in a compile worker whose extensions folder is ``folder`` (a cache hit
    when a successful build is already there and ninja has nothing left to do)."""
    folder.mkdir(parents=True, exist_ok=True)
    candidate = folder / "candidate.py"
    if cache.is_built(folder) and candidate.is_file() and cache.up_to_date(folder):
        return Build(ok=True, folder=folder, cached=True)
    candidate.write_text(source, encoding="utf-8")
    cache.clear_locks(folder)
    run = run_worker({**job, "mode": "compile", "candidate_path": str(candidate)}, env=env,
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


def build_once(source: str, folder: Path, device: str = "cuda", *, fast: bool = True,
               timeout_s: float = 600) -> Build:
    """``source`` built in ``folder`` as a run builds it (``fast``) or as a plain ``load_inline``
    does, outside any evaluator (the build benchmark, the build tests). The compiler's log is
    also left in ``folder/compile.log``."""
    settings = EvalSettings(device=device, fast_build=fast, compile_timeout_s=timeout_s, cache_dir=folder.parent)
    env = scrubbed_env({"TORCH_EXTENSIONS_DIR": str(folder), **cache.toolchain_env(device)})
    build = compile_in(folder, source, settings=settings, env=env, job={"settings": settings})
    (folder / "compile.log").write_text(build.log, encoding="utf-8")
    return build


def warm_toolchain(root: Path, device: str, timeout_s: float = 900) -> tuple[float, bool]:
    """Make, under ``root/toolchain`` (beside the build folders under ``root``), the precompiled
    bindings header for the flag set most candidates use and the light CUDA header, so that the
    first candidate's cold build finds them: (wall seconds, ready). Run once per evaluator, while
    the model writes its first responses; a ready toolchain returns at once."""
    folder = root / "warm"
    folder.mkdir(parents=True, exist_ok=True)
    env = scrubbed_env({"TORCH_EXTENSIONS_DIR": str(folder), **cache.toolchain_env(device)})
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-m", "kevin_agent.evaluate.toolchain.build", "warm", device], env=env,
                             capture_output=True, text=True, timeout=timeout_s, check=False, start_new_session=True)
    except subprocess.TimeoutExpired:
        return time.monotonic() - start, False
    (folder / "warm.log").write_text(out.stdout + out.stderr, encoding="utf-8")
    return time.monotonic() - start, out.returncode == 0


class Builds:
    """The builds of one evaluator: ``parallel_compiles`` at once, through the build cache; a
    source already being built by another submission waits for that build."""

    def __init__(self, settings: EvalSettings, *, job: Callable[[], dict], env: Callable[[Path], dict[str, str]],
                 scratch: Path, registry: WorkerSet, hold: Callable[[int], AbstractContextManager],
                 aborted: threading.Event) -> None:
        self.settings = settings
        self._job, self._env, self._scratch, self._registry, self._hold = job, env, scratch, registry, hold
        self._aborted = aborted
        self._slots = threading.BoundedSemaphore(settings.parallel_compiles)
        self._pending: dict[str, Future[Build]] = {}
        self._lock = threading.Lock()

    def folder(self, source: str) -> Path:
        return self.settings.cache_dir / cache.build_key(source, self.settings.device, self.settings.fast_build)

    def build(self, source: str, on_output: OutputCallback | None = None) -> Build:
        """Build ``source`` now (no slot, no sharing: the caller holds them)."""
        folder = self.folder(source)
        return compile_in(folder, source, settings=self.settings, env=self._env(folder), job=self._job(),
                          on_output=on_output, root=self._scratch, registry=self._registry, hold=self._hold)

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
