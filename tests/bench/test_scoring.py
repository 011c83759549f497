"""The paper's table against a small one computed by hand: fast_p counts failures in N, a mean
speedup counts an incorrect task as 0, avg@k averages over every trajectory, the geometric mean is
over the correct tasks alone."""

from __future__ import annotations

import math

import pytest

from kevin_agent.results.bench import TaskResult, TrajectoryResult
from kevin_agent.results.scoring import metrics


def row(task_id, trajectories, speedup=None, vs_compile=None, status="done"):
    ts = [TrajectoryResult(trajectory=j, correct=s is not None, speedup=s,
                           speedup_vs_compile=None if s is None else s / 2) for j, s in enumerate(trajectories)]
    return TaskResult(task_id=task_id, path=f"/x/{task_id}.py", status=status, trajectories=ts,
                      correct=speedup is not None, speedup=speedup, speedup_vs_compile=vs_compile)


# Four tasks at k = 2: A correct in both trajectories, B in one, C in none, D failed to load.
ROWS = [row("A", [2.0, 1.2], speedup=2.0, vs_compile=1.0),
        row("B", [None, 0.6], speedup=0.6, vs_compile=0.3),
        row("C", [None, None]),
        row("D", [], status="failed")]


def test_the_table_matches_the_hand_computed_one():
    m = metrics(ROWS, k=2)
    assert (m.tasks, m.k, m.correct_tasks) == (4, 2, 2)
    assert m.correct_best_at_k == pytest.approx(2 / 4)
    # per task: A 2/2, B 1/2, C 0/2, D 0/2 (its missing trajectories count as incorrect)
    assert m.correct_avg_at_k == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    e = m.eager
    assert e.speedup_best_at_k == pytest.approx((2.0 + 0.6 + 0 + 0) / 4)
    assert e.speedup_avg_at_k == pytest.approx(((2.0 + 1.2) / 2 + (0 + 0.6) / 2 + 0 + 0) / 4)
    # fast_p over all four tasks: only A beats 1x, 1.5x; A and B beat 0 and 0.5; none beats 2 (strictly).
    assert e.fast_p == {"0": 0.5, "0.5": 0.5, "0.8": 0.25, "1": 0.25, "1.5": 0.25, "2": 0.0}
    assert (e.fast_1, e.fast_1_5) == (0.25, 0.25)
    assert e.geomean_correct == pytest.approx(math.sqrt(2.0 * 0.6))
    c = m.compile
    assert c is not None and c.baseline == "torch.compile"
    assert c.speedup_best_at_k == pytest.approx((1.0 + 0.3) / 4)
    assert c.fast_p["0.8"] == 0.25 and c.fast_1 == 0.0  # 1.0 is not faster than 1x
    assert c.speedup_avg_at_k == pytest.approx(((1.0 + 0.6) / 2 + 0.3 / 2) / 4)


def test_without_torch_compile_numbers_there_are_no_scores_against_it():
    rows = [row("A", [2.0], speedup=2.0), row("B", [None])]
    m = metrics(rows, k=1)
    assert m.compile is None
    assert m.eager.fast_p["1.5"] == 0.5 and m.correct_avg_at_k == 0.5


def test_a_bench_with_no_correct_task_scores_zero():
    m = metrics([row("C", [None]), row("D", [], status="failed")], k=1)
    assert m.correct_best_at_k == 0 and m.eager.speedup_best_at_k == 0 and m.eager.geomean_correct is None
    assert set(m.eager.fast_p.values()) == {0.0} and m.compile is None  # nothing to say against it


def test_a_tasks_row_takes_confirmed_numbers_and_drops_what_the_second_look_dropped():
    from kevin_agent.results import RunInfo
    from kevin_agent.results.scoring import task_result

    from ..tui_support import confirmation_of_fixed_run, fixed_info, fixed_records

    info: RunInfo = fixed_info("r1", status="completed", created_at="2025-01-03T12:00:00+00:00")
    info.confirmation = confirmation_of_fixed_run()
    result = task_result(info, fixed_records(), task_id="affine", path="/project/affine.py", status="done")
    t0, t1 = result.trajectories
    # Turn 2's kernel (1.25x in its turn) failed the second look: trajectory 0 is first correct at turn 3.
    assert (t0.correct, t0.speedup, t0.first_correct_turn) == (True, 2.7, 3)
    assert (t1.correct, t1.speedup) == (False, None)
    assert result.correct and result.confirmed and result.speedup == 2.7 and result.ci95 == [2.6, 2.8]
    assert (result.winner_trajectory, result.winner_turn, result.first_correct_turn) == (0, 3, 3)
    assert result.turns_done == 6
    # Without the confirmation: each turn's own number, the earliest verified turn first.
    info.confirmation = None
    plain = task_result(info, fixed_records(), task_id="affine", path="/project/affine.py", status="done")
    assert plain.trajectories[0].speedup == 2.0 and plain.first_correct_turn == 2 and not plain.confirmed
