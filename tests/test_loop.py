"""The engine's steering on real scripted runs on the CPU device: cancelling a generation and
aborting a run. The answers carry no code, so no turn compiles and each run takes seconds."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.config import RunConfig
from kevin_agent.launch import resume_run, start_run
from kevin_agent.registry import build_registry
from kevin_agent.results import Status
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
    started = time.monotonic()
    try:
        outcome = engine.run()
    finally:
        engine.close()
    assert outcome.reason == "interrupted" and time.monotonic() - started < 30
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
