"""Beam search over trajectories: ranking, slot shares, lineage in real scripted runs, branching
and resume in the middle of a beam. The answers never compile (no code, or code the static
checks refuse), so the runs take seconds."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.config import RunConfig
from kevin_agent.errors import ConfigError
from kevin_agent.run.launch import resume_run, start_run
from kevin_agent.registry import build_registry
from kevin_agent.results import EvalResult, Stage, Status, TurnRecord
from kevin_agent.engine.search import BeamSearch, default_beam_width, rank_key
from kevin_agent.store import RunStore

from .test_loop import TASK, Events


def rec(t: int, status: Status, speedup: float | None = None, turn: int = 1) -> TurnRecord:
    ev = None
    if status is Status.CORRECT:
        ev = EvalResult(status=status, stage=Stage.DONE, correct=True, speedup=speedup)
    return TurnRecord(trajectory=t, turn=turn, status=status, feedback="", eval=ev)


def test_ranking_follows_the_training_reward_then_progress_then_the_earlier_trajectory():
    records = [rec(0, Status.PARSE_ERROR), rec(1, Status.COMPILE_ERROR), rec(2, Status.CORRECT, 1.5),
               rec(3, Status.INCORRECT), rec(4, Status.CORRECT, 2.5), rec(5, Status.COMPILE_ERROR),
               rec(6, Status.CHECK_FAILED), rec(7, Status.CORRECT, 1.5)]
    assert [r.trajectory for r in sorted(records, key=rank_key)] == [4, 2, 7, 3, 1, 5, 6, 0]


def test_slots_share_the_turn_evenly_best_first():
    records = [rec(0, Status.PARSE_ERROR), rec(1, Status.CORRECT, 1.2), rec(2, Status.COMPILE_ERROR),
               rec(3, Status.CORRECT, 3.0), rec(4, Status.PARSE_ERROR)]
    slots = BeamSearch(3).slots(2, records, 8)
    assert [s.trajectory for s in slots] == list(range(8))
    # Kept: 3 (3.0x), 1 (1.2x), 2 (compile error ranks above the parse errors): 3 + 3 + 2 slots.
    assert [s.parent_trajectory for s in slots] == [3, 3, 3, 1, 1, 1, 2, 2]
    assert [s.parent_trajectory for s in BeamSearch(3).slots(1, [], 4)] == [None] * 4
    assert default_beam_width(16) == 4 and default_beam_width(3) == 1


def project(tmp_path: Path, answers: list[str], **config) -> tuple[RunConfig, Path]:
    (tmp_path / "task.py").write_text(TASK)
    lines = [{"reasoning": f"thought {i} " * 20, "text": text} for i, text in enumerate(answers)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    cfg = RunConfig(backend="scripted", responses=tmp_path / "r.jsonl", device="cpu", run_dir=tmp_path / "runs",
                    commit=False, **config)
    return cfg, tmp_path / "task.py"


def refused(n: int) -> str:
    """An answer with code that the static checks refuse (no load_inline): a check failure."""
    return (f"```python\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
            f"        return x  # attempt {n}\n```\nAttempt {n}.")


def no_code(n: int) -> str:
    return f"answer {n} has no code"


def run(config, task, registry=None, engine_hook=None):
    engine = start_run(config, task, Events(), registry=registry)
    if engine_hook:
        engine_hook(engine)
    try:
        return engine.run()
    finally:
        engine.close()


def test_a_beam_run_continues_the_best_chains_and_records_their_parents(tmp_path):
    answers = [no_code(0), refused(1), no_code(2), refused(3)] + [no_code(i) for i in range(4, 8)]
    config, task = project(tmp_path, answers, turns=2, trajectories=4, search="beam", beam_width=2)
    outcome = run(config, task)
    assert outcome.reason == "completed"
    second = sorted((r for r in outcome.records if r.turn == 2), key=lambda r: r.trajectory)
    # Check failures (1 and 3) got further than parse errors: the beam keeps them, two slots each.
    assert [r.parent_trajectory for r in second] == [1, 1, 3, 3]
    # The scripted backend served the batch in slot order.
    assert [r.response for r in second] == [no_code(i) for i in range(4, 8)]
    # Each branched prompt is exactly what the parent's own next turn would have been.
    first = {r.trajectory: r for r in outcome.records if r.turn == 1}
    assert "# attempt 1" in second[0].prompt and "# attempt 3" not in second[0].prompt
    assert second[0].prompt == second[1].prompt and "# attempt 3" in second[2].prompt
    assert first[1].feedback in second[0].prompt
    assert all(r.parent_trajectory is None for r in first.values())


def test_beam_width_above_the_trajectories_is_refused(tmp_path):
    # a script long enough for the run asked for: the beam width is what is refused
    config, task = project(tmp_path, [no_code(0), no_code(1)], turns=1, trajectories=2, search="beam", beam_width=3)
    with pytest.raises(ConfigError, match="--beam-width 3"):
        run(config, task)


def slow_registry():
    registry = build_registry()
    registry.backends["scripted"] = lambda cfg, skip=0: ScriptedBackend(cfg.responses, skip=skip, chunk_delay_s=0.02)
    return registry


def test_resume_in_the_middle_of_a_beam_continues_the_same_chains(tmp_path):
    answers = [refused(0), no_code(1), no_code(2), refused(3)] + [no_code(i) for i in range(4, 12)]
    config, task = project(tmp_path, answers, turns=2, trajectories=4, search="beam", beam_width=2)

    def abort_in_turn_two(engine):
        def watch():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if engine.generating and any(r.turn == 1 for r in engine.records) and len(engine.records) == 4:
                    time.sleep(0.1)
                    engine.abort()
                    return
                time.sleep(0.01)

        threading.Thread(target=watch, daemon=True).start()

    interrupted = run(config, task, registry=slow_registry(), engine_hook=abort_in_turn_two)
    assert interrupted.reason == "interrupted" and {r.turn for r in interrupted.records} == {1}
    resumed = resume_run(interrupted.run_id, Events(), runs_root=config.run_dir)
    try:
        outcome = resumed.run()
    finally:
        resumed.close()
    second = sorted((r for r in outcome.records if r.turn == 2), key=lambda r: r.trajectory)
    assert [r.parent_trajectory for r in second] == [0, 0, 3, 3]
    store = RunStore.open(config.run_dir, outcome.run_id)
    assert len(store.records()) == 8


def test_a_branch_adds_a_trajectory_from_a_chosen_turn(tmp_path):
    answers = [no_code(i) for i in range(3)]
    config, task = project(tmp_path, answers, turns=2, trajectories=1)
    events = Events()
    engine = start_run(config, task, events)

    class BranchAfterTurnOne:
        def emit(self, event):
            events.emit(event)
            if event.kind == "turn_finished" and event.record.turn == 1:
                engine.branch(0, 1)

    engine.sink = BranchAfterTurnOne()
    try:
        outcome = engine.run()
    finally:
        engine.close()
    keys = sorted((r.trajectory, r.turn, r.parent_trajectory, r.parent_turn) for r in outcome.records)
    assert keys == [(0, 1, None, None), (0, 2, None, None), (1, 2, 0, 1)]
    branch = next(r for r in outcome.records if r.trajectory == 1)
    own = next(r for r in outcome.records if (r.trajectory, r.turn) == (0, 2))
    assert branch.prompt == own.prompt  # what trajectory 0's turn 2 was asked
    assert RunStore.open(config.run_dir, outcome.run_id).info.trajectories == 2
    with pytest.raises(ValueError, match="last turn"):
        engine.branch(0, 2)
