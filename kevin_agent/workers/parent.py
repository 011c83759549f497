"""Parent side of a worker: start it isolated, follow its stages, answer its requests, enforce
its time limits.

Each worker runs ``python -m <its entry module> JOB.json`` in a new session (so the whole process
group, compiler children included, can be killed), with a scrubbed environment, its stdout/stderr
captured to a log in its own temporary folder, and two pipes that carry messages (``messages``).
The parent never imports what the worker runs and never touches the GPU.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..results import Stage, StageTimes
from .messages import Entered, Go, Job, Malformed, Message, Replied, Reply, Want, decode, encode

@dataclass(frozen=True)
class Limit:
    """How long a phase of a worker may run, and how that number came about (for the feedback)."""

    seconds: float
    how: str


_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "COOKIE", "AUTH")
_SECRET_PREFIXES = ("HF_", "HUGGING", "OPENAI_", "ANTHROPIC_", "KEVIN_", "AWS_", "AZURE_", "GOOGLE_",
                    "GH_", "GITHUB_", "GITLAB_", "WANDB_", "SSH_")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


MALLOC_KEEP_BYTES = 256 << 20
"""Freed memory below this a worker's allocator keeps (``scrubbed_env``)."""


def scrubbed_env(extra: dict[str, str] | None = None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without anything that looks like a credential."""
    source = os.environ if environ is None else environ
    env = {
        k: v for k, v in source.items()
        if not any(w in k.upper() for w in _SECRET_WORDS) and not k.upper().startswith(_SECRET_PREFIXES)
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    # Bytecode is written for the libraries a worker imports (an image that ships torch without
    # it would otherwise compile it again in every worker, seconds each), never beside the
    # person's files: the worker turns it off around importing those (``taskcode.import_file``).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONUNBUFFERED"] = "1"
    # glibc hands freed blocks over its thresholds back to the system and maps large ones afresh,
    # so a worker that happened to trim pays page faults on every large allocation of a timed call
    # and one that did not pays none: whole-model CPU timings moved 2x between workers. Fixed
    # thresholds keep up to 256 MiB of freed memory in the process, the same in every worker; a
    # person's own settings win.
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        env.setdefault(name, str(MALLOC_KEEP_BYTES))
    env.update(extra or {})
    return env


class StageClock:
    """Splits one evaluation's wall time into ``StageTimes``: time runs into one bucket at a time."""

    def __init__(self) -> None:
        self.started = self._last = time.monotonic()
        self._bucket = "queue"
        self._totals = dict.fromkeys(StageTimes.model_fields, 0.0)
        self._lock = threading.Lock()

    def switch(self, bucket: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._totals[self._bucket] += now - self._last
            self._bucket, self._last = bucket, now

    def times(self) -> StageTimes:
        self.switch(self._bucket)
        return StageTimes(**{k: round(v, 4) for k, v in self._totals.items()})

    def elapsed(self) -> float:
        return time.monotonic() - self.started


_live_groups: set[int] = set()
_live_lock = threading.Lock()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all_workers() -> None:
    """Kill every worker this process started and that is still running, with its children
    (compilers included): the run is being interrupted."""
    with _live_lock:
        groups = list(_live_groups)
    for pgid in groups:
        _kill_group(pgid)


class WorkerSet:
    """The workers one evaluator has running, so that they can all be killed at once; one
    added after that is killed on arrival."""

    def __init__(self) -> None:
        self._items: set[WorkerProcess] = set()
        self._lock = threading.Lock()
        self.closed = False

    def add(self, worker: WorkerProcess) -> None:
        with self._lock:
            self._items.add(worker)
            closed = self.closed
        if closed:
            worker.kill()

    def discard(self, worker: WorkerProcess) -> None:
        with self._lock:
            self._items.discard(worker)

    def __iter__(self):
        with self._lock:
            return iter(list(self._items))

    def kill_all(self) -> None:
        with self._lock:
            self.closed = True
            items = list(self._items)
        for worker in items:
            worker.kill()


@dataclass
class WorkerRun:
    reply: Reply | None
    returncode: int
    timed_out: bool
    stage: Stage | None
    """The last stage the worker announced."""
    log: str
    wall_s: float
    limit: Limit | None = None
    """The limit the worker ran past (when ``timed_out``)."""

    @property
    def error_kind(self) -> str:
        """Whose failure the worker's reply names (``Reply.error_kind``); '' without a reply."""
        return self.reply.error_kind if self.reply is not None else ""

    def died(self) -> str:
        """How the worker ended without a reply, in words."""
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"the worker died with {name}"
        return f"the worker exited with code {self.returncode} without a result"


class WorkerProcess:
    """One worker process, its folder and the parent's ends of its pipes.

    A kind of worker is a subclass naming its entry module, its job and its reply (the evaluation's
    ``evaluate.jobs.EvalWorker``, the model's ``model.jobs.ModelWorker``); the rest is shared: its
    messages, its time limits, killing its process group, collecting its log."""

    ENTRY: ClassVar[str]
    """The module the worker runs (``python -m ENTRY JOB.json``)."""
    JOB: ClassVar[type[Message]] = Job
    REPLY: ClassVar[type[Reply]] = Reply
    PREFIX: ClassVar[str] = "kevin-worker-"

    def __init__(self, job_fields: dict, *, env: dict[str, str], root: Path | None = None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=self.PREFIX, dir=root))
        progress_r, progress_w = os.pipe()
        control_r, control_w = os.pipe()
        job = self.JOB(**job_fields, reply_path=str(self.folder / "reply.json"), progress_fd=progress_w,
                       control_fd=control_r)
        job_path = self.folder / "job.json"
        job_path.write_bytes(encode(job))
        self.reply_path = Path(job.reply_path)
        self.log_path = self.folder / "log.txt"
        try:
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", self.ENTRY, str(job_path)],
                    cwd=self.folder, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, pass_fds=(progress_w, control_r),
                )
        except BaseException:
            for fd in (progress_r, progress_w, control_r, control_w):
                os.close(fd)
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        os.close(progress_w)
        os.close(control_r)
        with _live_lock:
            _live_groups.add(self.proc.pid)
        self.pid = self.proc.pid
        self.started = self.assigned_at = time.monotonic()
        """When it started, and when it was last sent something (a waiting worker: its candidate)."""
        self._progress, self._control = progress_r, control_w
        self._pending = b""
        self._eof = False
        self.garbled: list[str] = []
        """What it wrote on its pipe that is no message (a crash mid-line, code that wrote to the
        pipe): its own doing, kept for its log."""
        self._log = open(self.log_path, "rb")  # noqa: SIM115 (read as it grows, closed in finish)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stages: list[Stage] = []
        self.replied = False
        """It said ``Replied``: its reply is complete and what is left is its process's own end."""
        self.finished = False
        self.waiting_for = ""
        """What it asked for when ``follow`` stopped at its request (it blocks until answered)."""

    # --- talking to it ------------------------------------------------------------------
    def messages(self, timeout: float) -> list[Message] | None:
        """Messages the worker wrote, waiting up to ``timeout`` for the first; None once it has
        closed its end (it exited). A line that is no message goes to ``garbled``, never raises."""
        if self._eof:
            return None
        ready, _, _ = select.select([self._progress], [], [], max(timeout, 0.0))
        if not ready:
            return []
        data = os.read(self._progress, 65536)
        if not data:
            self._eof = True
            if self._pending.strip():
                self.garbled.append(f"an unfinished line {self._pending[:120]!r}")
            return None
        *whole, self._pending = (self._pending + data).split(b"\n")
        out = []
        for line in filter(bytes.strip, whole):
            try:
                out.append(decode(line))
            except Malformed as exc:
                self.garbled.append(str(exc))
        return out

    def send(self, message: Message) -> None:
        self.waiting_for = ""
        self.assigned_at = time.monotonic()
        try:
            os.write(self._control, encode(message))
        except OSError:
            pass  # it died; the next read sees the end

    def output(self) -> str:
        """What the worker printed since the last call."""
        return self._decoder.decode(self._log.read())

    def alive(self) -> bool:
        return self.proc.poll() is None

    # --- ending it ----------------------------------------------------------------------
    def kill(self) -> None:
        _kill_group(self.pid)

    def finish(self) -> int:
        """Kill what is left of its process group (a daemon, a stuck compiler) and reap it."""
        if not self.finished:
            self.finished = True
            self.kill()
            self.proc.wait()
            with _live_lock:
                _live_groups.discard(self.pid)
            for fd in (self._progress, self._control):
                try:
                    os.close(fd)
                except OSError:
                    pass
        return self.proc.returncode

    def reply(self) -> Reply | None:
        """The worker's reply (a ``REPLY``), or None before it wrote one; one that is no reply is
        the worker's failure, as if it had written none."""
        try:
            return decode(self.reply_path.read_bytes(), self.REPLY)
        except FileNotFoundError:
            return None
        except Malformed as exc:
            self.garbled.append(f"its reply: {exc}")
            return None

    def log(self) -> str:
        """What it printed, and what it wrote on its pipe that was no message."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return text + "".join(f"\n[kevin-opt] not a message from the worker: {g}" for g in self.garbled)

    def remove(self) -> None:
        """Finish it and delete its folder."""
        self.finish()
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- following it -------------------------------------------------------------------
    def follow(self, *, limit: Callable[[str], Limit], answer: Callable[[str], Message] | None = None,
               on_stage: Callable[[Stage], None] | None = None, on_output: Callable[[str], None] | None = None,
               clock: StageClock | None = None, stop_at: str = "", phase: str = "start",
               on_message: Callable[[Message], None] | None = None) -> Limit | None:
        """Follow the worker until it exits or asks for ``stop_at``: announce its stages, answer
        its requests (``answer(what)`` may block; that time is not the worker's and goes to the
        clock's queue; without it every request is answered ``Go``), hand any other message to
        ``on_message``, and kill it when a phase runs past its limit. Returns the limit it ran
        past, else None."""
        current = limit(phase)
        deadline = time.monotonic() + current.seconds
        while True:
            messages = self.messages(min(0.1, max(deadline - time.monotonic(), 0.0)))
            gone = messages is None or (not messages and not self.alive())
            if gone and messages is not None:
                messages = self.messages(0.0)  # what it wrote just before it exited
            if on_output is not None:
                text = self.output()
                if text:
                    on_output(text)
            for message in messages or []:
                if isinstance(message, Want):
                    if message.what == stop_at:
                        self.waiting_for = message.what
                        return None
                    if clock is not None:
                        clock.switch("queue")
                    waited = time.monotonic()
                    self.send(answer(message.what) if answer is not None else Go())
                    deadline += time.monotonic() - waited
                    if clock is not None:
                        clock.switch(phase)
                elif isinstance(message, Replied):
                    self.replied = True
                    return None  # the reply is written: what is left is the process's own teardown
                elif isinstance(message, Entered):
                    stage = message.stage
                    self.stages.append(stage)
                    if on_stage is not None:
                        on_stage(stage)
                    if stage is not Stage.DONE:
                        phase = stage.value
                        if clock is not None and phase in StageTimes.model_fields:
                            clock.switch(phase)
                        current = limit(phase)
                        deadline = time.monotonic() + current.seconds
                elif on_message is not None:
                    on_message(message)
            if gone:
                return None
            if time.monotonic() > deadline:
                self.kill()
                return current

    def result(self, exceeded: Limit | None) -> WorkerRun:
        """Collect what it left. One that replied is not waited for (a CUDA context holding
        gigabytes takes a while to tear down, and none of that is the evaluation's: ``finish``, or
        ``remove``, reaps it); any other is finished first."""
        code = (self.proc.poll() or 0) if self.replied and exceeded is None else self.finish()
        return WorkerRun(reply=None if exceeded else self.reply(), returncode=code, timed_out=exceeded is not None,
                         stage=self.stages[-1] if self.stages else None, log=self.log(),
                         wall_s=time.monotonic() - self.started, limit=exceeded)

    @classmethod
    def run(cls, job_fields: dict, *, env: dict[str, str], timeout_s: float,
            on_stage: Callable[[Stage], None] | None = None, on_output: Callable[[str], None] | None = None,
            on_message: Callable[[Message], None] | None = None, answer: Callable[[str], Message] | None = None,
            root: Path | None = None, registry: WorkerSet | None = None,
            hold: Callable[[int], AbstractContextManager] | None = None) -> WorkerRun:
        """Run one job to its end or its time limit; never raises for what the job does. ``hold``
        is entered with the worker's process group id for as long as it runs."""
        worker = cls(job_fields, env=env, root=root)
        if registry is not None:
            registry.add(worker)
        try:
            with hold(worker.pid) if hold is not None else contextlib.nullcontext():
                exceeded = worker.follow(limit=lambda _: Limit(timeout_s, f"{timeout_s:g} s"), answer=answer,
                                         on_stage=on_stage, on_output=on_output, on_message=on_message)
            return worker.result(exceeded)
        finally:
            worker.remove()
            if registry is not None:
                registry.discard(worker)
