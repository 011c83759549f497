"""Lineage views: the tree of trajectories in `show` and the report, and the winner's path."""

from __future__ import annotations

from kevin_agent.results.lineage import path_to, tree_lines
from kevin_agent.delivery.report import render_markdown
from kevin_agent.results import Status

from ..run_records import correct, failed, run_info, sample_records, write_task


def beam_records():
    """Turn 1: two failures; turn 2: both slots continue trajectory 0; turn 3: slot 1 continues
    slot 0's chain and wins."""
    records = [failed(0, 1, Status.COMPILE_ERROR, "e"), failed(1, 1, Status.INCORRECT, "e"),
               correct(0, 2, 1.2), correct(1, 2, 1.5), correct(0, 3, 1.3), correct(1, 3, 2.4)]
    records[2].parent_trajectory = 0
    records[3].parent_trajectory = 0
    records[4].parent_trajectory = 1
    records[5].parent_trajectory = 1
    return records


def test_tree_of_a_beam_marks_the_winners_path():
    lines = tree_lines(beam_records(), (1, 3))
    assert lines == [
        "t0  1:compile error* -> 2:1.20x",
        "  t1 (from t0 turn 1)  2:1.50x* -> 3:2.40x*",
        "    t0 (from t1 turn 2)  3:1.30x",
        "t1  1:incorrect",
    ]
    assert [(r.trajectory, r.turn) for r in path_to(beam_records(), (1, 3))] == [(0, 1), (1, 2), (1, 3)]


def test_independent_chains_are_one_line_each():
    assert tree_lines(sample_records(), (0, 3)) == [
        "t0  1:compile error* -> 2:1.40x* -> 3:1.83x*",
        "t1  1:incorrect -> 2:1.10x -> 3:check failed",
    ]


def test_the_report_walks_the_winners_path_turn_by_turn(tmp_path):
    info = run_info(write_task(tmp_path))
    text = render_markdown(info, beam_records())
    path = text.split("### The winner's path")[1].split("## Turns")[0]
    rows = [line for line in path.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[1:4] for row in rows] == [[" 1 ", " 0 ", " compile error "], [" 2 ", " 1 ", " 1.50x "],
                                                     [" 3 ", " 1 ", " 2.40x "]]
    assert "t1 (from t0 turn 1)  2:1.50x* -> 3:2.40x*" in path
