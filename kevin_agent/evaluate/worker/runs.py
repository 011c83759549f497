"""Timed runs and what they say: one callable's runs (on the stream and synchronised), the speedup
of one over another, and the rule for work that escapes the stream. Pure arithmetic on numbers
``timing.Timer`` measured (the statistics and ratios themselves are ``evaluate.rounds``, which the
parent pools a confirmation's workers with); bound at import, before any candidate code runs, like
the timer itself."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ...results import SyncCheck, TimingStats
from ..rounds import ratios, stats

_median = statistics.median

HIDDEN_ABS_MS = 0.008
"""Hidden work below this is noise in the synchronisation's own cost, never refused."""
HIDDEN_REL = 0.10
"""Hidden work below this share of the stream time is never refused."""


@dataclass(frozen=True)
class Run:
    """One timed run: on the stream, up to a device-wide sync, and whether the whole call was queued
    before the GPU reached the start event (always on cpu)."""

    stream_ms: float
    synced_ms: float
    ahead: bool = True


@dataclass
class Runs:
    """Per-run times of one callable: on the stream, and with a device-wide sync before the end mark."""

    stream_ms: list[float]
    synced_ms: list[float]
    host_waits: int = 0
    """Runs in which the GPU still waited for the host at the longest lead (see the module's text)."""

    def add(self, run: Run) -> None:
        self.stream_ms.append(run.stream_ms)
        self.synced_ms.append(run.synced_ms)
        self.host_waits += not run.ahead

    @property
    def stream(self) -> TimingStats:
        return stats(self.stream_ms, self.host_waits)

    @property
    def synced(self) -> TimingStats:
        return stats(self.synced_ms)

    @property
    def after_ms(self) -> float:
        """Median over runs of what the synchronisation added to the stream time."""
        return _median([b - a for a, b in zip(self.stream_ms, self.synced_ms)])


def speedup_of(reference: Runs, kernel: Runs) -> float:
    """The median over the rounds of the reference's time over the kernel's."""
    return _median(ratios(reference.stream_ms, kernel.stream_ms))


def hidden_work(runs: Runs, overhead_ms: float) -> SyncCheck:
    """The rule for work that escapes the stream (refused when ``hidden_ms > limit_ms``)."""
    stream_median = _median(runs.stream_ms)
    return SyncCheck(synced=runs.synced, overhead_ms=overhead_ms, hidden_ms=runs.after_ms - overhead_ms,
                     limit_ms=max(HIDDEN_ABS_MS, HIDDEN_REL * stream_median))


def hidden_work_refusal(check: SyncCheck, stream: TimingStats) -> str | None:
    """The ``[no-streams]`` error for a candidate whose work escapes the stream, or None."""
    if check.hidden_ms <= check.limit_ms:
        return None
    return (f"[no-streams] work ran outside the stream the call was timed on: timed on its stream the call "
            f"took {stream.median_ms:.4g} ms, with a device-wide synchronisation {check.synced.median_ms:.4g} ms; "
            f"the synchronisation itself costs {check.overhead_ms:.4g} ms, which leaves {check.hidden_ms:.4g} ms "
            f"of work the timer did not see (allowed: {check.limit_ms:.4g} ms). Launch every kernel on the "
            "current stream (at::cuda::getCurrentCUDAStream()) and finish the work before returning")
