"""The report as JSON (``<stem>_kevin_report.json``): what tools read, as ``results.records``
lays out every file kevin-opt writes for them."""

from __future__ import annotations

from collections.abc import Sequence

from ...results.winner import current, winner
from ...results import RunInfo, StageTimes, TurnRecord
from ...results.records import (
    BestView,
    ConfirmationView,
    E2EResult,
    FlagView,
    ReportRecord,
    task_view,
    turn_views,
)


def stage_totals(records: Sequence[TurnRecord]) -> dict | None:
    """Seconds of evaluation per stage, summed over the turns that recorded them (None: none did)."""
    timed = [r.eval.stage_s for r in records if r.eval is not None and r.eval.stage_s is not None]
    if not timed:
        return None
    totals = {name: round(sum(getattr(t, name) for t in timed), 3) for name in StageTimes.model_fields}
    return {**totals, "evaluations": len(timed)}


def build_report_data(info: RunInfo, records: Sequence[TurnRecord], *, e2e: E2EResult | None = None) -> ReportRecord:
    """What goes into ``<stem>_kevin_report.json``."""
    best = winner(info, records)
    confirmation = current(info, records)
    counts: dict[str, int] = {}
    for rec in records:
        counts[rec.status.value] = counts.get(rec.status.value, 0) + 1
    return ReportRecord(
        run_id=info.run_id, status=info.status, created_at=info.created_at,
        task=task_view(info.task.path, info.task.name, info.task.class_name, info.task.digest),
        device=info.device, device_name=info.device_name, device_facts=info.device_facts,
        versions=dict(info.versions), backend=info.backend,
        model=info.model, turns_per_trajectory=info.turns, trajectories=info.trajectories, status_counts=counts,
        best=BestView.of(best, best.record.kernel_path) if best is not None and best.record.eval is not None else None,
        confirmation=None if confirmation is None else ConfirmationView(
            seed=confirmation.seed, seeds=confirmation.seeds, created_at=confirmation.created_at,
            kernels=list(confirmation.kernels)),
        flags=[FlagView(trajectory=r.trajectory, turn=r.turn, flag=flag)
               for r in records if r.eval is not None for flag in r.eval.flags],
        turns=turn_views(records), stage_totals_s=stage_totals(records), commit=info.commit, e2e=e2e,
    )
