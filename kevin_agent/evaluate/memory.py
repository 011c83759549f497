"""Device memory: what a task needs, what one evaluation may hold, and whose fault running out is.

Pure functions of the numbers a device reports (the probe's measurement of the task, free and
total memory, an allocator's peak), so that every decision here is the same on a GPU and in a
test. Kept free of torch: the parent plans with it, the workers measure and decide with it.

The task's **footprint** is what the task alone needs on the device: the reference's parameters,
one set of inputs, and what the reference's forward allocates at its peak (its outputs
included). One candidate's evaluation holds, at its peak, the parameters of both models, one set
of inputs, and either the candidate's own room (**entitled**: twice the outputs, or the
reference's peak if larger) or the candidate's output next to the reference's answer, plus a
fixed allowance for the harness's own buffers: that is the **planned** memory, about 1.5x the
footprint for an element-wise task. A task whose planned memory does not fit the device is
refused at the probe, before any model turn. An out-of-memory error during an evaluation is the
candidate's when the process asked for more than was planned, or when the device still had the
candidate's room free; otherwise the harness (or another process) left it no room, and it is
never shown to the model as the candidate's failure.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from ..formatting import gib

GiB = 1 << 30
MiB = 1 << 20
HARNESS_BYTES = 1 * GiB
"""The harness's own buffers during an evaluation: the timer's cache-flush buffer (twice the L2
cache, at least 256 MiB), the timing's placements (``TIMING_PLACEMENTS_BYTES``), the comparison's
chunks, the allocator's rounding."""
WORKER_BYTES = 640 * MiB
"""A worker process's CUDA context and torch's own buffers, outside its allocator."""
POISON_MARGIN = 64 * MiB
"""Freed memory filled with NaN beyond twice the task's outputs before each trial."""


class Footprint(BaseModel):
    """The task's own device memory, measured by the probe on the inputs as given."""

    param_bytes: int = 0
    """The reference's parameters and buffers."""
    input_bytes: int
    """One set of inputs."""
    output_bytes: int
    """The reference's outputs."""
    peak_bytes: int
    """What the reference's forward allocated at its peak beyond its inputs and parameters (its
    outputs included; on cpu, where no allocator reports a peak, the rise of resident memory)."""

    @property
    def forward_bytes(self) -> int:
        return max(self.peak_bytes, self.output_bytes)

    @property
    def total(self) -> int:
        """Parameters, inputs and the forward's peak: what running the reference once needs."""
        return self.param_bytes + self.input_bytes + self.forward_bytes


def entitled(fp: Footprint) -> int:
    """What a candidate's forward may allocate beyond the inputs it is given: its output and as much
    again for temporaries, or the reference's own peak if that is more."""
    return max(2 * fp.output_bytes, fp.forward_bytes)


def planned(fp: Footprint) -> int:
    """The most one candidate's evaluation holds at once (the worker's allocator, not its context).

    Both models' parameters and one set of inputs throughout; on top, either the candidate's own
    room while it runs, or its output next to the reference's answer while they are compared."""
    return 2 * fp.param_bytes + fp.input_bytes + max(entitled(fp), fp.output_bytes + fp.forward_bytes) + HARNESS_BYTES


def per_worker(fp: Footprint) -> int:
    """One busy worker's whole share of the device: its plan and its context."""
    return planned(fp) + WORKER_BYTES


READY_BYTES = 320 * MiB
"""What a worker makes while it gets ready and keeps: the timer's cache-flush buffer (256 MiB on a
GPU whose L2 is under 128 MiB) and the fingerprint's weights (32 MiB)."""


def idle_worker(fp: Footprint) -> int:
    """A worker waiting for its candidate: its context, the buffers it made getting ready and the
    reference's parameters."""
    return WORKER_BYTES + READY_BYTES + fp.param_bytes


def capacity(free: int, total: int, *, model_fraction: float = 0.0, limit: int | None = None) -> int:
    """Device memory the evaluation may use: what is free, less what the model on the same device
    will take (vLLM takes ``model_fraction`` of the total when it starts), at most ``limit``."""
    room = min(free, int(total * (1.0 - model_fraction))) if model_fraction > 0 else free
    return min(room, limit) if limit is not None else room


def fit_problem(fp: Footprint, *, free: int, total: int, device_name: str, model_fraction: float = 0.0,
                limit: int | None = None) -> tuple[str, str, str] | None:
    """Why the task cannot be evaluated on this device, as (kind, message, hint), or None when it
    fits. kind ``task``: it does not fit the device at all (or the limit the person set);
    ``environment``: it would, but other processes (or the model) hold the memory it needs."""
    need = per_worker(fp)
    room = capacity(free, total, model_fraction=model_fraction, limit=limit)
    if need <= room:
        return None
    what = (f"the task needs ~{gib(need)} of device memory for one evaluation (its inputs {gib(fp.input_bytes)}, "
            f"the reference's outputs {gib(fp.output_bytes)} and peak {gib(fp.forward_bytes)}, the candidate's "
            f"room and the harness's buffers)")
    shrink = "shrink get_inputs()"
    if limit is not None and need > limit and limit <= min(free, total):
        return ("task", f"{what}; --eval-memory-gib allows {gib(limit)} on {device_name}",
                f"{shrink}, or allow more with --eval-memory-gib")
    if need > total:
        return "task", f"{what}; {device_name} has {gib(total)} in all", shrink
    held = []
    if total - free > 2 * WORKER_BYTES:
        held.append(f"other processes hold {gib(total - free)}")
    if model_fraction > 0:
        held.append(f"the model will hold {model_fraction:.0%} (--gpu-memory-utilization)")
    return ("environment", f"{what}; {gib(room)} are free for it on {device_name} ({'; '.join(held) or 'in use'})",
            f"{shrink}, or free device memory (lower --gpu-memory-utilization, run the model on another GPU "
            "with --eval-gpu, or stop other processes on this one)")


def confirming_worker(fp: Footprint) -> int:
    """One confirmation worker's whole share, counted generously: an evaluation's, the timing set it
    keeps beside its fresh sets, and an answer's worth more (``torch.compile`` of the reference is
    run there too)."""
    return per_worker(fp) + fp.input_bytes + fp.forward_bytes


def confirmations_at_once(fp: Footprint | None, room: int | None, wanted: int, ready: int) -> int:
    """Confirmation workers at once within ``room``, beside ``ready`` waiting run workers: at least one."""
    if fp is None or not room:
        return 1
    left = room - ready * idle_worker(fp)
    return max(1, min(wanted, left // max(confirming_worker(fp), 1)))


def concurrency(fp: Footprint, room: int, workers: int) -> tuple[int, int]:
    """(candidates evaluated at once, workers kept ready) within ``room``: busy workers hold their
    plan, waiting ones a context each; at least one of each."""
    busy = max(1, min(workers, room // max(per_worker(fp), 1)))
    left = room - busy * per_worker(fp)
    ready = max(1, min(workers, left // max(idle_worker(fp), 1)))
    return busy, ready


def poison_bytes(fp: Footprint | None, room: int | None, *, lean: bool = False) -> int:
    """How much memory the allocator has not handed out yet is filled with NaN before a trial
    (``correctness.poison_free_blocks``): where an output the candidate never writes could land,
    twice its size, but never more than half of what is left (a quarter when ``lean``)."""
    want = POISON_MARGIN + (2 * fp.output_bytes if fp is not None and not lean else 0)
    if room is None:
        return want
    return fit_poison(want, room // (4 if lean else 2), fp.output_bytes if fp is not None and not lean else 0)


def fit_poison(want: int, cap: int, unit: int) -> int:
    """``want`` bytes of fresh poison within ``cap``: all of it where it fits; else only whole
    ``unit``s (the outputs' size), or no more than the margin where not one fits. A poisoned block
    the output does not fill is split by it, and the reference's answer then needs a segment of its
    own beside the rest: past the plan (the 6 GiB ReLU beside a process holding 80% of the H200
    held 22.5 GiB of a 19.0 GiB plan, its poison capped at 10.4 GiB)."""
    if want <= cap:
        return max(0, want)
    if unit > 0 and cap >= unit:
        return cap // unit * unit
    return max(0, min(cap, POISON_MARGIN))


TIMING_PLACEMENTS_BYTES = 384 * MiB
"""The timing's placements, all together, are kept within this (part of ``HARNESS_BYTES``)."""
MAX_PLACEMENTS = 16


def pool_bytes(nbytes: int) -> int:
    """What a memory pool of its own reserves to hold ``nbytes`` in one block: the caching
    allocator's segment sizes (2 MiB up to 1 MiB, 20 MiB up to 10 MiB, else rounded up to 2 MiB)."""
    if nbytes <= 1 * MiB:
        return 2 * MiB
    if nbytes < 10 * MiB:
        return 20 * MiB
    return -(-nbytes // (2 * MiB)) * (2 * MiB)


def timing_placements(fp: Footprint | None) -> int:
    """How many placements the timing's rounds go round (``placements.Placements``): where a call
    takes microseconds, where its inputs, outputs and temporaries happen to lie moves its time by up
    to 10% (docs/gpu-runs.md, run 19), and one worker's addresses are fixed for its life; so a small
    task is timed at up to ``MAX_PLACEMENTS`` placements, each holding a set of inputs and what one
    call allocates, and a large one (whose calls stream gigabytes) at one."""
    if fp is None or fp.input_bytes <= 0:
        return 1
    each = 2 * MiB + pool_bytes(fp.input_bytes + fp.forward_bytes)
    return max(1, min(MAX_PLACEMENTS, TIMING_PLACEMENTS_BYTES // each))


def graph_output_budget(fp: Footprint | None, cap: int) -> int:
    """Bytes the CUDA-graph column's captured calls may hold within the evaluation's plan (each
    captured call keeps what it allocated in the graph's pool, its output and its temporaries: up to
    the reference's peak, ``Footprint.forward_bytes``): what the plan leaves beside both models'
    parameters, the timing inputs, the reference's answer and one call's own room; at most ``cap``."""
    if fp is None:
        return cap
    held = 2 * fp.param_bytes + fp.input_bytes + fp.output_bytes + entitled(fp)
    return max(0, min(cap, planned(fp) - held))


_REQUEST = re.compile(r"[Tt]ried to allocate ([\d.]+) ?([KMGT]i?B|B|bytes)")
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def requested_bytes(message: str) -> int:
    """The failed request's size from an allocator's out-of-memory message (0 when it says none)."""
    m = _REQUEST.search(message)
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else 0


def is_out_of_memory(message: str, type_name: str = "") -> bool:
    """Whether an exception (its type's name and message) is the device or host running out of memory."""
    text = message.lower()
    return (type_name == "OutOfMemoryError" or "out of memory" in text or "can't allocate memory" in text
            or type_name == "MemoryError")


def oom_fault(*, in_candidate: bool, demand: int | None = None, planned_bytes: int | None = None,
              room: int | None = None, entitled_bytes: int | None = None) -> str:
    """``candidate`` or ``harness``: whose an out-of-memory error is.

    ``demand`` is what the process asked for (the allocator's peak during the evaluation plus the
    failed request), ``room`` what the device still had free for it afterwards. The harness keeps
    within its plan, so a demand past the plan is the candidate's, wherever it was raised (a
    candidate that holds on to memory makes the harness's own allocation fail). Within the plan,
    an error in the harness's own code is the harness's; one in the candidate's code is the
    candidate's if the device still had its room free, else the harness (or another process)
    left it none. Without the numbers (cpu) it is where it was raised."""
    if demand is not None and planned_bytes is not None and demand > planned_bytes:
        return "candidate"
    if not in_candidate:
        return "harness"
    if room is not None and entitled_bytes is not None and room < entitled_bytes:
        return "harness"
    return "candidate"

