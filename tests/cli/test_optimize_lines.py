"""`kevin-opt optimize --plain`'s lines: each group's state said once per change."""

from __future__ import annotations

import io

from kevin_agent.cli.optimize_command import OptimizeLines
from kevin_agent.results.optimize import GroupRun, OptimizeRecord


def test_a_groups_state_is_said_once_each_time_it_changes():
    group = GroupRun(name="act", members=["act"], class_name="GELU", share=0.4, own_saving=0.3, turns=3)
    record = OptimizeRecord(optimize_id="opt-1", model_file="m.py", created_at="2025-01-01T00:00:00+00:00",
                            device="cpu", modules=1, min_saving=0.02, groups=[group])
    out = io.StringIO()
    lines = OptimizeLines(out)
    # As the optimize saves it: running before its run opens, again once the run has its id (the
    # run's own first line names it), each finished turn, then its end.
    group.state = "running"
    lines.group_changed(record, group)
    group.run_id = "20250101-000000-act-0001"
    lines.group_changed(record, group)
    lines.group_changed(record, group)
    group.turn = 1
    lines.group_changed(record, group)
    group.state, group.speedup = "verified", 2.0
    lines.group_changed(record, group)
    said = [line.removeprefix("kevin-opt: ") for line in out.getvalue().splitlines()]
    assert said == ["[1/1 act] running turn 1/3", "[1/1 act] running turn 2/3",
                    "[1/1 act] verified 2.00x (run 20250101-000000-act-0001)"]
