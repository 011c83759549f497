"""Result records: one pydantic object per check, evaluation and turn, never ``None``.

These are what the store appends to ``turns.jsonl``, what events carry to the TUI and
what reports read. Field names are part of the on-disk format: add, don't rename.

``evaluation`` holds what one candidate's evaluation found, ``turns`` one turn of a trajectory,
``confirmation`` the second look at the best kernels, ``run`` the run's own ``run.json`` and
``records`` the JSON files written for people and their tools (one schema, one serializer);
``versioned`` the ``schema`` every one of them carries. What the records say, read by every view:
``winner`` (the kernels a run confirms and the one it delivers) and ``lineage`` (which turn
continued which).
"""

from kevin_agent.results.confirmation import (
    BestKernel,
    Confirmation,
    Confirmed,
    ConfirmedSpeedup,
)
from kevin_agent.results.evaluation import (
    CheckResult,
    EvalResult,
    GraphTiming,
    LaunchedTiming,
    MemoryUse,
    Roofline,
    RuntimeFloor,
    SignatureTiming,
    Stage,
    StageTimes,
    Status,
    SyncCheck,
    TimingStats,
    Violation,
)
from kevin_agent.results.run import RunInfo, TaskRef
from kevin_agent.results.turns import (
    TurnRecord,
    best_record,
    continued_from,
    implausible_flag,
)

__all__ = [
    "BestKernel", "CheckResult", "Confirmation", "Confirmed", "ConfirmedSpeedup", "EvalResult",
    "GraphTiming", "LaunchedTiming", "MemoryUse", "Roofline", "RunInfo", "RuntimeFloor", "SignatureTiming",
    "Stage", "StageTimes", "Status", "SyncCheck", "TaskRef", "TimingStats", "TurnRecord", "Violation",
    "best_record", "continued_from", "implausible_flag",
]
