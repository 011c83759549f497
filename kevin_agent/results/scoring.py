"""The paper's table from a bench's task results (``docs/bench.md`` states each definition).

For task i of N and trajectory j of k: c_ij = 1 when trajectory j found a verified kernel in any
turn, s_ij its best speedup (0 when it found none). Then

    correct best@k = mean_i max_j c_ij           correct avg@k = mean_i mean_j c_ij
    speedup best@k = mean_i S_i                  speedup avg@k = mean_i mean_j s_ij

with S_i the task's best kernel (its confirmed median) and 0 for an incorrect or failed task;
fast_p = #{i : correct_i and S_i > p} / N, failures counted in N (KernelBench's ``fastp``); the
geometric mean is over the correct tasks' S_i alone. Against ``torch.compile`` the same with its
speedups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .bench import FAST_P, Metrics, Scores, TaskResult, TrajectoryResult
from .run import RunInfo
from .turns import TurnRecord
from .winner import confirmed_turns, winner


def p_key(p: float) -> str:
    """How a threshold names its fast_p entry: ``0``, ``0.5``, ``1``, ``1.5``."""
    return f"{p:g}"


def trajectory_results(info: RunInfo, records: Sequence[TurnRecord]) -> list[TrajectoryResult]:
    """Each trajectory's outcome: a verified kernel or not, and its best speedup (a confirmed
    kernel's median where the confirmation looked at it; a kernel the confirmation dropped counts
    as not verified)."""
    second = confirmed_turns(info, records)
    out = []
    for j in range(info.trajectories):
        best: float | None = None
        best_compile: float | None = None
        first: int | None = None
        for rec in sorted((r for r in records if r.trajectory == j and r.correct), key=lambda r: r.turn):
            kernel = second.get((rec.trajectory, rec.turn))
            if kernel is not None and not kernel.verified:
                continue
            if kernel is not None and kernel.speedup_median is not None:
                speedup, vs_compile = kernel.speedup_median, kernel.speedup_vs_compile_median
            else:
                speedup = rec.speedup or 0.0
                vs_compile = rec.eval.speedup_vs_compile if rec.eval is not None else None
            first = rec.turn if first is None else first
            if best is None or speedup > best:
                best, best_compile = speedup, vs_compile
        out.append(TrajectoryResult(trajectory=j, correct=best is not None, speedup=best,
                                    speedup_vs_compile=best_compile, first_correct_turn=first))
    return out


def task_result(info: RunInfo, records: Sequence[TurnRecord], **fields) -> TaskResult:
    """A finished task's row from its run: the trajectories, the winner and its numbers."""
    trajectories = trajectory_results(info, records)
    best = winner(info, records)
    firsts = [t.first_correct_turn for t in trajectories if t.first_correct_turn is not None]
    device_s = wall = 0.0
    for rec in records:
        if rec.eval is not None and rec.eval.stage_s is not None:
            device_s += rec.eval.stage_s.device
            wall += rec.eval.stage_s.total
    headline = best.headline if best is not None else None
    return TaskResult(
        run_id=info.run_id, reason=info.status, trajectories=trajectories, correct=best is not None,
        speedup=best.speedup if best is not None else None, confirmed=headline is not None,
        ci95=headline.ci95 if headline is not None else None,
        speedup_vs_compile=best.speedup_vs_compile if best is not None else None,
        winner_trajectory=best.trajectory if best is not None else None,
        winner_turn=best.turn if best is not None else None,
        first_correct_turn=min(firsts) if firsts else None, turns_done=len(records),
        eval_device_s=round(device_s, 3), eval_wall_s=round(wall, 3), **fields)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _scores(rows: Sequence[TaskResult], k: int, baseline: str,
            task_speedup: Callable[[TaskResult], float | None],
            trajectory_speedup: Callable[[TrajectoryResult], float | None]) -> Scores | None:
    """The speedup scores against one baseline; None when a correct task lacks its number."""
    best: list[float] = []
    for row in rows:
        value = task_speedup(row) if row.correct else 0.0
        if value is None:
            return None
        best.append(value)
    averages = []
    for row in rows:
        per = [(trajectory_speedup(t) or 0.0) if t.correct else 0.0 for t in row.trajectories]
        averages.append(sum(per) / max(k, len(per)) if per else 0.0)
    n = len(rows)
    fast = {p_key(p): (sum(1 for row, s in zip(rows, best) if row.correct and s > p) / n if n else 0.0)
            for p in FAST_P}
    correct = [s for row, s in zip(rows, best) if row.correct and s > 0]
    geomean = math.exp(_mean([math.log(s) for s in correct])) if correct else None
    return Scores(baseline=baseline, speedup_best_at_k=_mean(best), speedup_avg_at_k=_mean(averages), fast_p=fast,
                  fast_1=fast[p_key(1.0)], fast_1_5=fast[p_key(1.5)], geomean_correct=geomean)


def metrics(rows: Sequence[TaskResult], k: int) -> Metrics:
    """The table over ``rows`` (every task with a result, failed ones included) at k trajectories.
    A task whose run made fewer trajectories (a failed one makes none) counts the missing ones as
    incorrect."""
    n = len(rows)
    per_task = [sum(1 for t in row.trajectories if t.correct) / max(k, len(row.trajectories), 1) for row in rows]
    eager = _scores(rows, k, "eager", lambda r: r.speedup, lambda t: t.speedup)
    measured = any(r.correct and r.speedup_vs_compile is not None for r in rows)
    compiled = _scores(rows, k, "torch.compile", lambda r: r.speedup_vs_compile,
                       lambda t: t.speedup_vs_compile) if measured else None
    assert eager is not None  # a correct task always has its speedup
    return Metrics(tasks=n, k=k, correct_tasks=sum(1 for row in rows if row.correct),
                   correct_best_at_k=_mean([1.0 if row.correct else 0.0 for row in rows]),
                   correct_avg_at_k=_mean(per_task), eager=eager, compile=compiled)
