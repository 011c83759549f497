"""Timed rounds as numbers: the statistics of a callable's runs, the round-by-round ratios a
speedup is the median of, a distribution-free interval for that median, and a confirmation's
verdicts pooled over its workers.

Pure arithmetic, no torch: a worker computes its own numbers with it (bound at import, before any
candidate code runs), and the parent pools the rounds of a confirmation's workers with the same
functions, so that a confirmed speedup is one median over every round of every worker.

Why a confirmation has several workers: where a process's kernels and buffers happen to lie in the
GPU's memory moves a microsecond call's time, and a process cannot move all of it (its kernels'
code stays where the driver loaded it). On the H200 the example rmsnorm kernel read medians 4.31x
to 4.45x in six processes, each steady to 0.5% over 512 rounds at 64 placements of its inputs and
parameters (docs/gpu-runs.md, run 31): the interval of one worker's rounds does not cover what the
next worker reads. Rounds pooled over several workers average that over the processes too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ..results import Confirmed, LaunchedTiming, TimingStats
from .jobs import KernelRounds
from .plausibility import implausibility, reached

_median = statistics.median

LEVEL = 0.95


def _quantile(sorted_values: list[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stats(times_ms: Sequence[float], host_waits: int = 0) -> TimingStats:
    s = sorted(times_ms)
    return TimingStats(
        median_ms=_median(s),
        mean_ms=statistics.fmean(s),
        std_ms=statistics.pstdev(s) if len(s) > 1 else 0.0,
        min_ms=s[0],
        max_ms=s[-1],
        p10_ms=_quantile(s, 0.10),
        p90_ms=_quantile(s, 0.90),
        runs=len(s),
        host_waits=host_waits,
    )


def ratios(over_ms: Sequence[float], under_ms: Sequence[float]) -> list[float]:
    """Round by round, one callable's time over another's (the reference's over a kernel's: its speedup)."""
    return [a / max(b, 1e-9) for a, b in zip(over_ms, under_ms)]


def median_interval(values, level: float = LEVEL) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics (l, n + 1 - l) with l
    the largest such that P(B <= l - 1) <= (1 - level) / 2, B ~ Binomial(n, 1/2), since the
    number of values below the median is B. With too few values for ``level`` it is (min, max)."""
    s = sorted(values)
    n = len(s)
    tail = (1 - level) / 2
    cut, cdf = 0, 0.0
    for j in range((n + 1) // 2):
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) - n * math.log(2))
        if cdf > tail:
            break
        cut = j
    return s[cut], s[n - 1 - cut]


def pooled(verdicts: Sequence[Confirmed], rounds: Sequence[KernelRounds | None]) -> Confirmed:
    """One kernel's verdicts from a confirmation's workers, with each worker's raw rounds of it
    (None where it was not timed), as one verdict, for one worker as for several: verified where
    every worker verified it (else the first worker's reason for dropping it), its numbers made
    from all the workers' rounds together, the physical floor applied to that median, and each
    worker's own median kept beside them; the roofline's fractions are those of the pooled medians."""
    trials = {"trials": sum(v.trials for v in verdicts), "trials_passed": sum(v.trials_passed for v in verdicts),
              "max_abs_err": max((v.max_abs_err for v in verdicts if v.max_abs_err is not None), default=None),
              "max_rel_err": max((v.max_rel_err for v in verdicts if v.max_rel_err is not None), default=None)}
    dropped = next((v for v in verdicts if not v.verified), None)
    if dropped is not None:
        return dropped.model_copy(update=trials)

    def joined(which: str, field: str = "stream_ms") -> list[float]:
        """One callable's times over every worker's rounds, worker after worker."""
        return [t for r in rounds for t in getattr(getattr(r, which), field)]

    def timed(which: str) -> TimingStats:
        return stats(joined(which), sum(getattr(r, which).host_waits for r in rounds))

    kernel = joined("kernel")
    speedups = ratios(joined("reference"), kernel)
    runtime = timed("kernel")
    update: dict = {**trials, "speedup_median": _median(speedups), "ci95": list(median_interval(speedups)),
                    "runs": len(speedups), "runtime": runtime, "reference": timed("reference"),
                    "worker_medians": [_median(ratios(r.reference.stream_ms, r.kernel.stream_ms)) for r in rounds]}
    if all(r.compiled is not None for r in rounds):
        vs_compile = ratios(joined("compiled"), kernel)
        update.update(compiled_reference=timed("compiled"), speedup_vs_compile_median=_median(vs_compile),
                      vs_compile_ci95=list(median_interval(vs_compile)))
    if all(r.kernel.launched_ms and r.reference.launched_ms for r in rounds):
        launched_kernel = stats(joined("kernel", "launched_ms"))
        launched_reference = stats(joined("reference", "launched_ms"))
        update["launched"] = LaunchedTiming(runtime=launched_kernel, reference=launched_reference,
                                            speedup=launched_reference.median_ms / max(launched_kernel.median_ms, 1e-9))
    first = verdicts[0]
    if first.roofline is not None:
        compiled = update.get("compiled_reference")
        update["roofline"] = reached(first.roofline, runtime.median_ms, update["reference"].median_ms,
                                     compiled.median_ms if compiled is not None else None)
    if first.floor is not None:
        flag = implausibility(runtime.median_ms, first.floor)
        update.update(flags=first.flags + ([flag] if flag else []), implausible=flag is not None)
    return first.model_copy(update=update)
