"""The reference's side of every evaluation, made once per task and kept in the build cache.

For each set of inputs the protocol uses (the correctness trials, the operator audit, the
timing, the re-check after timing) the probe's worker draws the inputs from their seed on the
device (``get_inputs()`` with the device as torch's default device; on the host only where the
task's code cannot run there), fingerprints them, runs the reference on them once and records
the fingerprint of its answer; it also times the eager reference and ``torch.compile`` of it and
measures the device's bandwidth. Every candidate's worker draws each set again where it is used
and checks it against the fingerprints (``worker.trials``): drawing on a GPU takes a fraction of a
millisecond, where copying gigabytes from the host took seconds. The folder is
``<cache_dir>/reference/<key>/``; the key covers the task's source, the settings that change the
data or the timings, the toolchain and the device, so a run that resumes finds it and a changed
task does not. ``meta.json`` is written last: a folder without it is incomplete.

Kept free of torch: the parent reads the metadata (for the stage limits) without importing it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from ..config import EvalSettings
from ..results import TimingStats
from ..task import Task
from ..workers import Limit
from .toolchain import cache
from .memory import Footprint

FORMAT = 4
META = "meta.json"
OUTPUTS = "outputs.pt"
INPUTS = "inputs.pt"
GRAPH_CALLS, GRAPH_TARGET_S = 50, 0.002
"""The most calls in one captured graph, and the work one replay aims at (``timing.graph_calls``)."""
STORE_ANSWERS_BYTES = 1 << 30
"""The reference's answers up to this size (all sets together) may be stored; larger ones would
cost gigabytes of disk per task, so each worker computes them again on the device, after its
candidate has run, and checks each against the fingerprint recorded here. On cuda they are also
computed again wherever that is quicker than copying the stored answer to the device."""


class InputSet(BaseModel):
    """One set of inputs: how it is drawn, and what it was when the reference saw it."""

    name: str
    seed: int
    distribution: str
    digests: list[str]
    """``fingerprint.digest`` of each input, in order (a tensor's dtype, shape and bytes; the repr of
    anything else): a set drawn again must match them bitwise."""
    signature: int = 0
    """Which of the task's input signatures it is drawn at (``get_input_signatures()``; 0: the one
    ``get_inputs()`` gives, the headline)."""
    drawn_on: str = "cuda"
    """Where ``get_inputs()`` ran: the evaluation device, or ``cpu`` where the task cannot draw there."""
    nbytes: int
    shapes: list[str] = Field(default_factory=list)
    """Each input's dtype and shape (``taskcode.describe_inputs``)."""
    expected: bool
    """Whether the reference's answer to it is used (stored, or computed again by each worker)."""
    answer_digest: str = ""
    """``fingerprint.digest`` of the reference's answer to it, when answered."""


class Signature(BaseModel):
    """One input signature a task says its module is called with (``get_input_signatures()``)."""

    count: int
    """How often the model calls the module with it (per forward): its weight in the speedup."""
    inputs: list[str]
    """Each input's dtype and shape (strides where not contiguous), for people."""
    call_s: float = 0.0
    """One call of the reference at it, in seconds (measured answering its set): its stages' limits."""


MAX_SIGNATURES = 8
"""Signatures checked for correctness at most (the most frequent first)."""
TIMED_SIGNATURES = 3
"""Signatures timed at most (the most frequent first), the headline's among them."""


class ReferenceData(BaseModel):
    """``meta.json``: what the reference worker found."""

    format: int = FORMAT
    key: str
    sets: list[InputSet]
    inputs_stored: bool
    """The inputs are in ``inputs.pt``: ``get_inputs()`` does not give the same inputs twice for one
    seed, so they cannot be drawn again (else every worker draws them again)."""
    eager: TimingStats
    call_s: float
    """One timed call of the reference with the harness's work around it (the cache flush), in
    seconds: the unit of the timing stage's limit (the eager median is the others' unit)."""
    compiled: TimingStats | None = None
    compile_error: str = ""
    bandwidth_bytes_per_ms: float
    flops: float | None = None
    """The reference's FLOPs in one call at the headline's signature, as ``torch.utils.flop_counter``
    counts them (matmuls, convolutions, attention; element-wise work is 0); None: not countable."""
    flop_dtype: str = ""
    """The dtype of the task's inputs, as the FLOP rate was measured in (``tf32`` for float32 with
    the reference's TF32 on)."""
    flop_rate_per_ms: float | None = None
    """The device's FLOP rate for ``flop_dtype`` (a large matmul; measured only where ``flops`` > 0)."""
    output_bytes: int = 0
    answers_stored: bool = True
    """Whether the answers are in ``outputs.pt``; if not, each worker computes them again."""
    answers_repeatable: bool = True
    """The reference gave bitwise the same answer twice to the same inputs: an answer computed again
    must then match its stored fingerprint (tried only where the answers are not stored, the one
    case that computes them again)."""
    footprint: Footprint | None = None
    """The task's own device memory, as the probe measured it."""
    transfer_bytes_per_s: float = 0.0
    """How fast the inputs move from the host to the device (a copy of one set), for the stage limits."""
    draw_s: float = 0.0
    """The longest a set took to draw again and fingerprint (a worker does it inside a candidate's
    stage, one set at a time), for the stage limits."""
    signatures: list[Signature] = Field(default_factory=list)
    """The task's input signatures, most frequent first (the first is the headline's, ``get_inputs()``);
    empty for a task that names none."""
    device_name: str = ""
    created_at: str = ""
    versions: dict[str, str] = Field(default_factory=dict)

    def input_set(self, name: str) -> InputSet:
        return next(s for s in self.sets if s.name == name)


def input_plan(settings: EvalSettings, signatures: int = 1) -> list[tuple[str, int, str, bool, int]]:
    """(name, seed, distribution, answer kept, signature) for every set of inputs the protocol uses:
    the headline's trials, audit, timing and re-check sets, then, for a task that names more input
    signatures than its headline one, a trial at each (at most ``MAX_SIGNATURES`` in all) and a timing
    set at the most frequent (at most ``TIMED_SIGNATURES`` in all)."""
    base = settings.seed
    plan = [(f"trial-{i + 1}", base + i, ("as-given", "rescaled")[i % 2], True, 0)
            for i in range(settings.correctness_trials)]
    plan += [("audit", base + 300, "as-given", False, 0), ("timing", base + 500, "as-given", False, 0),
             ("recheck", base + 1000, "as-given", True, 0), ("recheck-trial", base + 1001, "rescaled", True, 0)]
    for j in range(1, min(signatures, MAX_SIGNATURES)):
        plan.append((signature_set(j), base + 2000 + j, "as-given", True, j))
    for j in range(1, min(signatures, TIMED_SIGNATURES)):
        plan.append((signature_set(j, timing=True), base + 3000 + j, "as-given", False, j))
    return plan


def signature_set(index: int, timing: bool = False) -> str:
    """The name of the set drawn at input signature ``index`` for a trial (or for timing)."""
    return f"signature-{index}" + ("-timing" if timing else "")


def reference_key(task: Task, settings: EvalSettings, device_name: str) -> str:
    what = {
        "format": FORMAT, "task": hashlib.sha256(task.source.encode()).hexdigest(), "class": task.class_name,
        "device": settings.device, "device_name": device_name, "toolchain": cache.toolchain(settings.device),
        **settings.model_dump(mode="json", include={"seed", "correctness_trials", "warmup_runs", "timed_runs",
                                                    "compare_compile", "cpu_threads", "reference_tf32"}),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def read(folder: Path) -> ReferenceData | None:
    """The folder's metadata, or None while it is incomplete (or of another format)."""
    try:
        data = ReferenceData.model_validate_json((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if data.format == FORMAT else None


def stage_limit(phase: str, settings: EvalSettings, ref: ReferenceData | None) -> Limit:
    """How long a candidate's stage may run: a floor, plus a multiple of the time the reference's
    own calls in that stage take, capped at ``run_timeout_s``."""
    cap = settings.run_timeout_s
    if phase == "load":
        seconds = min(settings.load_timeout_s, cap)
        return Limit(seconds, f"load_timeout_s = {seconds:g} s")
    if phase == "compile":  # a Triton candidate's first call, which compiles and tunes its kernels
        seconds = min(settings.compile_timeout_s, cap)
        return Limit(seconds, f"compile_timeout_s = {seconds:g} s, at most run_timeout_s")
    calls = {"correctness": 2 * settings.correctness_trials + 1,
             "timing": 2 * (settings.warmup_runs + settings.timed_runs) + 4}.get(phase)
    if calls is None or ref is None:
        return Limit(cap, f"run_timeout_s = {cap:g} s")
    if not ref.answers_stored:  # the reference runs after the candidate, twice per trial
        calls += {"correctness": 2 * settings.correctness_trials, "timing": 3}.get(phase, 0)
    per_call = ref.call_s if phase == "timing" else ref.eager.median_ms / 1e3
    extra = [moved_inputs(phase, settings, ref)]
    if (at_signatures := signatures_s(phase, settings, ref)) > 0:
        extra.append((settings.stage_time_factor * at_signatures, "at the task's other input signatures"))
    if phase == "timing" and settings.device == "cuda":
        # The CUDA-graph column: reference and candidate each replay a graph of at most
        # GRAPH_CALLS calls, or about GRAPH_TARGET_S of work, (timed_runs // 4, at least 5) times
        # after warm-up and capture (evaluate/worker/graphs.py).
        replays = max(5, settings.timed_runs // 4) + 4
        ref_s = ref.eager.median_ms / 1e3
        graphs = replays * (GRAPH_CALLS * ref_s + max(GRAPH_TARGET_S, settings.stage_time_factor * ref_s))
        extra.append((graphs, "for the CUDA-graph replays"))
    return scaled_limit(settings, calls, per_call, extra)


def signature_rounds(settings: EvalSettings) -> int:
    """Timed rounds at each input signature other than the headline's."""
    return max(10, settings.timed_runs // 4)


def signatures_s(phase: str, settings: EvalSettings, ref: ReferenceData) -> float:
    """The reference's own time for the calls a stage makes at the task's other input signatures:
    a trial at each checked one (the candidate's calls, and the reference's where the answers are
    computed again, count alike), rounds at each timed one."""
    others = ref.signatures[1:]
    if phase == "correctness":
        per = 4 if not ref.answers_stored else 2
        return sum(per * s.call_s for s in others[:MAX_SIGNATURES - 1])
    if phase == "timing":
        calls = 2 * (settings.warmup_runs + signature_rounds(settings))
        return sum(calls * s.call_s for s in others[:TIMED_SIGNATURES - 1])
    return 0.0


def scaled_limit(settings: EvalSettings, calls: int, per_call_s: float,
                 extra: Sequence[tuple[float, str]] = ()) -> Limit:
    """``stage_floor_s`` plus ``stage_time_factor`` times ``calls`` calls of ``per_call_s`` (the
    reference's own time per call), plus each ``extra`` (seconds, what for) that is worth naming,
    capped at ``run_timeout_s``."""
    floor, factor, cap = settings.stage_floor_s, settings.stage_time_factor, settings.run_timeout_s
    seconds = floor + factor * calls * per_call_s
    how = (f"stage_floor_s {floor:g} s + stage_time_factor {factor:g} x {calls} calls x {per_call_s * 1e3:.3g} ms, "
           "the reference's own time per call")
    for more, what in extra:
        if more >= 0.05:
            seconds += more
            how += f" + {more:.3g} s {what}"
    if seconds > cap:
        return Limit(cap, f"{how}, capped at run_timeout_s = {cap:g} s")
    return Limit(seconds, how)


def moved_inputs(phase: str, settings: EvalSettings, ref: ReferenceData) -> tuple[float, str]:
    """Four times what drawing a stage's inputs again (each run of a trial draws its own copy) and
    copying stored answers to the device takes, and what for: large tasks spend time on it that has
    nothing to do with the candidate."""
    draws = {"correctness": 2 * settings.correctness_trials + 1, "timing": 5}.get(phase, 0)
    seconds = draws * ref.draw_s
    if ref.answers_stored and ref.transfer_bytes_per_s > 0:
        answer = ref.output_bytes // max(sum(s.expected for s in ref.sets), 1)
        copies = {"correctness": 2 * settings.correctness_trials, "timing": 2}.get(phase, 0)
        seconds += copies * answer / ref.transfer_bytes_per_s
    return 4 * seconds, "to draw the inputs again and copy the answers to the device"
