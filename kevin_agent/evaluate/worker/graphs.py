"""The "in a CUDA graph" column: candidate and reference replayed from captured graphs.

Both are captured the same way (``graph_time``: ``calls`` calls in one ``CUDAGraph`` on a stream of
its own, after warm-up) and timed per call: each replay with stream events after the timer's flush
and a lead, divided by ``calls``. Only the first call of a replay starts cold: this is the time
inside a model that replays graphs (CUDA graphs, ``torch.compile(mode="reduce-overhead")``). A
callable that cannot be captured raises ``NotCapturable``. The stream and graph functions are bound
when this module is imported, before any candidate code runs, as the timer's are.

The column runs after every check has passed, because candidate code runs inside the capture, and
nothing in the verdict depends on it: a model that cannot be captured (it synchronises, launches on
the legacy default stream, allocates with cudaMalloc, ...) gets ``not capturable: <reason>`` in the
column and is otherwise unaffected.

A replay must compute the answer, not repeat one: before the last replay every output of the
captured call is overwritten (NaN; integers: the dtype's maximum; booleans: inverted), and after it
the output is compared with the eager reference on the same inputs. A graph that captured nothing (work
that ran eagerly during the capture, on a stream outside it) fails that comparison and is shown
as not capturable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ...results import GraphTiming, TimingStats
from ..rounds import stats
from .correctness import Mismatch, Outcome, compare, leaves, nbytes_of
from .timing import (LEAD_MIN_MS, Timer, _cuda_sync, _current_stream, _event, _event_elapsed, _event_record,
                     _event_wait)

# The C functions under torch.cuda.Stream and torch.cuda.CUDAGraph, bound before any candidate code
# runs: rebinding the Python wrappers afterwards does not reach these references.
_StreamBase = getattr(torch._C, "_CudaStreamBase", None)
_c_set_stream = getattr(torch._C, "_cuda_setStream", None)
_GraphBase = getattr(torch._C, "_CUDAGraph", None)
_graph_begin = getattr(_GraphBase, "capture_begin", None)
_graph_end = getattr(_GraphBase, "capture_end", None)
_graph_replay = getattr(_GraphBase, "replay", None)

GRAPH_MAX_CALLS = 50
GRAPH_TARGET_MS = 2.0
"""Calls per graph: enough to fill about this long, at most GRAPH_MAX_CALLS."""
GRAPH_MAX_OUTPUT_BYTES = 1 << 30
"""The outputs of all captured calls stay alive in the graph's pool: at most this many bytes."""


class NotCapturable(Exception):
    """The callable cannot be captured in (or replayed from) a CUDA graph; the message says why."""


def graph_calls(stream_median_ms: float, output_bytes: int, budget: int = GRAPH_MAX_OUTPUT_BYTES) -> int:
    """Calls to capture in one graph: about GRAPH_TARGET_MS of work, their outputs within ``budget``."""
    by_time = math.ceil(GRAPH_TARGET_MS / max(stream_median_ms, 1e-6))
    by_memory = budget // max(output_bytes, 1)
    return max(1, min(GRAPH_MAX_CALLS, by_time, by_memory))


def reason(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


@dataclass
class GraphRun:
    """A captured graph's per-call times and the output of its last call (each replay rewrites it)."""

    stats: TimingStats
    output: object
    graph: object
    """Keeps the graph, and with it the pool that holds ``output``, alive."""

    def replay(self) -> None:
        _graph_replay(self.graph)
        _cuda_sync()


def graph_time(timer: Timer, fn: Callable, args: Sequence, *, calls: int, replays: int,
               warmup: int = 3) -> GraphRun:
    """Per-call time of ``calls`` calls of ``fn`` captured in one CUDA graph, over ``replays`` replays."""
    if timer.device != "cuda" or _graph_begin is None or _c_set_stream is None:
        raise NotCapturable("CUDA graphs exist on the cuda device only")
    graph = _GraphBase()
    output = _capture(graph, fn, args, calls=calls, warmup=warmup)
    stream = _current_stream()
    times = []
    for _ in range(replays):
        start, end = _event(), _event()
        timer.flush()
        timer.spin_for(LEAD_MIN_MS)
        _event_record(start, stream)
        _graph_replay(graph)
        _event_record(end, stream)
        _event_wait(end)
        times.append(float(_event_elapsed(start, end)) / calls)
    _cuda_sync()
    return GraphRun(stats(times), output, graph)


def _set_stream(stream) -> None:
    _c_set_stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


def _capture(graph, fn: Callable, args: Sequence, *, calls: int, warmup: int):
    # Capture needs a stream other than the legacy default one; warm-up on it first
    # (lazy initialisation, library handles and workspaces must not happen inside the capture).
    home = _current_stream()
    side = _StreamBase(priority=0)
    error: BaseException | None = None
    output = None
    _cuda_sync()
    _set_stream(side)
    try:
        with torch.no_grad():
            for _ in range(warmup):
                fn(*args)
            _cuda_sync()
            _graph_begin(graph, pool=None, capture_error_mode="global")
            try:
                for _ in range(calls):
                    output = fn(*args)
            except Exception as exc:  # candidate code: anything may come out of it
                error = exc
            try:
                _graph_end(graph)
            except Exception as exc:
                error = error or exc
    except Exception as exc:
        error = error or exc
    finally:
        _set_stream(home)
    if error is not None:
        _settle()
        raise NotCapturable(reason(error)) from None
    _cuda_sync()
    return output


def _settle() -> None:
    """After a failed capture: wait for the device; an error that surfaces here is the capture's."""
    try:
        _cuda_sync()
    except RuntimeError:
        return


def _poison(output) -> None:
    for _, t in leaves(output):
        if not isinstance(t, torch.Tensor) or not t.numel():
            continue
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.fill_(torch.iinfo(t.dtype).max)


def _replayed(timer: Timer, fn: Callable, args: Sequence, expected, *, calls: int, replays: int,
              atol: float | None, rtol: float | None, preset: str) -> tuple[TimingStats | None, str]:
    """(per-call stats, '') or (None, 'not capturable: <reason>')."""
    try:
        run = graph_time(timer, fn, args, calls=calls, replays=replays)
        with torch.no_grad():
            _poison(run.output)
            run.replay()
        compare(run.output, expected, atol, rtol, Outcome(), preset)
    except NotCapturable as exc:
        return None, f"not capturable: {exc}"
    except Mismatch as exc:
        return None, f"not capturable: the replayed graph does not compute the output ({str(exc)[:200]})"
    except Exception as exc:  # model code ran inside: whatever it raises only empties the column
        return None, f"not capturable: {reason(exc)}"
    return run.stats, ""


def graph_column(timer: Timer, candidate: Callable, reference: Callable, inputs: Sequence, *,
                 candidate_ms: float, replays: int, atol: float | None = None, rtol: float | None = None,
                 preset: str = "strict", output_budget: int = GRAPH_MAX_OUTPUT_BYTES,
                 per_call_bytes: int = 0) -> GraphTiming:
    """Per-call times of candidate and reference replayed from CUDA graphs, on ``inputs`` (both on
    the same tensors, which the trials found left unchanged: one copy of the inputs on the device).

    ``candidate_ms`` (the candidate's stream time) sets how many calls one graph holds, what they
    keep in the graph's pool (``per_call_bytes`` each, at least the output) within ``output_budget``."""
    with torch.no_grad():
        expected = reference(*inputs)
    timer.sync()
    calls = graph_calls(candidate_ms, max(nbytes_of([expected]), per_call_bytes), output_budget)
    ref_stats, ref_note = _replayed(timer, reference, inputs, expected, calls=calls, replays=replays,
                                    atol=atol, rtol=rtol, preset=preset)
    cand_stats, cand_note = _replayed(timer, candidate, inputs, expected, calls=calls,
                                      replays=replays, atol=atol, rtol=rtol, preset=preset)
    speedup = (ref_stats.median_ms / max(cand_stats.median_ms, 1e-9)
               if ref_stats is not None and cand_stats is not None else None)
    return GraphTiming(calls=calls, runtime=cand_stats, reference=ref_stats, speedup=speedup,
                       runtime_note=cand_note, reference_note=ref_note)
