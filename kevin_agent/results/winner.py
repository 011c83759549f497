"""Which kernels a run confirms, and which one it delivers.

Every turn's speedup is one noisy measurement with its own re-timed reference, and the best of
many noisy numbers is biased upwards. So at the end of a run (and before ``--target-speedup``
ends one) the best few *distinct* verified kernels, by their turns' own speedups (the same
source in two turns counts once), are verified again on fresh seeds and timed head to head with
the reference in each of a few workers, their rounds pooled (``evaluate/worker/confirmation.py``,
``evaluate/rounds.py``). From then on the confirmation decides:
the winner is the confirmed kernel with the highest median, every headline number is its own,
and a kernel the second look dropped is never delivered.

A run recorded before confirmation existed, or one that has not ended yet, has no confirmation
of its current best kernels: the views fall back to the best turn's own numbers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from .confirmation import Confirmation, Confirmed, ConfirmedSpeedup
from .run import RunInfo
from .turns import TurnRecord, best_record, implausible_flag
from .evaluation import Roofline


def candidates(records: Sequence[TurnRecord], top: int) -> list[TurnRecord]:
    """The ``top`` best verified turns by their own speedups, one per distinct source (the
    earliest of equals), best first. Flagged ones are included: the confirmation flags them too."""
    ranked = sorted((r for r in records if r.correct and r.speedup is not None),
                    key=lambda r: -r.speedup)  # sorted() is stable: the earlier of equals first
    chosen: list[TurnRecord] = []
    seen: set[str] = set()
    for rec in ranked:
        if rec.code in seen:
            continue
        seen.add(rec.code)
        chosen.append(rec)
        if len(chosen) == top:
            break
    return chosen


CONFIRMATION_SETTINGS = {"correctness_trials", "tolerance", "atol", "rtol", "reference_tf32", "warmup_runs",
                          "timed_runs", "compare_compile", "op_audit", "cpu_threads", "confirm_rounds",
                          "confirm_workers", "bandwidth_gb_s", "seed"}
"""The settings a confirmation depends on: with others, the run's best kernels are confirmed again."""


def confirmation_key(picks: Sequence[TurnRecord], settings: dict, device_name: str) -> str:
    """What a confirmation is of: the kernels (where they come from and their sources), the
    evaluation settings and the device."""
    what = {"kernels": [[r.trajectory, r.turn, hashlib.sha256(r.code.encode()).hexdigest()] for r in picks],
            "settings": settings, "device": device_name}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:24]


def current(info: RunInfo, records: Sequence[TurnRecord]) -> Confirmation | None:
    """The run's confirmation when it is of the run's best kernels as they stand, else None (a
    better kernel came after it, or there is none)."""
    confirmation = info.confirmation
    if confirmation is None:
        return None
    named = [(k.trajectory, k.turn) for k in confirmation.kernels]
    picks = candidates(records, len(named))
    return confirmation if named == [(r.trajectory, r.turn) for r in picks] else None


@dataclass
class Winner:
    """The kernel a run delivers: its turn, and its confirmation (None where the run has none)."""

    record: TurnRecord
    confirmed: Confirmed | None = None

    @property
    def trajectory(self) -> int:
        return self.record.trajectory

    @property
    def turn(self) -> int:
        return self.record.turn

    @property
    def speedup(self) -> float:
        if self.confirmed is not None and self.confirmed.speedup_median is not None:
            return self.confirmed.speedup_median
        return self.record.speedup or 0.0

    @property
    def speedup_vs_compile(self) -> float | None:
        if self.confirmed is not None:
            return self.confirmed.speedup_vs_compile_median
        return self.record.eval.speedup_vs_compile if self.record.eval is not None else None

    @property
    def headline(self) -> ConfirmedSpeedup | None:
        return self.confirmed.headline() if self.confirmed is not None else None

    @property
    def roofline(self) -> Roofline | None:
        """The kernel's roofline, with the fractions of its confirmed medians where it was confirmed."""
        if self.confirmed is not None and self.confirmed.roofline is not None:
            return self.confirmed.roofline
        return self.record.eval.roofline if self.record.eval is not None else None

    @property
    def flag(self) -> str | None:
        """Why the kernel is flagged as implausible (the flag naming the floor), or None. Its turn
        and its confirmation are each enough: either measured it faster than physics allows."""
        for source in (self.confirmed, self.record.eval):
            if source is not None and source.implausible:
                return implausible_flag(source.flags)
        return None


def winner(info: RunInfo, records: Sequence[TurnRecord]) -> Winner | None:
    """The confirmation's winner where the run's best kernels are confirmed (None when every one
    of them was dropped); otherwise the best verified turn, unconfirmed."""
    confirmation = current(info, records)
    if confirmation is None:
        rec = best_record(records)
        return Winner(rec) if rec is not None else None
    best = confirmation.winner
    if best is None:
        return None
    rec = next(r for r in records if (r.trajectory, r.turn) == (best.trajectory, best.turn))
    return Winner(rec, best)



def confirmed_turns(info: RunInfo, records: Sequence[TurnRecord]) -> dict[tuple[int, int], Confirmed]:
    """The second look each turn got, by (trajectory, turn): the run's confirmation where it is of
    the run's best kernels as they stand (empty otherwise)."""
    confirmation = current(info, records)
    return {} if confirmation is None else {(k.trajectory, k.turn): k for k in confirmation.kernels}


def best_of_run(info: RunInfo, records: Sequence[TurnRecord]) -> tuple[float | None, bool]:
    """The run's best speedup and whether it is confirmed: the confirmed winner's median, or else
    the best turn's own number."""
    best = winner(info, records)
    if best is not None:
        return best.speedup, best.confirmed is not None
    if info.best is not None:  # a run stored before its turns could say (or of other kernels)
        return info.best.speedup, info.best.confirmation is not None
    return None, False
