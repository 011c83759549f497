"""What one evaluation of one candidate found: its outcome, its times, its memory."""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field


class Status(str, Enum):
    """Outcome of one turn, in the order a candidate can fail."""

    PARSE_ERROR = "parse_error"
    CHECK_FAILED = "check_failed"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    INCORRECT = "incorrect"
    CORRECT = "correct"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    """The person cancelled the generation: never shown to the model, and the turn is generated again."""

    @property
    def label(self) -> str:
        """The outcome in words, the same in every view: ``compile error``."""
        return self.value.replace("_", " ")


class Stage(str, Enum):
    """How far an evaluation got."""

    PARSE = "parse"
    CHECK = "check"
    COMPILE = "compile"
    LOAD = "load"
    CORRECTNESS = "correctness"
    TIMING = "timing"
    DONE = "done"


class Violation(BaseModel):
    """One static-check rule broken by a candidate."""

    rule: str
    """Stable rule name, e.g. ``no-try-except``."""
    message: str
    """What was found and why it is not allowed."""
    line: int | None = None


class CheckResult(BaseModel):
    """Static (AST) checks of a candidate source."""

    passed: bool
    violations: list[Violation] = Field(default_factory=list)

    def summary(self) -> str:
        return "; ".join(
            f"[{v.rule}] {v.message}" + (f" (line {v.line})" if v.line else "")
            for v in self.violations
        )


class TimingStats(BaseModel):
    """Time of one callable over many runs, in milliseconds."""

    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    p10_ms: float
    p90_ms: float
    runs: int
    host_waits: int = 0
    """cuda: runs in which the GPU waited for the host inside the timed call even with the longest
    lead (the call synchronises): their times include the host's. 0 for every call that only queues
    work (evaluate/worker/timing.py)."""


class SyncCheck(BaseModel):
    """The candidate's time with a device-wide synchronisation before the end mark, set against the
    same measurement of an empty call: work left running off the candidate's stream shows here."""

    synced: TimingStats
    """Start event, the call, a device-wide synchronisation, end event (on every run)."""
    overhead_ms: float
    """What the synchronisation itself adds: the same measurement of an empty call (median)."""
    hidden_ms: float
    """Median over runs of (synchronised time - stream time), less the overhead: work off the stream."""
    limit_ms: float
    """Hidden work above this is refused (see ``evaluate/worker/timing.py``)."""


class GraphTiming(BaseModel):
    """Per-call times replayed from a captured CUDA graph: what the kernel is worth inside a model
    that uses CUDA graphs or ``torch.compile(mode="reduce-overhead")``. Shown to people, not to the model."""

    calls: int
    """Calls captured in one graph; each replay is timed and divided by this."""
    runtime: TimingStats | None = None
    """The candidate, per call (None when it could not be captured; ``runtime_note`` says why)."""
    reference: TimingStats | None = None
    """The eager reference, per call (None when it could not be captured)."""
    speedup: float | None = None
    """Reference per-call time / candidate per-call time (medians), when both were captured."""
    runtime_note: str = ""
    """``not capturable: <reason>`` for the candidate, else ''."""
    reference_note: str = ""
    """``not capturable: <reason>`` for the reference, else ''."""


class LaunchedTiming(BaseModel):
    """cuda: candidate and eager reference timed with the GPU idle when each call starts, so the
    call's own launches are in its time: how KernelBench times, and what an eager model pays where
    the host launches slower than the GPU runs. The headline leaves the launches out (it queues the
    whole call first); the two differ for calls made of many small kernels."""

    runtime: TimingStats
    reference: TimingStats
    speedup: float
    """Reference / candidate (medians)."""


class SignatureTiming(BaseModel):
    """The candidate and the reference at one of the task's input signatures (a task extracted from
    a model names every signature the model called its module with)."""

    signature: int
    """Its place in ``get_input_signatures()`` (0: the headline's, ``get_inputs()``)."""
    count: int
    """How often the model calls the module with it: its weight."""
    inputs: list[str]
    runtime: TimingStats | None = None
    reference: TimingStats | None = None
    speedup: float | None = None
    """Reference / candidate, median of the rounds' ratios (None: checked for correctness, not timed)."""


class RuntimeFloor(BaseModel):
    """The least time the kernel could take: the bytes it must move at the device's bandwidth
    (and the FLOPs it must do at the device's FLOP rate, where both are known)."""

    bytes: int
    """Bytes of the inputs and the outputs: each must be read or written at least once."""
    bandwidth_gb_s: float
    """The device's memory bandwidth, in GB/s (10^9 bytes per second)."""
    bandwidth_source: str = "measured"
    """``measured`` (in the reference's worker) or ``given`` (``--bandwidth-gb-s``)."""
    flops: float | None = None
    flop_rate_tflop_s: float | None = None
    floor_ms: float
    """max(bytes / bandwidth, flops / FLOP rate), with the headroom of ``evaluate/plausibility.py``."""


class Roofline(BaseModel):
    """How close a time is to the least the device allows for the task's work: the roofline.

    Its floor is the bytes of the inputs and outputs at the measured bandwidth, or the reference's
    FLOPs (``torch.utils.flop_counter``) at the device's measured FLOP rate for the task's dtype,
    whichever is longer, with none of the plausibility floor's headroom. A fraction is the floor
    over a median time: 1.0 is a call as fast as the device streams its bytes (or does its
    arithmetic); what is left above it is what a faster kernel could still win. For people, never
    for the model's feedback."""

    bytes: int
    """Bytes of the inputs and the outputs of one call."""
    bandwidth_gb_s: float
    """The bandwidth the bytes are moved at, in GB/s: a copy's (bytes read plus bytes written),
    measured with the device to itself, or given (``bandwidth_source``)."""
    bandwidth_source: str = "measured"
    flops: float | None = None
    """The reference's FLOPs in one call, as ``torch.utils.flop_counter`` counts them (matmuls,
    convolutions, attention; element-wise work counts 0). None: not counted."""
    flop_rate_tflop_s: float | None = None
    """The device's FLOP rate for ``dtype``: a large matmul, measured (None where no FLOPs count)."""
    dtype: str = ""
    """The dtype the FLOP rate was measured in (the task's inputs')."""
    floor_ms: float
    """max(bytes / bandwidth, flops / FLOP rate): the least one call can take."""
    bound: Literal["memory", "compute"]
    """Which of the two sets the floor."""
    fraction: float | None = None
    """The floor over the kernel's median time (its confirmed median where it was confirmed)."""
    reference_fraction: float | None = None
    """The same for the eager reference, timed beside it."""
    compiled_fraction: float | None = None
    """The same for ``torch.compile`` of the reference (None where it was not timed)."""


class MemoryUse(BaseModel):
    """Device memory of one evaluation, set against the task's own."""

    peak_allocated_bytes: int
    """cuda: the most the worker's allocator had handed out at once while it evaluated the candidate;
    cpu: as ``peak_reserved_bytes``."""
    peak_reserved_bytes: int
    """cuda: the most the worker's allocator held from the device at once (what the device saw); cpu:
    how far the worker's resident memory rose above where it was when the evaluation started (the
    host is the device there: inputs drawn again for a set count too, up to two sets)."""
    footprint_bytes: int
    """The task's own: the reference's parameters, one set of inputs, its forward's peak."""
    planned_bytes: int
    """What the evaluation was planned to hold at most (``evaluate/memory.py``)."""
    measured: str = "cuda allocator"
    """Where the peak comes from: ``cuda allocator`` or ``host resident memory``."""

    @property
    def ratio(self) -> float:
        """Peak reserved memory over the task's footprint."""
        return self.peak_reserved_bytes / max(self.footprint_bytes, 1)


class StageTimes(BaseModel):
    """Where one evaluation's wall time went, in seconds; the fields add up to ``wall_s``."""

    queue: float = 0.0
    """Waiting: for a build slot, a worker, the device (another candidate's timing, the model's
    generation on the evaluation GPU)."""
    compile: float = 0.0
    """Building the candidate (a cache hit costs only the look-up)."""
    load: float = 0.0
    """Importing the candidate into its worker and building ``ModelNew``."""
    correctness: float = 0.0
    """The correctness trials and the operator audit."""
    timing: float = 0.0
    """Timing the candidate and the eager reference, and the re-check after timing."""

    @property
    def total(self) -> float:
        return self.queue + self.compile + self.load + self.correctness + self.timing

    @property
    def device(self) -> float:
        """Seconds the candidate's worker used the device (load, correctness, timing)."""
        return self.load + self.correctness + self.timing


class Correctness(BaseModel):
    """The evidence of a candidate's correctness: its trials and how near its outputs came."""

    trials: int = 0
    trials_passed: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rounding: str = ""
    """Outputs beyond the tolerance that were as near the reference in float32 as the reference's own
    low-precision outputs are (accepted, and said so): the leaf furthest off, in words."""
    atol: float | None = None
    rtol: float | None = None
    tolerance: str | None = None
    """The tolerance preset the outputs were compared with (strict, kernelbench); ``atol`` and
    ``rtol`` hold the values used, explicit --atol/--rtol included."""
    reference_tf32: bool | None = None
    """Whether the reference ran with TF32 matmuls and convolutions (during the checks and timing)."""

    @classmethod
    def of(cls, result: Correctness) -> Correctness:
        """The evidence alone, of a result that holds more."""
        return cls(**result.model_dump(include=set(cls.model_fields)))


class EvalResult(Correctness):
    """Everything one evaluation of one candidate found out: its correctness evidence, and what follows."""

    status: Status
    stage: Stage
    """The last stage entered; for failures, the stage that failed."""
    correct: bool = False
    error: str = ""
    """Error text for the person and for the model's feedback ('' when correct)."""
    compile_log: str = ""
    compile_s: float | None = None
    cached_build: bool = False
    runtime: TimingStats | None = None
    """The candidate's time: on cuda its own GPU time, the call queued whole before the start event
    (evaluate/worker/timing.py); on cpu wall time."""
    reference: TimingStats | None = None
    compiled_reference: TimingStats | None = None
    """``torch.compile`` of the reference, timed the same way (None when skipped)."""
    speedup: float | None = None
    """The median over the timing's rounds of (eager reference time / candidate time), both timed in
    each round (as a confirmation computes its speedup)."""
    speedup_vs_compile: float | None = None
    flags: list[str] = Field(default_factory=list)
    """Warnings about the result, e.g. a physically implausible runtime."""
    implausible: bool = False
    """The kernel's median time beat ``floor``, the least time physics allows: a measuring error or a
    trick. Such a kernel is never committed unasked and never ends a run by reaching a target speedup."""
    floor: RuntimeFloor | None = None
    """The least time the kernel could take (None when not computed)."""
    roofline: Roofline | None = None
    """How close the kernel, the eager reference and ``torch.compile`` come to the device's roofline
    for the task (correct kernels; None in older records)."""
    sync: SyncCheck | None = None
    """cuda: the check for work that escapes the stream (None on cpu and in older records)."""
    graph: GraphTiming | None = None
    """cuda: the "in a CUDA graph" column (None on cpu and in older records)."""
    launched: LaunchedTiming | None = None
    """cuda: the times with each call's launches in them (None on cpu and in older records)."""
    signatures: list[SignatureTiming] = Field(default_factory=list)
    """A task with several input signatures: each one checked (and the most frequent timed), the
    headline's first; empty for a task with one."""
    weighted_speedup: float | None = None
    """With several input signatures: the reference's time over the candidate's, each timed
    signature weighted by how often the model uses it (what the module saves in the model)."""
    memory: MemoryUse | None = None
    """The evaluation's peak device memory and the task's footprint (None in older records, and when
    the worker ended before it could say)."""
    device: str = "cpu"
    device_name: str = ""
    wall_s: float | None = None
    """From submission to result."""
    stage_s: StageTimes | None = None
    """``wall_s`` split by stage (None in records written before it existed)."""
