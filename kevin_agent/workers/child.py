"""A worker's side: its job, its ends of the pipes, its reply, its end.

A kind of worker is a module whose ``main()`` hands ``serve`` its job's type, its work and what its
reply says when the work raises; ``serve`` reads the job named on the command line, writes the
reply whole and ends the process at once. The worker cannot tell who started it: it knows its job,
its two pipes and its reply's path. torch is imported only where the job's settings need it, so
that a worker of another kind (or a test's stand-in) starts without it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from ..results import Stage
from .messages import Entered, Go, Job, Message, Note, Replied, Reply, Want, decode, encode

J = TypeVar("J", bound=Job)
M = TypeVar("M", bound=Message)


class Parent:
    """The worker's ends of the pipes: ``parent(stage)`` announces a stage, ``note`` says what it is
    doing, ``request`` asks the parent for something and waits for the answer."""

    def __init__(self, job: Message) -> None:
        fds = (job.progress_fd, job.control_fd)  # type: ignore[attr-defined]
        # Not for the work's child processes: the parent sees this worker end when they close.
        for fd in fds:
            os.set_inheritable(fd, False)
        self._out, control = fds
        self._in = os.fdopen(control, "rb")

    def send(self, message: Message) -> None:
        """One message, in one write: a line on the pipe is never split by a crash after it."""
        data = encode(message)
        while data:
            data = data[os.write(self._out, data):]

    def stage(self, stage: Stage) -> None:
        self.send(Entered(stage=stage))

    __call__ = stage

    def note(self, text: str) -> None:
        with contextlib.suppress(OSError):  # the parent is gone; the reply file is there for whoever looks
            self.send(Note(text=text))

    def request(self, what: str, answer: type[M] = Go) -> M:  # type: ignore[assignment]
        """Ask for ``what`` and wait for the parent's answer, a message of kind ``answer``."""
        self.send(Want(what=what))
        line = self._in.readline()
        if not line:
            os._exit(3)  # the parent is gone
        return decode(line, answer)


def start(job_type: type[J], argv: list[str] | None = None) -> tuple[J, Parent]:
    """A worker's start, the same for every kind: the job named on its command line, the pipes to
    its parent, and torch's threads as the settings say."""
    args = sys.argv[1:] if argv is None else argv
    job = decode(Path(args[0]).read_bytes(), job_type)
    if job.settings.device == "cpu" and job.settings.cpu_threads:
        import torch

        torch.set_num_threads(job.settings.cpu_threads)
    return job, Parent(job)


def finish(job: Job, parent: Parent, reply: Reply) -> NoReturn:
    """Write ``reply`` whole (a reader never sees half of it), say so, and end at once."""
    tmp = job.reply_path + ".tmp"
    Path(tmp).write_bytes(encode(reply))
    os.replace(tmp, job.reply_path)
    with contextlib.suppress(OSError):  # the parent is gone; the reply file is there for whoever looks
        parent.send(Replied())
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: atexit hooks and extension destructors of the code it ran may hang or crash.
    os._exit(0)


def serve(job_type: type[J], work: Callable[[J, Parent], Reply], failed: Callable[[J, BaseException], Reply],
          argv: list[str] | None = None) -> NoReturn:
    """A worker's whole life: ``work(job, parent)``'s reply, or ``failed(job, exc)``'s when it raises."""
    job, parent = start(job_type, argv)
    try:
        reply = work(job, parent)
    except BaseException as exc:
        reply = failed(job, exc)
    finish(job, parent, reply)


def profiled(job: Job, work: Callable[[], Reply]) -> Reply:
    """``work()``, under cProfile when the settings name a profile folder (``EvalSettings.profile_dir``)."""
    folder = job.settings.profile_dir
    if folder is None:
        return work()
    import cProfile
    import io
    import pstats

    import torch

    # The allocator's history where asked (Python frames only: C++ stacks cost milliseconds an
    # allocation), for finding what is live at the evaluation's peak (benchmarks/stages.py).
    history = job.settings.device == "cuda" and job.settings.profile_memory
    if history:
        try:
            torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
        except Exception:  # a profile must never fail the job
            history = False
    profile = cProfile.Profile()
    try:
        return profile.runcall(work)
    finally:
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"{job.mode}-{os.getpid()}"
        profile.dump_stats(f"{stem}.prof")
        if history:
            with contextlib.suppress(Exception):  # a profile must never fail the job
                torch.cuda.memory._dump_snapshot(f"{stem}.memory.pickle")
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(60)
        Path(f"{stem}.txt").write_text(text.getvalue(), encoding="utf-8")
