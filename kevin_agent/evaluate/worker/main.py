"""The evaluation worker: ``python -m kevin_agent.evaluate.worker.main JOB.json``.

One process per job, started by the parent with a scrubbed environment in its own session.
Modes: ``probe`` builds the task once and, when the task's reference data is missing, makes it
(``trials.make``); ``compile`` imports the candidate, which triggers its ``load_inline`` build;
``run`` gets ready (task, reference data, reference) before it asks the parent for its candidate,
then loads, checks and times that one candidate (``candidate``) and exits; ``confirm`` verifies a
run's best kernels again on fresh seeds and times them head to head (``confirmation``). The probe
measures the task's device memory and refuses a task that does not fit (``memory``); a run worker
that runs out of memory in the harness's own work says so (``harness``), never as its candidate's
error. The reply goes to a
file (candidate code may print to stdout); stages go to the parent through a pipe as they
start, so the parent knows where a crash or a hang happened.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import torch

from ...formatting import gib
from ...results import Stage
from ...task import TaskProbe
from . import meter
from . import timing  # noqa: F401  (binds the timer functions before candidate code runs)
from .candidate import device_name, run_candidate, versions
from .confirmation import do_confirm
from .correctness import leaves, set_reference_tf32
from .guards import Integrity
from ..jobs import KERNEL, REPLIED, WANT, Assignment, Job, WorkerReply
from ..memory import requested_bytes
from ..reference import read
from .taskcode import TaskProblem, build_reference, call_factory, describe, import_file, import_task, make_inputs, spec
from .trials import Trials, draw_place, make, read_meta


def do_probe(job: Job, parent: Parent) -> WorkerReply:
    device = job.settings.device
    if device == "cuda" and not torch.cuda.is_available():
        return WorkerReply(ok=False, error_kind="environment", error="no CUDA GPU is visible to torch")
    footprint = None
    try:
        module = import_task(job)
        init = call_factory(module, "get_init_inputs", job)
        model = build_reference(module, job)
        # Drawn where the workers will draw them (``trials.draw_place``): on the device if the task's
        # get_inputs() runs there.
        on = draw_place(module, job, job.settings.seed, "as-given")
        inputs = make_inputs(module, job, job.settings.seed, "as-given", on=on)
        try:
            out, footprint = meter.measure_forward(model, inputs, device)
        except Exception as exc:
            if meter.is_oom(exc):
                raise
            raise TaskProblem(f"running {job.class_name} failed: {describe(exc, job.task_path)}") from None
        probe = TaskProbe(inputs=[spec(v) for v in inputs], outputs=[spec(v) for _, v in leaves(out)],
                          init_inputs=[repr(v)[:200] for v in init])
        del model, out, inputs
        meter.release(device)
        name = device_name(device)
        if (problem := meter.fit_problem(footprint, job.settings, name)) is not None:
            kind, message, hint = problem
            return WorkerReply(ok=False, error_kind=kind, error=message, hint=hint, footprint=footprint)
        set_reference_tf32(job.settings.reference_tf32)
        if job.reference_dir and read(Path(job.reference_dir)) is None:
            make(job, module, build_reference(module, job), lambda: parent.request("timing"), footprint)
        meter.release(device)
    except TaskProblem as exc:
        return WorkerReply(ok=False, error_kind="task", error=str(exc))
    except Exception as exc:
        if not meter.is_oom(exc):
            raise
        return _probe_out_of_memory(exc, job, footprint)
    return WorkerReply(ok=True, probe=probe, device_name=name, versions=versions(), footprint=footprint,
                       capacity_bytes=meter.capacity(job.settings))


def _probe_out_of_memory(exc: BaseException, job: Job, footprint) -> WorkerReply:
    """The task's reference (or the reference data made from it) did not fit: the task's problem
    when the device was the evaluation's alone, the environment's when others held much of it."""
    where = describe(exc, job.task_path).splitlines()
    traceback.clear_frames(exc.__traceback__)
    meter.release(job.settings.device)
    free, total = meter.device_memory(job.settings.device)
    asked = requested_bytes(str(exc))
    crowded = job.settings.device == "cuda" and total - free > total // 10 and asked <= total
    kind = "environment" if crowded else "task"
    what = (gib(footprint.total) if footprint is not None else f"more than {gib(asked)}" if asked
            else "more than is free")
    return WorkerReply(
        ok=False, error_kind=kind, footprint=footprint,
        error=(f"the task ran out of memory on {device_name(job.settings.device)}: {where[-1][:300]}\n"
               f"(its inputs, the reference's outputs and peak need {what}; {gib(free)} of {gib(total)} are free)"),
        hint="shrink get_inputs(), or free device memory (lower --gpu-memory-utilization, or stop other "
             "processes on the GPU)")


def do_compile(job: Job, parent: Parent) -> WorkerReply:
    """Build one candidate by importing it (its ``load_inline`` calls build). A worker started
    without a candidate gets ready first (torch and its extension builder imported) and then asks
    the parent for one: builds started ahead of need skip the seconds of that import."""
    import torch.utils.cpp_extension  # noqa: F401  (what every candidate imports first)

    from ..toolchain.build import building

    if not job.candidate_path:
        assignment = Assignment(**parent.request("candidate"))
        os.environ["TORCH_EXTENSIONS_DIR"] = assignment.build_dir
        job = job.model_copy(update={"candidate_path": assignment.candidate_path})
    parent.stage(Stage.COMPILE)
    with building(fast=job.settings.fast_build):
        try:
            import_file(job.candidate_path, "kevin_candidate")
        except Exception as exc:
            return WorkerReply(ok=False, error_kind="compile", error=describe(exc, job.candidate_path))
    return WorkerReply(ok=True)


def do_run(job: Job, parent: Parent) -> WorkerReply:
    # Everything up to the candidate's arrival is the task's and the harness's own work, done
    # before the parent hands this worker a candidate.
    device = job.settings.device
    meta = None
    try:
        task = import_task(job)
        meta = read_meta(job)
        # The imports first: host work, done before this worker asks to share the device.
        importlib.import_module("torch.utils.cpp_extension")  # what every candidate imports first
        importlib.import_module("torch._dynamo")  # the integrity snapshot's (``Integrity``)
        if device == "cuda":
            parent.request("device")  # returns once this worker may use the device beside others
            torch.cuda.init()  # lazy CUDA set-up rebinds nothing after the integrity snapshot
        trials = Trials.load(job, task, meta)
        trials.prepare()
        set_reference_tf32(job.settings.reference_tf32)
        ref = build_reference(task, job)
        trials.reference = ref
        meter.release(device)
        integrity = Integrity()
    except TaskProblem as exc:
        return WorkerReply(ok=False, error_kind="task", error=str(exc))
    except Exception as exc:
        if not meter.is_oom(exc):
            raise
        fp = meta.footprint if meta is not None else None
        return WorkerReply(ok=False, error_kind="harness",
                           error=meter.harness_note(exc, device, fp, "while a worker got ready"))
    assignment = Assignment(**parent.request("candidate"))
    os.environ["TORCH_EXTENSIONS_DIR"] = assignment.build_dir
    trials.lean = assignment.lean
    job = job.model_copy(update={"candidate_path": assignment.candidate_path})
    return run_candidate(job, parent.stage, parent.request, task, ref, trials, integrity)


class Parent:
    """The worker's ends of the pipes: ``parent(stage)`` announces a stage, ``request`` asks the
    parent for something and waits for the answer."""

    def __init__(self, job: Job) -> None:
        # Not for the candidate's child processes: the parent sees this worker end when they close.
        for fd in (job.progress_fd, job.control_fd):
            os.set_inheritable(fd, False)
        self._out = os.fdopen(job.progress_fd, "w", buffering=1, encoding="utf-8")
        self._in = os.fdopen(job.control_fd, "r", encoding="utf-8")
        self._marked = ""

    def stage(self, s: Stage) -> None:
        self._out.write(s.value + "\n")

    __call__ = stage

    def say(self, line: str) -> None:
        try:
            self._out.write(line + "\n")
        except OSError:
            pass  # the parent is gone; the reply file is there for whoever looks

    def mark(self, which: str) -> None:
        """Name the kernel whose code runs next (confirm mode; ``-``: the reference)."""
        if which != self._marked:
            self._marked = which
            self._out.write(KERNEL + which + "\n")

    def request(self, what: str) -> dict:
        self._out.write(WANT + what + "\n")
        line = self._in.readline()
        if not line:
            os._exit(3)  # the parent is gone
        return json.loads(line)


def profiled(job: Job, work: Callable[[], WorkerReply]) -> WorkerReply:
    """``work()``, under cProfile when the settings name a profile folder (``EvalSettings.profile_dir``)."""
    folder = job.settings.profile_dir
    if folder is None:
        return work()
    import cProfile
    import io
    import pstats

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


def start(job_type, argv: list[str] | None):
    """A worker's start, the same for every kind: the job named on its command line, the pipes to
    its parent, and torch's threads as the settings say."""
    args = sys.argv[1:] if argv is None else argv
    job = job_type.model_validate_json(Path(args[0]).read_text())
    if job.settings.device == "cpu" and job.settings.cpu_threads:
        torch.set_num_threads(job.settings.cpu_threads)
    return job, Parent(job)


def finish(job, parent: Parent, reply) -> NoReturn:
    """Write ``reply`` whole (a reader never sees half of it), say so, and end at once."""
    tmp = job.reply_path + ".tmp"
    Path(tmp).write_text(reply.model_dump_json(), encoding="utf-8")
    os.replace(tmp, job.reply_path)
    parent.say(REPLIED)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate atexit hooks and extension destructors may hang or crash.
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    job, parent = start(Job, argv)
    modes = {"probe": do_probe, "compile": do_compile, "run": do_run, "confirm": do_confirm}
    try:
        reply = profiled(job, lambda: modes[job.mode](job, parent))
    except BaseException as exc:
        reply = WorkerReply(ok=False, error_kind="runtime", error=describe(exc, job.candidate_path))
    finish(job, parent, reply)


if __name__ == "__main__":
    main()
