"""The engine on real scripted runs on the CPU device: cancelling a generation, aborting a run,
lineage, and the pipelined turn. Most answers carry no code, so those turns never compile."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.config import RunConfig
from kevin_agent.run.launch import resume_run, start_run
from kevin_agent.registry import build_registry
from kevin_agent.results import Stage, Status, TurnRecord
from kevin_agent.store import RunStore

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 1


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''


class Events:
    def __init__(self) -> None:
        self.seen: list = []

    def emit(self, event) -> None:
        self.seen.append(event)


def project(tmp_path: Path, answers: int) -> tuple[RunConfig, Path]:
    (tmp_path / "task.py").write_text(TASK)
    lines = [{"reasoning": f"thinking {i} " * 40, "text": f"answer {i} has no code"} for i in range(answers)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    config = RunConfig(backend="scripted", responses=tmp_path / "r.jsonl", device="cpu", turns=2,
                       run_dir=tmp_path / "runs", commit=False)
    return config, tmp_path / "task.py"


def slow_registry():
    """The scripted backend as registered, streaming slowly enough to be interrupted."""
    registry = build_registry()
    registry.backends["scripted"] = lambda cfg, skip=0: ScriptedBackend(cfg.responses, skip=skip, chunk_delay_s=0.02)
    return registry


def when_generating(engine, action) -> threading.Thread:
    def wait_then_act() -> None:
        deadline = time.monotonic() + 60
        while not engine.generating and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def test_a_cancelled_generation_is_recorded_as_cancelled_never_fed_back_and_generated_again(tmp_path):
    config, task = project(tmp_path, answers=3)
    engine = start_run(config, task, Events(), registry=slow_registry())
    assert not engine.cancel_generation(), "nothing generates yet: there is nothing to cancel"
    when_generating(engine, engine.cancel_generation)
    try:
        outcome = engine.run()
    finally:
        engine.close()
    assert outcome.reason == "completed"
    every = RunStore.open(config.run_dir, outcome.run_id).all_records()
    assert [(r.turn, r.status) for r in every] == [
        (1, Status.CANCELLED), (1, Status.PARSE_ERROR), (2, Status.PARSE_ERROR)]
    cancelled, first, second = every
    # The regenerated turn was asked exactly what the cancelled one was; the next turn's prompt
    # carries the finished turn 1 and nothing of the cancelled one.
    assert first.prompt == cancelled.prompt
    assert "answer 1 has no code" in first.response and "answer 0" not in second.prompt
    assert second.prompt.count("Your previous answer failed to be parsed") == 1
    assert [(r.turn, r.status) for r in outcome.records] == [(1, Status.PARSE_ERROR), (2, Status.PARSE_ERROR)]


def test_abort_ends_the_run_now_records_nothing_in_flight_and_resume_redoes_it(tmp_path):
    config, task = project(tmp_path, answers=4)
    events = Events()
    engine = start_run(config, task, events, registry=slow_registry())
    when_generating(engine, engine.abort)
    try:
        outcome = engine.run()
    finally:
        engine.close()
        engine.store.release()  # whoever drives a run gives it up when done; resume takes it then
    assert outcome.reason == "interrupted"
    store = RunStore.open(config.run_dir, outcome.run_id)
    assert store.all_records() == [] and store.info.status == "interrupted"
    assert events.seen[-1].kind == "run_finished" and events.seen[-1].reason == "interrupted"

    resumed = resume_run(outcome.run_id, Events(), runs_root=config.run_dir)
    try:
        again = resumed.run()
    finally:
        resumed.close()
    assert again.reason == "completed"
    assert [(r.turn, r.status) for r in again.records] == [(1, Status.PARSE_ERROR), (2, Status.PARSE_ERROR)]


def test_lineage_follows_parents_back_through_branches():
    from kevin_agent.protocols import Slot
    from kevin_agent.engine.search import IndependentSearch, lineage

    def rec(t, n, parent=None, parent_turn=None):
        return TurnRecord(trajectory=t, turn=n, parent_trajectory=parent, parent_turn=parent_turn,
                          status=Status.PARSE_ERROR, feedback=f"t{t} turn {n}")

    records = [rec(0, 1), rec(1, 1), rec(0, 2), rec(1, 2, parent=0), rec(1, 3), rec(2, 3, parent=0, parent_turn=1)]
    keys = lambda chain: [(r.trajectory, r.turn) for r in chain]  # noqa: E731
    assert keys(lineage(records, Slot(trajectory=0), 3)) == [(0, 1), (0, 2)]
    # Trajectory 1's turn 2 continued trajectory 0, so its turn 4 carries 0/1, 1/2, 1/3.
    assert keys(lineage(records, Slot(trajectory=1), 4)) == [(0, 1), (1, 2), (1, 3)]
    # A branch of trajectory 0's turn 1 carries exactly what 0's turn 2 was asked with.
    assert keys(lineage(records, Slot(trajectory=2, parent_trajectory=0, parent_turn=1), 3)) == [(0, 1)]
    assert keys(lineage(records, Slot(trajectory=2), 4)) == [(0, 1), (2, 3)]
    assert lineage(records, Slot(trajectory=5), 1) == []
    # A trajectory that exists at the turn before goes on, in independent search.
    assert [s.trajectory for s in IndependentSearch().slots(3, records, 2)] == [0, 1]
    assert [s.trajectory for s in IndependentSearch().slots(4, records, 2)] == [0, 1, 2]


@pytest.mark.slow
def test_a_candidate_builds_while_the_others_generate_and_is_timed_after(tmp_path):
    """The turn is a pipeline: trajectory 0's answer is built while trajectory 1 still streams,
    and its timing waits until generation has ended."""
    from ..clihelp import REPO

    kernel = json.loads((REPO / "examples" / "rmsnorm.cpu.jsonl").read_text().splitlines()[3])
    slow = {"reasoning": "thinking slowly " * 120, "text": "no code in this answer"}
    (tmp_path / "r.jsonl").write_text(json.dumps(kernel) + "\n" + json.dumps(slow) + "\n")
    config = RunConfig(backend="scripted", responses=tmp_path / "r.jsonl", device="cpu", turns=1, trajectories=2,
                       run_dir=tmp_path / "runs", commit=False, timed_runs=3, warmup_runs=1, correctness_trials=2)
    events = Events()
    engine = start_run(config, REPO / "examples" / "rmsnorm.py", events, registry=slow_registry())
    # As when the model generates on the GPU the kernels are timed on (a script generates nowhere).
    engine.overlap_generation = False
    try:
        outcome = engine.run()
    finally:
        engine.close()
    order = [(e.kind, e.trajectory, getattr(e, "stage", None)) for e in events.seen
             if e.kind in ("generation_finished", "eval_stage")]
    t1_done = order.index(("generation_finished", 1, None))
    assert order.index(("eval_stage", 0, Stage.COMPILE)) < t1_done, order
    assert order.index(("eval_stage", 0, Stage.TIMING)) > t1_done, order
    assert {(r.trajectory, r.status) for r in outcome.records} == {(0, Status.CORRECT), (1, Status.PARSE_ERROR)}
