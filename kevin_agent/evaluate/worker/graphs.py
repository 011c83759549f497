"""The "in a CUDA graph" column: candidate and reference replayed from captured graphs.

Both are captured the same way (``Timer.graph_time``: ``calls`` calls in one graph, on the timer's
own stream, after warm-up) and timed per call. It runs after every check has passed, because
candidate code runs inside the capture, and nothing in the verdict depends on it: a model that
cannot be captured (it synchronises, launches on the legacy default stream, allocates with
cudaMalloc, ...) gets ``not capturable: <reason>`` in the column and is otherwise unaffected.

A replay must compute the answer, not repeat one: before the last replay every output of the
captured call is overwritten (NaN; integers: the dtype's maximum; booleans: inverted), and after it
the output is compared with the eager reference on the same inputs. A graph that captured nothing (work
that ran eagerly during the capture, on a stream outside it) fails that comparison and is shown
as not capturable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ...results import GraphTiming, TimingStats
from .correctness import Mismatch, Outcome, compare, leaves, nbytes_of
from .timing import GRAPH_MAX_OUTPUT_BYTES, GraphRun, NotCapturable, Timer, graph_calls, reason


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
        run: GraphRun = timer.graph_time(fn, args, calls=calls, replays=replays)
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
