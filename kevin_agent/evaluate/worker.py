"""The evaluation worker: ``python -m kevin_agent.evaluate.worker JOB.json``.

One process per job, started by the parent with a scrubbed environment in its own session.
Modes: ``probe`` builds the task once; ``compile`` imports the candidate, which triggers its
``load_inline`` build; ``run`` checks correctness, times, and re-checks. The reply goes to a
file (candidate code may print to stdout); stages go to a progress file as they start, so
the parent knows where a crash or a hang happened.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from ..results import EvalResult, Stage, Status
from ..task import TaskProbe, TensorSpec
from . import timing  # noqa: F401  (binds the timer functions before candidate code runs)
from .correctness import (Mismatch, Outcome, check_inputs_unchanged, check_no_alias, check_plain_tensors,
                          clone_all, compare, leaves, nbytes_of, poisoned_memory, run_trial, same_values,
                          set_reference_tf32, sync)
from .cache import cpu_name
from .guards import Integrity, audit_ops
from .jobs import Job, WorkerReply

DISTRIBUTIONS = ("as-given", "rescaled")


class TaskProblem(Exception):
    """The task file itself cannot be built."""


class RuleBroken(Exception):
    """The candidate did at run time what the static rules forbid (reported as check_failed)."""


def check_integrity(integrity: Integrity, when: str) -> None:
    changed = integrity.changed()
    if changed:
        raise RuleBroken(f"[no-monkeypatch] {when}, the candidate had rebound {', '.join(changed[:5])}: "
                         "patching torch, the timer or the evaluator changes what is measured")


def describe(exc: BaseException, *paths: str) -> str:
    """The exception with the last frame that is in one of ``paths`` (the code someone wrote)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in paths]
    where = ""
    if frames:
        f = frames[-1]
        where = f"{Path(f.filename).name}, line {f.lineno}, in {f.name}: {(f.line or '').strip()}\n"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return (where + text)[:3000]


def import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def import_task(job: Job):
    sys.path.insert(0, str(Path(job.task_path).parent))
    try:
        module = import_file(job.task_path, "kevin_task")
    except Exception as exc:
        raise TaskProblem(f"importing the task failed: {describe(exc, job.task_path)}") from None
    missing = [n for n in (job.class_name, "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise TaskProblem(f"the module defines no {', '.join(missing)}")
    return module


def call_factory(module, name: str, job: Job) -> list:
    try:
        values = getattr(module, name)()
    except Exception as exc:
        raise TaskProblem(f"{name}() raised {describe(exc, job.task_path)}") from None
    if not isinstance(values, (list, tuple)):
        raise TaskProblem(f"{name}() must return a list, got {type(values).__name__}")
    return list(values)


def to_device(values: list, device: str) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def make_inputs(module, job: Job, seed: int, distribution: str) -> list:
    torch.manual_seed(seed)
    values = to_device(call_factory(module, "get_inputs", job), job.settings.device)
    if distribution == "rescaled":
        gen = torch.Generator().manual_seed(seed)
        scale = 2.0 ** (4.0 * float(torch.rand(1, generator=gen)) - 2.0)
        values = [v * scale if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]
    return values


def spec(value) -> TensorSpec | str:
    if isinstance(value, torch.Tensor):
        return TensorSpec(shape=list(value.shape), dtype=str(value.dtype).removeprefix("torch."))
    return repr(value)[:200]


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return cpu_name() or platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.version.cuda:
        out["cuda"] = torch.version.cuda
    return out


def do_probe(job: Job, stage: Callable[[Stage], None]) -> WorkerReply:
    if job.settings.device == "cuda" and not torch.cuda.is_available():
        return WorkerReply(ok=False, error_kind="environment", error="no CUDA GPU is visible to torch")
    try:
        module = import_task(job)
        init = call_factory(module, "get_init_inputs", job)
        torch.manual_seed(job.settings.seed)
        inputs = make_inputs(module, job, job.settings.seed, "as-given")
        try:
            model = getattr(module, job.class_name)(*init).to(job.settings.device)
            with torch.no_grad():
                out = model(*clone_all(inputs))
        except Exception as exc:
            raise TaskProblem(f"running {job.class_name} failed: {describe(exc, job.task_path)}") from None
    except TaskProblem as exc:
        return WorkerReply(ok=False, error_kind="task", error=str(exc))
    probe = TaskProbe(inputs=[spec(v) for v in inputs], outputs=[spec(v) for _, v in leaves(out)],
                      init_inputs=[repr(v)[:200] for v in init])
    return WorkerReply(ok=True, probe=probe, device_name=device_name(job.settings.device), versions=versions())


def do_compile(job: Job, stage: Callable[[Stage], None]) -> WorkerReply:
    from .build import building

    stage(Stage.COMPILE)
    with building(fast=job.settings.fast_build):
        try:
            import_file(job.candidate_path, "kevin_candidate")
        except Exception as exc:
            return WorkerReply(ok=False, error_kind="compile", error=describe(exc, job.candidate_path))
    return WorkerReply(ok=True)


def copy_parameters(ref: torch.nn.Module, cand: torch.nn.Module) -> None:
    """Give ModelNew the reference's weights: by name and shape, else in order when every
    remaining shape matches (candidates that mirror the reference's init order need neither)."""
    theirs = dict(list(ref.named_parameters()) + list(ref.named_buffers()))
    mine = dict(list(cand.named_parameters()) + list(cand.named_buffers()))
    left_t, left_m = dict(theirs), dict(mine)
    with torch.no_grad():
        for name, t in mine.items():
            src = theirs.get(name)
            if src is not None and src.shape == t.shape and src.dtype == t.dtype:
                t.copy_(src)
                left_t.pop(name)
                left_m.pop(name)
        pairs = list(zip(left_t.values(), left_m.values()))
        if left_t and len(left_t) == len(left_m) and all(a.shape == b.shape and a.dtype == b.dtype
                                                         for a, b in pairs):
            for src, dst in pairs:
                dst.copy_(src)


def do_run(job: Job, stage: Callable[[Stage], None]) -> WorkerReply:
    outcome = Outcome()
    reached = [Stage.LOAD]

    def enter(s: Stage) -> None:
        reached[0] = s
        stage(s)

    def result(status: Status, error: str = "", **extra) -> WorkerReply:
        ev = EvalResult(status=status, stage=reached[0], correct=status is Status.CORRECT, error=error,
                        trials=outcome.trials, trials_passed=outcome.trials_passed,
                        max_abs_err=outcome.max_abs_err if outcome.compared else None,
                        max_rel_err=outcome.max_rel_err if outcome.compared else None,
                        atol=outcome.atol, rtol=outcome.rtol, device=job.settings.device,
                        device_name=device_name(job.settings.device), tolerance=job.settings.tolerance,
                        reference_tf32=job.settings.reference_tf32, **extra)
        return WorkerReply(ok=status is Status.CORRECT, eval=ev, device_name=ev.device_name,
                           versions=versions())

    enter(Stage.LOAD)
    try:
        task = import_task(job)
        init = call_factory(task, "get_init_inputs", job)
        if job.settings.device == "cuda":
            torch.cuda.init()  # lazy CUDA set-up rebinds nothing after the snapshot
        set_reference_tf32(job.settings.reference_tf32)
        integrity = Integrity()
        module = import_file(job.candidate_path, "kevin_candidate")
        if not hasattr(module, "ModelNew"):
            return result(Status.RUNTIME_ERROR, "the candidate defines no class ModelNew")
        torch.manual_seed(job.settings.seed)
        ref = getattr(task, job.class_name)(*init).to(job.settings.device)
        torch.manual_seed(job.settings.seed)
        cand = module.ModelNew(*call_factory(task, "get_init_inputs", job)).to(job.settings.device)
        copy_parameters(ref, cand)
        check_integrity(integrity, "after loading")
        return _check_and_time(job, task, ref, cand, outcome, enter, result, integrity)
    except Mismatch as exc:
        return result(Status.INCORRECT, str(exc))
    except RuleBroken as exc:
        return result(Status.CHECK_FAILED, str(exc))
    except BaseException as exc:  # candidate code may raise anything, SystemExit included
        return result(Status.RUNTIME_ERROR, describe(exc, job.candidate_path, job.task_path))


def _check_and_time(job, task, ref, cand, outcome: Outcome, enter, result, integrity) -> WorkerReply:
    from .graphs import graph_column
    from .plausibility import implausibility, runtime_floor
    from .timing import Timer, hidden_work, hidden_work_refusal

    enter(Stage.CORRECTNESS)
    poison = 0
    previous = None
    for i in range(job.settings.correctness_trials):
        seed, dist = job.settings.seed + i, DISTRIBUTIONS[i % len(DISTRIBUTIONS)]
        inputs = make_inputs(task, job, seed, dist)
        poison = poison or 4 * nbytes_of(inputs) + (64 << 20)
        outcome.trials += 1
        try:
            got, want = run_trial(cand, ref, inputs, device=job.settings.device, atol=job.settings.atol,
                                  rtol=job.settings.rtol, preset=job.settings.tolerance, outcome=outcome,
                                  poison_bytes=poison)
        except Mismatch as exc:
            return result(Status.INCORRECT, f"trial {i + 1} of {job.settings.correctness_trials} (seed {seed}, "
                          f"{dist} inputs): {exc}")
        if previous is not None and _unchanged(previous, (got, want)):
            return result(Status.INCORRECT, f"trial {i + 1}: the output did not change when the inputs "
                          "did (the reference's did): the result must be computed from the inputs")
        previous = (got, want)
        outcome.trials_passed += 1
    check_integrity(integrity, "during the correctness trials")
    if job.settings.op_audit:
        computing = audit_ops(cand, make_inputs(task, job, job.settings.seed + 300, "as-given"))
        sync(job.settings.device)
        if computing:
            raise RuleBroken(f"[no-torch-compute] ModelNew ran PyTorch compute operators: "
                             f"{', '.join(computing[:8])}; compute the result in your own kernel")
        check_integrity(integrity, "during the operator audit")

    enter(Stage.TIMING)
    timer = Timer(job.settings.device)
    timing_inputs = make_inputs(task, job, job.settings.seed + 500, "as-given")
    overhead_ms = timer.sync_overhead_ms(job.settings.timed_runs)
    runs = timer.runs(cand, timing_inputs, warmup=job.settings.warmup_runs, runs=job.settings.timed_runs)
    check_integrity(integrity, "while it was timed")
    runtime = runs.stream
    sync_check = hidden_work(runs, overhead_ms) if job.settings.device == "cuda" else None
    if sync_check is not None and (refusal := hidden_work_refusal(sync_check, runtime)):
        raise RuleBroken(refusal)
    reference = timer.time(ref, clone_all(timing_inputs), warmup=job.settings.warmup_runs, runs=job.settings.timed_runs)
    flags: list[str] = []
    compiled = None
    if job.settings.compare_compile:
        try:
            compiled_ref = torch.compile(ref)
            compiled = timer.time(compiled_ref, clone_all(timing_inputs), warmup=max(job.settings.warmup_runs, 1),
                                  runs=job.settings.timed_runs)
        except Exception as exc:
            flags.append(f"torch.compile of the reference failed, not compared: {describe(exc)[:300]}")

    # Re-check after timing: new values written into the very tensors the candidate was timed
    # on (an answer cached by address goes stale), then one more ordinary trial.
    fresh = make_inputs(task, job, job.settings.seed + 1000, "as-given")
    with torch.no_grad():
        for t, f in zip(timing_inputs, fresh):
            if isinstance(t, torch.Tensor) and t.shape == f.shape:
                t.copy_(f)
    try:
        with poisoned_memory(job.settings.device), torch.no_grad():
            got = cand(*timing_inputs)
            timer.sync()
            check_plain_tensors(got)
            check_inputs_unchanged(timing_inputs, fresh)
            check_no_alias(got, timing_inputs)
            want = ref(*clone_all(fresh))
        compare(got, want, job.settings.atol, job.settings.rtol, outcome, job.settings.tolerance)
        run_trial(cand, ref, make_inputs(task, job, job.settings.seed + 1001, "rescaled"), device=job.settings.device,
                  atol=job.settings.atol, rtol=job.settings.rtol, preset=job.settings.tolerance, outcome=outcome,
                  poison_bytes=poison)
    except Mismatch as exc:
        return result(Status.INCORRECT, f"re-check after timing failed: {exc}")

    speedup = reference.median_ms / max(runtime.median_ms, 1e-9)
    vs_compile = compiled.median_ms / max(runtime.median_ms, 1e-9) if compiled else None
    floor = runtime_floor(nbytes_of(fresh) + nbytes_of([got]), timer.bandwidth_bytes_per_ms(),
                          device=job.settings.device)
    if (flag := implausibility(runtime.median_ms, floor)) is not None:
        flags.append(flag)
    graph = None
    if job.settings.device == "cuda":
        # Last, with every check passed: candidate code runs inside the capture, and the verdict
        # does not depend on it (a model that cannot be captured just gets a note).
        graph = graph_column(timer, cand, ref, timing_inputs, candidate_ms=runtime.median_ms,
                             replays=max(5, job.settings.timed_runs // 4), atol=job.settings.atol,
                             rtol=job.settings.rtol, preset=job.settings.tolerance)
        check_integrity(integrity, "while it was replayed from a CUDA graph")
    enter(Stage.DONE)
    return result(Status.CORRECT, runtime=runtime, reference=reference, compiled_reference=compiled,
                  speedup=speedup, speedup_vs_compile=vs_compile, flags=flags, floor=floor,
                  implausible=flag is not None, sync=sync_check, graph=graph)


def _unchanged(previous, current) -> bool:
    (got0, want0), (got1, want1) = previous, current
    same_shapes = all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                      for a, b in zip(got0 + [w for _, w in leaves(want0)], got1 + [w for _, w in leaves(want1)]))
    if not same_shapes:
        return False
    ref_same = all(same_values(a, b) for (_, a), (_, b) in zip(leaves(want0), leaves(want1)))
    cand_same = all(same_values(a, b) for a, b in zip(got0, got1))
    return cand_same and not ref_same


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    job = Job.model_validate_json(Path(args[0]).read_text())
    progress = open(job.progress_path, "a", encoding="utf-8")  # noqa: SIM115 (open until exit)

    def stage(s: Stage) -> None:
        progress.write(s.value + "\n")
        progress.flush()

    if job.settings.device == "cpu" and job.settings.cpu_threads:
        torch.set_num_threads(job.settings.cpu_threads)
    modes = {"probe": do_probe, "compile": do_compile, "run": do_run}
    try:
        reply = modes[job.mode](job, stage)
    except BaseException as exc:
        reply = WorkerReply(ok=False, error_kind="runtime", error=describe(exc, job.candidate_path))
    tmp = job.reply_path + ".tmp"
    Path(tmp).write_text(reply.model_dump_json(), encoding="utf-8")
    os.replace(tmp, job.reply_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate atexit hooks and extension destructors may hang or crash.
    os._exit(0)


if __name__ == "__main__":
    main()
