"""One candidate inside its run worker: load it, check it against the reference's stored answers,
time it against the eager reference, check it again (docs/evaluation.md has the protocol).

The worker gets here with the task imported, the reference built and the reference data
loaded (``trials.Trials``); the candidate is the first model code this process runs.
"""

from __future__ import annotations

import copy
import platform
from collections.abc import Callable

import torch

from ...config import EvalSettings
from ...results import (EvalResult, GraphTiming, LaunchedTiming, Roofline, RuntimeFloor, SignatureTiming, Stage,
                       Status, SyncCheck)
from ..toolchain.cache import cpu_name
from . import meter
from .first_call import INTERPRETER_FLAG, first_call
from .correctness import (Mismatch, Outcome, check_digests_unchanged, check_no_alias, check_plain_tensors,
                          LOW_PRECISION, judged, leaves, nbytes_of, poisoned_memory, run_trial, same_values, sync)
from .graphs import GRAPH_MAX_OUTPUT_BYTES, graph_column
from ..memory import graph_output_budget, timing_placements
from .guards import Integrity, audit_ops, refused_ops
from ..jobs import Job, WorkerReply
from ..plausibility import bandwidth, implausibility, reached, roofline, runtime_floor
from ..reference import MAX_SIGNATURES, TIMED_SIGNATURES, signature_rounds, signature_set
from .taskcode import TaskProblem, call_factory, describe, import_file
from .runs import Runs, hidden_work, hidden_work_refusal, speedup_of
from .placements import Placements
from .timing import Timer
from .trials import ReferenceChanged, Trials


_GRAPH_TOO_LARGE = "not measured: the task's inputs and outputs leave no room for the captured graphs"


class RuleBroken(Exception):
    """The candidate did at run time what the static rules forbid (reported as check_failed)."""


def check_integrity(integrity: Integrity, when: str) -> None:
    changed = integrity.changed()
    if changed:
        raise RuleBroken(f"[no-monkeypatch] {when}, the candidate had rebound {', '.join(changed[:5])}: "
                         "patching torch, the timer or the evaluator changes what is measured")


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return cpu_name() or platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.version.cuda:
        out["cuda"] = torch.version.cuda
    return out


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


def new_model(module, task, job: Job, ref) -> torch.nn.Module:
    """``module.ModelNew`` made as the reference was (the same seed, its init inputs), on the
    device, with the reference's parameters copied in."""
    torch.manual_seed(job.settings.seed)
    model = module.ModelNew(*call_factory(task, "get_init_inputs", job)).to(job.settings.device)
    copy_parameters(ref, model)
    return model


def run_candidate(job: Job, stage: Callable[[Stage], None], request: Callable[[str], object], task, ref,
                  trials: Trials, integrity: Integrity) -> WorkerReply:
    """Load, check and time ``job.candidate_path``; the reply carries the verdict."""
    outcome = Outcome()
    reached = [Stage.LOAD]
    device, footprint = job.settings.device, trials.meta.footprint
    meter.start(device)

    def enter(s: Stage) -> None:
        if s is Stage.TIMING:
            request("timing")  # returns once the device is this worker's alone
        reached[0] = s
        stage(s)

    def result(status: Status, error: str = "", **extra) -> WorkerReply:
        ev = EvalResult(status=status, stage=reached[0], correct=status is Status.CORRECT, error=error,
                        **outcome.evidence(), atol=outcome.atol, rtol=outcome.rtol, device=job.settings.device,
                        device_name=device_name(job.settings.device), tolerance=job.settings.tolerance,
                        reference_tf32=job.settings.reference_tf32, memory=meter.use(device, footprint), **extra)
        return WorkerReply(ok=status is Status.CORRECT, eval=ev, device_name=ev.device_name,
                           versions=versions())

    enter(Stage.LOAD)
    try:
        module = import_file(job.candidate_path, "kevin_candidate")
        if not hasattr(module, "ModelNew"):
            return result(Status.RUNTIME_ERROR, "the candidate defines no class ModelNew")
        cand = new_model(module, task, job, ref)
        check_integrity(integrity, "after loading")
        if job.settings.language == "triton":
            enter(Stage.COMPILE)  # Triton compiles at the first launch: the first call is the build
            if (failed := first_call(cand, trials.draw("audit"), device, job.candidate_path)) is not None:
                return result(*failed)
            check_integrity(integrity, "at its first call")
        return _check_and_time(job, trials, ref, cand, outcome, enter, result, integrity)
    except Mismatch as exc:
        return result(Status.INCORRECT, str(exc))
    except (RuleBroken, ReferenceChanged) as exc:
        return result(Status.CHECK_FAILED, str(exc))
    except TaskProblem as exc:  # inputs drawn again came out otherwise: the task's, not the candidate's
        return WorkerReply(ok=False, error_kind="task", error=str(exc), versions=versions())
    except BaseException as exc:  # candidate code may raise anything, SystemExit included
        error = describe(exc, job.candidate_path, job.task_path)
        if meter.is_oom(exc):
            if meter.oom_fault(exc, device, footprint, job.candidate_path) == "harness":
                return WorkerReply(ok=False, error_kind="harness", error=meter.harness_note(
                    exc, device, footprint, f"during {reached[0].value}"), versions=versions())
            error += meter.candidate_note(footprint)
        return result(Status.RUNTIME_ERROR, error)


def _answer(trials: Trials, name: str):
    """The reference, as ``run_trial`` calls it: the answer to set ``name``, put on the device (or
    computed there again) only once the candidate has run (its memory cannot hold it before)."""
    return lambda *inputs: trials.expected(name, inputs)


class Float32Reference:
    """The reference in float32, made on first need (a copy of its weights, TF32 off), on inputs cast
    to float32: the second opinion ``judged`` asks where bf16 or fp16 outputs differ beyond the
    tolerance. None where the copy cannot be made (too large to hold twice): no second opinion."""

    def __init__(self, ref) -> None:
        self.ref, self.copy, self.failed = ref, None, False

    def __call__(self, inputs):
        if self.copy is None and not self.failed:
            try:
                self.copy = copy.deepcopy(self.ref).float()
            except Exception:  # out of memory, or a module that cannot be copied: no second opinion
                self.failed = True
        if self.copy is None:
            return None
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.no_grad():
                return self.copy(*wide(inputs))
        except Exception:  # a reference that holds its dtype (a graph asserting bf16): no second opinion
            self.copy, self.failed = None, True
            return None
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32


def wide(value):
    """``value`` with its bf16 and fp16 tensors in float32, tuples and lists item by item."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in LOW_PRECISION else value
    if isinstance(value, (list, tuple)):
        return type(value)(wide(v) for v in value)
    return value


def _trial(settings: EvalSettings, trials: Trials, cand, name: str, outcome: Outcome, truth=None):
    """``run_trial`` on set ``name`` of ``trials``, each run on a fresh copy of it (``truth``: the
    reference in float32, asked where low-precision outputs differ beyond the tolerance)."""
    s = settings
    return run_trial(cand, _answer(trials, name), lambda: trials.draw(name), trials.digests(name),
                     device=s.device, atol=s.atol, rtol=s.rtol, preset=s.tolerance, outcome=outcome,
                     poison_bytes=trials.poison_bytes(), poison_unit=trials.poison_unit(), truth=truth)


def check_trials(settings: EvalSettings, trials: Trials, cand, outcome: Outcome, integrity: Integrity, ref) -> None:
    """The correctness trials and the operator audit (``ref``: the reference, whose own library calls
    the candidate may make), on the sets of ``trials``; raises ``Mismatch`` or ``RuleBroken``."""
    s, device = settings, settings.device
    truth = Float32Reference(ref) if ref is not None else None
    previous = None
    for i in range(s.correctness_trials):
        name = f"trial-{i + 1}"
        which = trials.input_set(name)
        outcome.trials += 1
        try:
            got, want = _trial(s, trials, cand, name, outcome, truth)
        except Mismatch as exc:
            raise Mismatch(f"trial {i + 1} of {s.correctness_trials} (seed {which.seed}, "
                           f"{which.distribution} inputs): {exc}") from None
        if previous is not None and _unchanged(previous, (got, want)):
            raise Mismatch(f"trial {i + 1}: the output did not change when the inputs "
                           "did (the reference's did): the result must be computed from the inputs")
        previous = (got, want)
        outcome.trials_passed += 1
    for j, entry in enumerate(trials.meta.signatures[1:MAX_SIGNATURES], start=1):
        # Every input signature the model uses: a kernel right at the headline's and wrong at
        # another is not verified.
        outcome.trials += 1
        try:
            _trial(s, trials, cand, signature_set(j), outcome, truth)
        except Mismatch as exc:
            raise Mismatch(f"at input signature {j} of {len(trials.meta.signatures)} "
                           f"({', '.join(entry.inputs)}, {entry.count} calls per forward): {exc}") from None
        outcome.trials_passed += 1
    check_integrity(integrity, "during the correctness trials")
    if s.op_audit:
        audited = trials.draw("audit")
        computing = audit_ops(cand, audited)
        sync(device)
        refused = refused_ops(computing, audit_ops(ref, trials.draw("audit"))) if computing else []
        if refused:
            beyond = " (beyond the library calls the reference makes itself)" if refused != computing else ""
            raise RuleBroken(f"[no-torch-compute] ModelNew ran PyTorch compute operators{beyond}: "
                             f"{', '.join(refused[:8])}; compute the result in your own kernel")
        check_integrity(integrity, "during the operator audit")


def _rewritten(timed_inputs: list, fresh: list) -> bool:
    """Write ``fresh`` into ``timed_inputs`` where every tensor matches in shape and dtype, tuples and
    lists of tensors item by item (False when they do not: sets of other shapes). A function of its
    own so that no loop variable outlives it holding a set's tensor."""
    pairs = list(_paired(timed_inputs, fresh))
    if not all(t is not None for t, _ in pairs):
        return False
    with torch.no_grad():
        for t, f in pairs:
            t.copy_(f)
    return True


def _paired(timed, fresh):
    """(timed tensor, fresh tensor) for every tensor of ``fresh``; (None, f) where ``timed`` has no
    tensor of that shape and dtype there."""
    if isinstance(fresh, torch.Tensor):
        ok = isinstance(timed, torch.Tensor) and timed.shape == fresh.shape and timed.dtype == fresh.dtype
        yield (timed if ok else None), fresh
    elif isinstance(fresh, (list, tuple)):
        if not isinstance(timed, (list, tuple)) or len(timed) != len(fresh):
            yield None, fresh
            return
        for t, f in zip(timed, fresh):
            yield from _paired(t, f)


def recheck(settings: EvalSettings, trials: Trials, cand, timed_inputs: list, outcome: Outcome, ref=None) -> int:
    """The re-check after timing: new values written into the very tensors the candidate was
    timed on (an answer cached by address goes stale), then one more ordinary trial. Raises
    ``Mismatch``; returns the bytes one call reads and writes (its inputs and output), for the
    physical floor. Empties ``timed_inputs`` before the ordinary trial, so that the trial has the
    room a trial is planned with: the caller must hold no other reference to its tensors."""
    s, device = settings, settings.device
    truth = Float32Reference(ref) if ref is not None else None
    fresh = trials.draw("recheck")
    inputs = timed_inputs if _rewritten(timed_inputs, fresh) else fresh  # sets of other shapes: their own
    del fresh
    try:
        with poisoned_memory(device), torch.no_grad():
            got = cand(*inputs)
            sync(device)
            check_plain_tensors(got)
            check_digests_unchanged(inputs, trials.digests("recheck"))
            check_no_alias(got, inputs)
            want = trials.expected("recheck", inputs)
        judged(got, want, inputs, truth, s.atol, s.rtol, outcome, s.tolerance)
        moved = nbytes_of(inputs) + nbytes_of([got])
        del got, want, inputs
        timed_inputs.clear()
        _trial(s, trials, cand, "recheck-trial", outcome, truth)
    except Mismatch as exc:
        raise Mismatch(f"re-check after timing failed: {exc}") from None
    return moved


def refuse_hidden_work(runs: Runs, overhead_ms: float, device: str) -> SyncCheck | None:
    """cuda: the check for work off the stream in ``runs``; raises ``RuleBroken`` past its limit."""
    if device != "cuda":
        return None
    sync_check = hidden_work(runs, overhead_ms)
    if refusal := hidden_work_refusal(sync_check, runs.stream):
        raise RuleBroken(refusal)
    return sync_check


def compile_failed(error: str) -> str:
    """The flag of a result whose reference could not be compiled with ``torch.compile``."""
    return f"torch.compile of the reference failed, not compared: {error}"


def physical_floor(settings: EvalSettings, trials: Trials, moved_bytes: int) -> RuntimeFloor:
    """The least time a call that reads and writes ``moved_bytes`` can take (``plausibility``).
    The bandwidth was measured by the reference worker, with the device to itself."""
    return runtime_floor(moved_bytes,
                         bandwidth(trials.meta.bandwidth_bytes_per_ms, settings.bandwidth_gb_s),
                         device=settings.device,
                         bandwidth_source="measured" if settings.bandwidth_gb_s is None else "given")


def roofline_of(settings: EvalSettings, trials: Trials, moved_bytes: int) -> Roofline:
    """The task's roofline for a call that reads and writes ``moved_bytes`` (no fractions yet): the
    bandwidth as the physical floor takes it, the reference's FLOPs at the measured FLOP rate."""
    meta = trials.meta
    return roofline(moved_bytes, bandwidth(meta.bandwidth_bytes_per_ms, settings.bandwidth_gb_s),
                    bandwidth_source="measured" if settings.bandwidth_gb_s is None else "given",
                    flops=meta.flops, flops_per_ms=meta.flop_rate_per_ms, dtype=meta.flop_dtype)


def signature_columns(settings: EvalSettings, trials: Trials, timer: Timer, cand, ref, runtime, reference,
                      speedup: float) -> tuple[list[SignatureTiming], float | None]:
    """A task with several input signatures: each one (the headline's first, as timed), the most
    frequent others timed head to head as the headline is, in fewer rounds; and the speedup weighted
    by the counts (the reference's time over the candidate's, summed over what the model calls)."""
    signatures = trials.meta.signatures
    if len(signatures) < 2:
        return [], None
    rows = [SignatureTiming(signature=0, count=signatures[0].count, inputs=signatures[0].inputs, runtime=runtime,
                            reference=reference, speedup=speedup)]
    for j, entry in enumerate(signatures[1:MAX_SIGNATURES], start=1):
        row = SignatureTiming(signature=j, count=entry.count, inputs=entry.inputs)
        if j < TIMED_SIGNATURES:
            inputs = trials.draw(signature_set(j, timing=True))
            runs, ref_runs = timer.rounds([cand, ref], Placements([inputs]), warmup=settings.warmup_runs,
                                          rounds=signature_rounds(settings))
            del inputs
            row = row.model_copy(update={"runtime": runs.stream, "reference": ref_runs.stream,
                                         "speedup": speedup_of(ref_runs, runs)})
        rows.append(row)
    timed = [r for r in rows if r.runtime is not None and r.reference is not None]
    weighted = (sum(r.count * r.reference.median_ms for r in timed)
                / max(sum(r.count * r.runtime.median_ms for r in timed), 1e-12))
    return rows, weighted


def launched_column(timer: Timer, cand, ref, inputs: list) -> LaunchedTiming | None:
    """cuda: candidate and reference with their launches in the time (``Timer.launched``)."""
    runtime, reference = timer.launched(cand, inputs), timer.launched(ref, inputs)
    if runtime is None or reference is None:
        return None
    return LaunchedTiming(runtime=runtime, reference=reference,
                          speedup=reference.median_ms / max(runtime.median_ms, 1e-9))


def cuda_graph(settings: EvalSettings, trials: Trials, timer: Timer, cand, ref, candidate_ms: float,
               integrity: Integrity) -> GraphTiming:
    """The CUDA-graph column, on a fresh copy of the timing set, within the evaluation's plan: the
    captured calls' outputs stay alive in the graph's pool, so a task whose outputs leave no room
    for them beside the inputs and the reference's answer gets a note instead."""
    s, fp = settings, trials.meta.footprint
    budget = graph_output_budget(fp, GRAPH_MAX_OUTPUT_BYTES)
    per_call = fp.forward_bytes if fp is not None else 0
    if budget < per_call:
        return GraphTiming(calls=0, runtime_note=_GRAPH_TOO_LARGE, reference_note=_GRAPH_TOO_LARGE)
    meter.release(s.device)  # the graphs' pools are made from what the device has free
    # Last, with every check passed: candidate code runs inside the capture, and the verdict does
    # not depend on it (a model that cannot be captured just gets a note).
    graph = graph_column(timer, cand, ref, trials.draw("timing"), candidate_ms=candidate_ms,
                         replays=max(5, s.timed_runs // 4), atol=s.atol, rtol=s.rtol, preset=s.tolerance,
                         output_budget=budget, per_call_bytes=per_call)
    check_integrity(integrity, "while it was replayed from a CUDA graph")
    return graph


def _check_and_time(job: Job, trials: Trials, ref, cand, outcome: Outcome, enter, result,
                    integrity: Integrity) -> WorkerReply:
    s, device = job.settings, job.settings.device
    enter(Stage.CORRECTNESS)
    check_trials(s, trials, cand, outcome, integrity, ref)

    # Candidate and eager reference back to back in this process, so that drift of the clocks
    # or the temperature between them cannot flatter either.
    enter(Stage.TIMING)
    timer = trials.timer or Timer(device)
    meter.release(device)  # what the trials left cached goes back before the timing's sets are drawn
    placements = Placements.drawn(lambda: trials.draw("timing"), timing_placements(trials.meta.footprint), device)
    timing_inputs = placements.first
    overhead_ms = timer.sync_overhead_ms(s.timed_runs)
    # Head to head, in rounds, on the same tensors (the re-check below writes new values into them).
    runs, ref_runs = timer.rounds([cand, ref], placements, warmup=s.warmup_runs, rounds=s.timed_runs)
    placements.close()
    check_integrity(integrity, "while it was timed")
    runtime, reference = runs.stream, ref_runs.stream
    sync_check = refuse_hidden_work(runs, overhead_ms, device)
    launched = launched_column(timer, cand, ref, timing_inputs)
    check_integrity(integrity, "while it was timed")
    flags: list[str] = []
    compiled = trials.compiled
    if s.compare_compile and compiled is None:
        flags.append(compile_failed(trials.meta.compile_error))
    moved = recheck(s, trials, cand, timing_inputs, outcome, ref)  # empties timing_inputs

    speedup = speedup_of(ref_runs, runs)
    signatures, weighted = signature_columns(s, trials, timer, cand, ref, runtime, reference, speedup)
    check_integrity(integrity, "while it was timed")
    vs_compile = compiled.median_ms / max(runtime.median_ms, 1e-9) if compiled else None
    floor = physical_floor(s, trials, moved)
    roof = reached(roofline_of(s, trials, moved), runtime.median_ms, reference.median_ms,
                   compiled.median_ms if compiled else None)
    if s.language == "triton" and device == "cpu":
        flags.append(INTERPRETER_FLAG)
    if (flag := implausibility(runtime.median_ms, floor)) is not None:
        flags.append(flag)
    graph = cuda_graph(s, trials, timer, cand, ref, runtime.median_ms, integrity) if device == "cuda" else None
    enter(Stage.DONE)
    return result(Status.CORRECT, runtime=runtime, reference=reference, compiled_reference=compiled,
                  speedup=speedup, speedup_vs_compile=vs_compile, flags=flags, floor=floor, roofline=roof,
                  implausible=flag is not None, sync=sync_check, graph=graph, launched=launched,
                  signatures=signatures, weighted_speedup=weighted)


def _unchanged(previous, current) -> bool:
    (got0, want0), (got1, want1) = previous, current
    same_shapes = all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                      for a, b in zip(got0 + [w for _, w in leaves(want0)], got1 + [w for _, w in leaves(want1)]))
    if not same_shapes:
        return False
    ref_same = all(same_values(a, b) for (_, a), (_, b) in zip(leaves(want0), leaves(want1)))
    cand_same = all(same_values(a, b) for a, b in zip(got0, got1))
    return cand_same and not ref_same
