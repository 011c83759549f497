"""The headless progress lines: what a CI log shows while a run goes on."""

from __future__ import annotations

import io
import time

from kevin_agent import events as ev
from kevin_agent.cli import progress
from kevin_agent.cli.progress import ProgressPrinter
from kevin_agent.results import BestKernel, CheckResult, ConfirmedSpeedup, Stage, Status, TurnRecord, Violation

from ..run_records import correct


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def printer(clock=None) -> tuple[ProgressPrinter, io.StringIO]:
    out = io.StringIO()
    return ProgressPrinter(out, turns=8, clock=clock or Clock()), out


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_a_long_error_is_cut_at_a_word_and_the_best_stands_apart():
    p, out = printer()
    message = ("ModelNew.forward calls torch.nn.functional.relu, which is a PyTorch compute operator; write the "
               "element-wise loop in the kernel instead and keep the wrapper to allocation and launch only")
    rec = TurnRecord(trajectory=0, turn=3, status=Status.CHECK_FAILED, feedback="x",
                     check=CheckResult(passed=False, violations=[Violation(rule="no-torch-compute", message=message)]))
    best = BestKernel(trajectory=0, turn=2, speedup=2.35, kernel_path="k.py")
    p.emit(ev.TurnFinished(record=rec, best=best))
    (line,) = lines(out)
    text, _, after = line.partition("  · ")
    assert after == "best so far 2.35x unconfirmed"
    assert text.endswith("…") and len(text) < len("[t0 turn 3/8] check_failed  ") + progress.ERROR_WIDTH + 2
    kept = text.removesuffix("…").split("[no-torch-compute] ", 1)[1]
    assert message.startswith(kept) and message[len(kept)] == " "  # cut between two words


def test_a_long_stage_is_said_again_with_its_time_and_what_it_took():
    clock = Clock()
    p, out = printer(clock)
    p.emit(ev.TurnStarted(trajectory=1, turn=2))
    clock.now += 3
    p.emit(ev.GenerationFinished(trajectory=1, turn=2, seconds=3.0))
    p.emit(ev.EvalStage(trajectory=1, turn=2, stage=Stage.COMPILE))
    clock.now += 10
    p.tick()
    assert lines(out)[-1] == "[t1 turn 2/8] compile"  # not long yet
    clock.now += 6
    p.tick()
    assert lines(out)[-1] == "[t1 turn 2/8] compile, 0:16 so far"
    clock.now += 5
    p.tick()
    assert lines(out)[-1] == "[t1 turn 2/8] compile, 0:16 so far"  # said again at twice as long
    clock.now += 12
    p.tick()
    assert lines(out)[-1] == "[t1 turn 2/8] compile, 0:33 so far"
    clock.now += 20
    p.emit(ev.EvalStage(trajectory=1, turn=2, stage=Stage.LOAD))
    assert lines(out)[-1] == "[t1 turn 2/8] load (compile took 53.0 s)"
    p.emit(ev.TurnFinished(record=correct(1, 2, 1.5), best=None))
    clock.now += 100
    p.tick()
    assert "so far" not in lines(out)[-1]  # a finished turn is not said again


def test_ticking_says_a_long_stage_again_by_itself(monkeypatch):
    monkeypatch.setattr(progress, "LONG_STAGE_S", 0.3)
    monkeypatch.setattr(progress, "TICK_S", 0.05)
    p = ProgressPrinter(io.StringIO(), turns=1)
    with p.ticking():
        p.emit(ev.EvalStage(trajectory=0, turn=1, stage=Stage.COMPILE))
        time.sleep(1.0)
    assert any(line.startswith("[t0 turn 1/1] compile, 0:00 so far") for line in lines(p.stream))


def test_the_last_line_marks_the_confirmed_number_and_gives_the_turns_own():
    p, out = printer()
    best = BestKernel(trajectory=0, turn=8, speedup=2.63, kernel_path="k.py", run_speedup=2.28,
                      confirmation=ConfirmedSpeedup(speedup_median=2.63, ci95=[2.54, 2.73], runs=100))
    p.emit(ev.RunFinished(run_id="r", reason="completed", best=best, turns_done=8))
    p.emit(ev.RunFinished(run_id="r", reason="stopped", turns_done=3,
                          best=BestKernel(trajectory=0, turn=2, speedup=1.5, kernel_path="k.py")))
    assert lines(out) == [
        "kevin-opt: run completed after 8 turns: best 2.63x (95% interval 2.54-2.73x, 100 rounds) confirmed "
        "(trajectory 0, turn 8; its turn measured 2.28x)",
        "kevin-opt: run stopped after 3 turns: best 1.50x, its turn's own measurement, unconfirmed (trajectory 0, "
        "turn 2)",
    ]


def test_a_failed_run_leaves_its_cause_to_the_error_that_follows():
    p, out = printer()
    p.emit(ev.RunFinished(run_id="r", reason="failed", best=None, turns_done=0))
    assert lines(out) == ["kevin-opt: run failed after 0 turns"]


def test_one_of_a_thing_is_said_in_the_singular():
    p, out = printer()
    p.emit(ev.RunStarted(run_id="r", run_dir="/runs/r", task="affine", device="cpu", device_name="Test CPU",
                         backend="scripted", model="scripted", turns=1, trajectories=1, resumed_turns=1))
    p.emit(ev.TurnStarted(trajectory=0, turn=2, dropped_attempts=1))
    p.emit(ev.RunFinished(run_id="r", reason="completed", best=None, turns_done=1))
    text = "\n".join(lines(out))
    assert "1 x 1 turn" in text and "resuming after 1 finished turn" in text, text
    assert "1 earliest attempt dropped" in text and "run completed after 1 turn:" in text, text
    assert "1 turns" not in text and "1 finished turns" not in text and "attempts" not in text
