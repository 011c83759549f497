"""The report as JSON (``<stem>_kevin_report.json``): what tools read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...engine.confirmation import current, winner
from ...results import Confirmation, EvalResult, RunInfo, StageTimes, TimingStats, TurnRecord

REPORT_FORMAT = 3
"""Version of the JSON report layout; bumped when a field changes meaning (2: cuda times are GPU
time on the stream, no longer up to a device-wide synchronisation; 3: the best kernel's speedup
and timings are its confirmation's, its turn's own speedup is ``run_speedup``)."""


def _timing(stats: TimingStats | None) -> dict | None:
    return stats.model_dump() if stats is not None else None


def _turn_data(rec: TurnRecord) -> dict:
    ev = rec.eval
    return {
        "trajectory": rec.trajectory,
        "turn": rec.turn,
        "status": rec.status.value,
        "speedup": rec.speedup,
        "speedup_vs_compile": ev.speedup_vs_compile if ev is not None and rec.correct else None,
        "runtime_median_ms": ev.runtime.median_ms if ev is not None and ev.runtime is not None else None,
        "feedback": rec.feedback,
        "flags": list(ev.flags) if ev is not None else [],
        "implausible": ev.implausible if ev is not None else False,
        "kernel_path": rec.kernel_path,
    }


def _correctness(ev: EvalResult) -> dict:
    return {
        "trials": ev.trials,
        "trials_passed": ev.trials_passed,
        "max_abs_err": ev.max_abs_err,
        "max_rel_err": ev.max_rel_err,
        "atol": ev.atol,
        "rtol": ev.rtol,
        "tolerance": ev.tolerance,
        "reference_tf32": ev.reference_tf32,
    }


def stage_totals(records: Sequence[TurnRecord]) -> dict | None:
    """Seconds of evaluation per stage, summed over the turns that recorded them (None: none did)."""
    timed = [r.eval.stage_s for r in records if r.eval is not None and r.eval.stage_s is not None]
    if not timed:
        return None
    totals = {name: round(sum(getattr(t, name) for t in timed), 3) for name in StageTimes.model_fields}
    return {**totals, "evaluations": len(timed)}


def _confirmation_data(confirmation: Confirmation | None) -> dict | None:
    if confirmation is None:
        return None
    return {"seed": confirmation.seed, "created_at": confirmation.created_at,
            "kernels": [k.model_dump(mode="json") for k in confirmation.kernels]}


def build_report_data(info: RunInfo, records: Sequence[TurnRecord]) -> dict:
    """What goes into ``<stem>_kevin_report.json``."""
    best = winner(info, records)
    best_data = None
    if best is not None and best.record.eval is not None:
        ev, confirmed = best.record.eval, best.confirmed
        times = confirmed if confirmed is not None else ev
        best_data = {
            "trajectory": best.trajectory,
            "turn": best.turn,
            "speedup": best.speedup,
            "speedup_vs_compile": best.speedup_vs_compile,
            "run_speedup": ev.speedup,
            "confirmation": best.headline.model_dump() if best.headline is not None else None,
            "timings": {
                "kernel": _timing(times.runtime),
                "eager": _timing(times.reference),
                "torch_compile": _timing(times.compiled_reference),
            },
            "cuda_graph": ev.graph.model_dump() if ev.graph is not None else None,
            "memory": ev.memory.model_dump() if ev.memory is not None else None,
            "sync_check": ev.sync.model_dump() if ev.sync is not None else None,
            "floor": (confirmed or ev).floor.model_dump() if (confirmed or ev).floor is not None else None,
            "implausible": best.flag is not None,
            "correctness": _correctness(ev),
            "flags": list(dict.fromkeys(ev.flags + (confirmed.flags if confirmed else []))),
            "device_name": ev.device_name,
            "kernel_path": best.record.kernel_path,
        }
    counts: dict[str, int] = {}
    for rec in records:
        counts[rec.status.value] = counts.get(rec.status.value, 0) + 1
    return {
        "format": REPORT_FORMAT,
        "run_id": info.run_id,
        "status": info.status,
        "created_at": info.created_at,
        # File name only: the report is committed, the person's absolute paths are not.
        "task": {"file": Path(info.task.path).name, "name": info.task.name,
                 "class_name": info.task.class_name, "digest": info.task.digest},
        "device": info.device,
        "device_name": info.device_name,
        "versions": dict(info.versions),
        "backend": info.backend,
        "model": info.model,
        "turns": info.turns,
        "trajectories": info.trajectories,
        "status_counts": counts,
        "best": best_data,
        "confirmation": _confirmation_data(current(info, records)),
        "flags": [
            {"trajectory": r.trajectory, "turn": r.turn, "flag": flag}
            for r in records if r.eval is not None for flag in r.eval.flags
        ],
        "records": [_turn_data(r) for r in sorted(records, key=lambda r: (r.trajectory, r.turn))],
        "stage_totals_s": stage_totals(records),
        "commit": info.commit,
    }
