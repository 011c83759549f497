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
start, so the parent knows where a crash or a hang happened (``workers.child``).
"""

from __future__ import annotations

import importlib
import os
import traceback
from pathlib import Path

import torch

from ...formatting import gib
from ...results import Stage
from ...task import TaskProbe
from ...workers import Parent, profiled, serve
from . import meter
from . import timing  # noqa: F401  (binds the timer functions before candidate code runs)
from .candidate import device_name, run_candidate, versions
from . import first_call
from .confirmation import do_confirm
from .correctness import leaves, set_reference_tf32
from .guards import Integrity
from ..jobs import Assignment, Job, WorkerReply
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
        assignment = parent.request("candidate", Assignment)
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
        first_call.prepare(job.settings)  # a Triton candidate's imports, before the snapshot
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
    assignment = parent.request("candidate", Assignment)
    os.environ["TORCH_EXTENSIONS_DIR"] = assignment.build_dir
    trials.lean = assignment.lean
    job = job.model_copy(update={"candidate_path": assignment.candidate_path})
    return run_candidate(job, parent.stage, parent.request, task, ref, trials, integrity)


MODES = {"probe": do_probe, "compile": do_compile, "run": do_run, "confirm": do_confirm}


def main(argv: list[str] | None = None) -> None:
    serve(Job, lambda job, parent: profiled(job, lambda: MODES[job.mode](job, parent)),
          lambda job, exc: WorkerReply(ok=False, error_kind="runtime", error=describe(exc, job.candidate_path)), argv)


if __name__ == "__main__":
    main()
