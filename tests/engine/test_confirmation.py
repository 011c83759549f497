"""Confirmation: the best kernels verified again on fresh seeds and timed head to head with the
reference in each of a few workers, their rounds pooled (real worker processes on the cpu device;
Python candidates, no compile)."""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager

import pytest
import torch
from textual.widgets import Button, Static

from ..evalfixtures import eval_root, runtime_source, scale_task  # noqa: F401  (fixtures)
from ..clihelp import kevin
from ..run_records import KERNEL_SOURCE, correct, run_info, write_task
from ..evaluate.test_evaluate_pipeline import FIXED_SCALE as TWICE_PLUS_ONE
from ..evaluate.test_evaluate_pipeline import _settings as pipeline_settings
from ..tui.test_tui import GOOD, RESPONSES, make_project, wait_for
from kevin_agent.config import RunConfig
from kevin_agent.results.winner import candidates, confirmation_key, current, winner
from kevin_agent.delivery import plan_delivery
from kevin_agent.evaluate import EvalSettings, LocalEvaluator
from kevin_agent.evaluate.rounds import median_interval
from kevin_agent.evaluate.worker.confirmation import MIN_ROUNDS, may_stop
from kevin_agent.formatting import confirmed_line
from kevin_agent.delivery.kernel_module import render_kernel_module
from kevin_agent.run.launch import start_run
from kevin_agent.delivery.report import build_report_data, render_markdown
from kevin_agent.results import Confirmation, Confirmed, Status
from kevin_agent.tui import KevinApp
from kevin_agent.tui.screens.dialogs import ConfirmScreen

# Correct on every input the run draws (its seeds 0-9, 300, 500, 1000 and 1001), something else
# on any other: the inputs are recognised by the ratio of their first two values, which the
# rescaled trials keep.
MEMORISED = '''
import torch
import torch.nn as nn

RUN_SEEDS = list(range(10)) + [300, 500, 1000, 1001]


def _key(x):
    return round(float(x[0, 0]) / float(x[0, 1]), 4)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.known = {{_key(torch.randn(128, 512, generator=torch.Generator().manual_seed(s))) for s in RUN_SEEDS}}

    def forward(self, x):
        if _key(x) in self.known:
            return x * self.scale + 1.0
        {otherwise}
'''
WRONG = "return x * self.scale + 1.5"
CRASH = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
HANG = "while True: x = x"


def _settings(tmp_path, **kw) -> EvalSettings:
    return pipeline_settings(tmp_path, **{"confirm_rounds": 40, "stage_floor_s": 5.0, **kw})


@contextmanager
def _probed(task, settings: EvalSettings):
    ev = LocalEvaluator(task, settings)
    try:
        ev.probe()
        yield ev
    finally:
        ev.close()


@pytest.fixture
def evaluator(scale_task, tmp_path):
    with _probed(scale_task, _settings(tmp_path)) as ev:
        yield ev


def test_median_interval_is_the_order_statistics_interval():
    # n = 100: the 40th and 61st values (a textbook table).
    assert median_interval(list(range(1, 101))) == (40, 61)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few for 95%: the range
    assert median_interval([5.0] * 30) == (5.0, 5.0)


def test_the_rounds_stop_only_at_whole_turns_of_the_placements_and_after_several():
    # Sixteen placements: four turns (64 rounds) at least, then every turn.
    assert [r for r in range(1, 130) if may_stop(r, 16)] == [64, 80, 96, 112, 128]
    # One placement (a large task): from 20 rounds on, every 10.
    assert [r for r in range(1, 45) if may_stop(r, 1)] == [20, 30, 40]
    # Seven: whole turns at least 10 rounds apart (14), from four turns (28) on.
    assert [r for r in range(1, 60) if may_stop(r, 7)] == [28, 42, 56]


def test_a_kernel_that_knows_the_runs_inputs_is_dropped_and_the_others_are_confirmed(evaluator):
    memorised = MEMORISED.format(otherwise=WRONG)
    # On the run's own seeds it passes every check.
    (during_the_run,) = evaluator.evaluate([memorised])
    assert during_the_run.status is Status.CORRECT, during_the_run.error

    confirmation = evaluator.confirm([runtime_source("honest_python"), memorised, TWICE_PLUS_ONE])
    honest, dropped, other = confirmation.kernels
    assert not dropped.verified and dropped.speedup_median is None
    assert "trial 1 of 5 (seed" in dropped.error and "elements differ" in dropped.error, dropped.error
    seed = int(dropped.error.split("(seed ")[1].split(",")[0])
    assert seed >= 1_000_000 and seed == confirmation.seed  # fresh: far from the run's seeds
    for kernel in (honest, other):
        assert kernel.verified, kernel.error
        assert kernel.trials == kernel.trials_passed == 5  # on fresh inputs, and the re-check passed
        assert MIN_ROUNDS <= kernel.runs <= 40 and kernel.runtime.runs == kernel.reference.runs == kernel.runs
        low, high = kernel.ci95
        assert low <= kernel.speedup_median <= high
        assert kernel.floor is not None and not kernel.implausible
    # Both were timed in the same rounds against the same reference calls.
    assert honest.reference == other.reference
    assert confirmation.winner in (honest, other)
    assert confirmation.dropped == [dropped]


@pytest.mark.parametrize("otherwise", [CRASH, HANG], ids=["crash", "hang"])
def test_a_kernel_that_takes_the_worker_down_is_dropped_alone(evaluator, otherwise):
    confirmation = evaluator.confirm([MEMORISED.format(otherwise=otherwise), TWICE_PLUS_ONE])
    culprit, other = confirmation.kernels
    assert not culprit.verified
    if otherwise is CRASH:
        assert "the worker died with SIGSEGV during correctness" in culprit.error, culprit.error
    else:
        assert "timed out after" in culprit.error and "during correctness" in culprit.error, culprit.error
    assert other.verified and other.speedup_median > 0, other.error


def test_a_kernel_below_the_floor_is_confirmed_and_flagged(scale_task, tmp_path):
    with _probed(scale_task, _settings(tmp_path, bandwidth_gb_s=1e-6)) as ev:
        (kernel,) = ev.confirm([TWICE_PLUS_ONE]).kernels
    assert kernel.verified and kernel.implausible, kernel
    assert kernel.floor.floor_ms > kernel.runtime.median_ms
    assert any(f.startswith("implausible runtime") for f in kernel.flags)
    assert kernel.floor.bandwidth_source == "given" and any("GB/s given" in f for f in kernel.flags)


def test_several_workers_each_verify_on_fresh_inputs_and_their_rounds_are_pooled(scale_task, tmp_path):
    with _probed(scale_task, _settings(tmp_path, confirm_workers=2)) as ev:
        confirmation = ev.confirm([TWICE_PLUS_ONE, MEMORISED.format(otherwise=WRONG)])
    kernel, memorised = confirmation.kernels
    seeds = confirmation.seeds
    assert len(seeds) == len(set(seeds)) == 2 and confirmation.seed in seeds
    assert kernel.verified, kernel.error
    assert kernel.trials == kernel.trials_passed == 10  # five trials in each worker, each on its own inputs
    assert len(kernel.worker_medians) == 2
    # One median over both workers' rounds: between the two workers' own.
    assert 2 * MIN_ROUNDS <= kernel.runs <= 80 and kernel.runtime.runs == kernel.reference.runs == kernel.runs
    low, high = min(kernel.worker_medians), max(kernel.worker_medians)
    assert low - 1e-9 <= kernel.speedup_median <= high + 1e-9
    assert kernel.ci95[0] <= kernel.speedup_median <= kernel.ci95[1]
    # Fresh inputs in every worker: the kernel that knows the run's is dropped, with a worker's seed.
    assert not memorised.verified and "elements differ" in memorised.error
    assert int(memorised.error.split("(seed ")[1].split(",")[0]) in confirmation.seeds


def _timed(kernel_ms: list[float], reference_ms: list[float]):
    """A worker's verdict (what it verified) and its raw rounds, as a confirmation worker replies."""
    from kevin_agent.evaluate.jobs import KernelRounds, TimedRounds

    verdict = Confirmed(verified=True, trials=5, trials_passed=5, max_abs_err=1e-6)
    return verdict, KernelRounds(kernel=TimedRounds(stream_ms=kernel_ms), reference=TimedRounds(stream_ms=reference_ms))


def test_pooled_rounds_give_one_median_over_every_worker_and_the_floor_is_the_pooled_medians():
    from kevin_agent.evaluate.plausibility import implausibility, runtime_floor
    from kevin_agent.evaluate.rounds import pooled

    # Two workers whose kernel reads 10% apart (where their code lies): the pooled median lies
    # between theirs, over all forty rounds.
    fast = _timed([1.0] * 20, [4.0] * 20)
    slow = _timed([1.1] * 20, [4.0] * 20)
    verdict = pooled([fast[0], slow[0]], [fast[1], slow[1]])
    assert verdict.verified and verdict.runs == 40 and verdict.runtime.runs == 40
    assert verdict.worker_medians == [4.0, 4.0 / 1.1]
    assert 4.0 / 1.1 <= verdict.speedup_median <= 4.0
    assert verdict.trials == verdict.trials_passed == 10
    # The floor judges the pooled median: the pooled 1.05 ms against a floor of 1.05 ms is not
    # below it, though the fast worker's own 1.0 ms was.
    floor = runtime_floor(1_050_000, 1e6 / 1.25, device="cuda")
    assert floor.floor_ms == pytest.approx(1.05)
    compile_flag = "torch.compile of the reference failed, not compared: x"
    flagged = fast[0].model_copy(update={"floor": floor, "flags": [compile_flag]})
    verdict = pooled([flagged, slow[0].model_copy(update={"floor": floor, "flags": [compile_flag]})],
                     [fast[1], slow[1]])
    assert verdict.runtime.median_ms == pytest.approx(1.05)
    assert not verdict.implausible and verdict.flags == [compile_flag]
    # Below it, the pooled verdict is flagged once, with the pooled median's numbers.
    verdict = pooled([flagged, flagged], [fast[1], fast[1]])
    assert verdict.implausible and verdict.flags == [compile_flag, implausibility(1.0, floor)]
    # A kernel one worker dropped is dropped, with that worker's reason.
    dropped = Confirmed(error="trial 2 of 5 (seed 1000123): 7 elements differ", trials=2, trials_passed=1)
    verdict = pooled([fast[0], dropped], [fast[1], None])
    assert not verdict.verified and verdict.error == dropped.error and verdict.trials == 7


# --- which kernels, and which one wins ---------------------------------------------------------
def _verdict(rec, median: float | None, *, error: str = "", implausible: bool = False) -> Confirmed:
    if median is None:
        return Confirmed(trajectory=rec.trajectory, turn=rec.turn, kernel_path=rec.kernel_path,
                         run_speedup=rec.speedup, error=error, trials=5, trials_passed=1)
    return Confirmed(trajectory=rec.trajectory, turn=rec.turn, kernel_path=rec.kernel_path, run_speedup=rec.speedup,
                     verified=True, speedup_median=median, ci95=[median * 0.98, median * 1.01], runs=200,
                     trials=5, trials_passed=5, implausible=implausible,
                     flags=["implausible runtime 0.0001 ms below the floor"] if implausible else [])


def test_the_best_distinct_kernels_are_confirmed_and_the_confirmation_picks_the_winner(tmp_path):
    task = write_task(tmp_path / "proj")
    other = KERNEL_SOURCE.replace("kevin_delivery_relu", "kevin_delivery_relu_b")
    third = KERNEL_SOURCE.replace("kevin_delivery_relu", "kevin_delivery_relu_c")
    records = [correct(0, 1, 1.50, code=other), correct(0, 2, 2.40), correct(1, 2, 2.40),  # the same source twice
               correct(0, 3, 1.90, code=third), correct(1, 3, 1.10, code=third.replace("_c", "_d"))]
    picks = candidates(records, 3)
    # Best first by the turns' own speedups; the same source counts once, the earliest of equals.
    assert [(r.trajectory, r.turn) for r in picks] == [(0, 2), (0, 3), (0, 1)]
    assert confirmation_key(picks, {"seed": 0}, "cpu") != confirmation_key(picks, {"seed": 1}, "cpu")

    # The second look finds turn 3 faster than turn 2 and drops turn 1: the winner is turn 3, not
    # the best of the turns' own numbers.
    top, second, third_pick = picks
    confirmation = Confirmation(kernels=[_verdict(top, 2.05), _verdict(second, 2.21),
                                         _verdict(third_pick, None, error="trial 2 of 5 (seed 1000123): 7 elements differ")],
                                seed=1_000_123, key=confirmation_key(picks, {}, "cpu"))
    info = run_info(task, confirmation=confirmation)
    best = winner(info, records)
    assert (best.trajectory, best.turn) == (0, 3) and best.speedup == 2.21 and best.headline.ci95 == [2.21 * 0.98,
                                                                                                      2.21 * 1.01]
    assert confirmation.dropped == [confirmation.kernels[2]]
    assert "dropped t0 turn 1: trial 2 of 5 (seed 1000123)" in confirmed_line(confirmation.kernels[2])

    # Every published number is the winner's confirmed one.
    plan = plan_delivery(task, info, records, RunConfig(min_speedup=0))
    assert (plan.kernel.trajectory, plan.kernel.turn, plan.kernel.speedup) == (0, 3, 2.21) and plan.writable
    assert "2.21x faster" in plan.message and "95% interval 2.17-2.23x, 200 rounds head to head" in plan.message
    report = render_markdown(info, records)
    assert "## Best kernel: trajectory 0, turn 3" in report and "**2.21x** (95% interval 2.17x - 2.23x)" in report
    assert "| trajectory 0, turn 1 | 1.50x | - |" in report  # the dropped one, with why
    data = build_report_data(info, records).model_dump(mode="json")
    assert data["best"]["confirmation"]["ci95"] == [2.21 * 0.98, 2.21 * 1.01]
    module = render_kernel_module(task, best, info)
    assert "speedup vs eager PyTorch:  2.21x (95% interval 2.17-2.23x, 200 rounds)" in module
    assert "its turn alone measured 1.90x" in module

    # A better turn after the confirmation: it is no longer of the best kernels, and the views
    # fall back to the turns' own numbers until the run confirms again.
    later = [*records, correct(0, 4, 3.00, code=other.replace("_b", "_e"))]
    assert current(info, later) is None and winner(info, later).turn == 4 and winner(info, later).confirmed is None


def test_a_flagged_winner_is_delivered_only_when_accepted(tmp_path):
    task = write_task(tmp_path / "proj")
    records = [correct(0, 1, 1.50), correct(0, 2, 9.00, code=KERNEL_SOURCE.replace("relu\"", "relu_f\""))]
    picks = candidates(records, 3)
    confirmation = Confirmation(kernels=[_verdict(picks[0], 8.8, implausible=True), _verdict(picks[1], 1.4)],
                                seed=1_000_001)
    info = run_info(task, confirmation=confirmation)
    best = winner(info, records)
    assert best.turn == 2 and best.flag.startswith("implausible runtime")  # the fastest, flagged, still wins
    refused = plan_delivery(task, info, records, RunConfig(min_speedup=0))
    assert not refused.writable and "Pass --accept-flagged" in refused.why_not_written()
    assert refused.question() == ("deliver a kernel flagged as implausible?", "Deliver flagged")  # no repository
    accepted = plan_delivery(task, info, records, RunConfig(min_speedup=0), accept_flagged=True)
    assert accepted.writable and "Kevin-Flagged: implausible runtime" in accepted.message
    assert refused.consented().writable


# --- the run's end: the real CLI and the TUI on the affine task the TUI tests build ---------------
def _affine_args(*extra) -> list[str]:
    return ["run", "affine.py", "--device", "cpu", "--backend", "scripted", "--responses", "responses.jsonl",
            "--headless", "--turns", "2", "--timed-runs", "5", "--correctness-trials", "2", "--confirm-rounds", "20",
            "--min-speedup", "0", *extra]


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_target_speedup_ends_the_run_once_the_confirmed_winner_meets_it(tmp_path):
    repo = make_project(tmp_path / "proj", [RESPONSES[2], RESPONSES[2]])
    proc = kevin(*_affine_args("--target-speedup", "0.01", "--json", "s.json"), cwd=repo)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((repo / "s.json").read_text())
    assert summary["reason"] == "target_reached" and len(summary["turns"]) == 1, summary["reason"]
    # The turn reached the target; the run ended only after its kernel was confirmed.
    stderr = proc.stderr
    assert stderr.index("[t0 turn 1/2] correct") < stderr.index("confirming the best kernel (t0 turn 1") < stderr.index(
        "confirmed t0 turn 1:") < stderr.index("run target_reached")
    assert summary["best"]["confirmation"]["speedup_median"] >= 0.01 and summary["commit"]


_RUN_SEEDS = list(range(10)) + [300, 500, 1000, 1001]
"""The seeds a run draws its inputs from (``reference.input_plan`` at seed 0)."""


def _memorising_affine() -> str:
    """The TUI tests' affine kernel, answering only the inputs a run draws (recognised as MEMORISED
    does); on any other it returns uninitialised memory."""
    keys = {round(float(x[0]) / float(x[1]), 4)
            for x in (torch.randn(4096, generator=torch.Generator().manual_seed(s)) for s in _RUN_SEEDS)}
    return GOOD.replace('name="affine_tui"', 'name="affine_tui_memo"').replace(
        "    def forward(self, x):\n        return self.affine.affine_cpu(x)\n",
        f"    def forward(self, x):\n        if round(x[0].item() / x[1].item(), 4) in {sorted(keys)!r}:\n"
        "            return self.affine.affine_cpu(x)\n        return torch.empty_like(x)\n")


@pytest.mark.slow
def test_a_target_reached_by_a_kernel_the_second_look_drops_does_not_end_the_run(tmp_path):
    memorising = {"reasoning": "Answer what is asked.", "text": "```python\n" + _memorising_affine() + "```\nFast."}
    repo = make_project(tmp_path / "proj", [memorising, RESPONSES[2]])
    proc = kevin(*_affine_args("--target-speedup", "0.01", "--json", "s.json"), cwd=repo)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((repo / "s.json").read_text())
    # Turn 1 passed on the run's inputs and reached the target; on fresh ones it fails, so the run
    # went on, and turn 2's honest kernel ended it once confirmed.
    assert [t["status"] for t in summary["turns"]] == ["correct", "correct"], proc.stderr
    assert summary["reason"] == "target_reached"
    assert "--target-speedup 0.01x was reached by a turn, but on a second look no kernel survived it" in proc.stderr
    dropped = [k for k in summary["confirmation"] if not k["verified"]]
    assert [k["turn"] for k in dropped] == [1] and "elements differ" in dropped[0]["error"], dropped
    assert summary["best"]["turn"] == 2 and summary["best"]["confirmation"]["speedup_median"] >= 0.01
    assert "affine_tui_memo" not in (repo / "affine_kevin.py").read_text()


@pytest.mark.slow
def test_a_flagged_kernel_neither_meets_the_target_nor_is_committed_without_accept_flagged(tmp_path):
    # At 1e-6 GB/s every kernel is faster than its inputs can be read: flagged.
    repo = make_project(tmp_path / "proj", [RESPONSES[2], RESPONSES[2]])
    head = _git(repo, "rev-parse", "HEAD")
    proc = kevin(*_affine_args("--target-speedup", "0.01", "--bandwidth-gb-s", "1e-6", "--json", "s.json"), cwd=repo)
    assert proc.returncode == 1, proc.stderr
    summary = json.loads((repo / "s.json").read_text())
    # The target is ignored for flagged kernels: both turns ran. The same source twice is confirmed once.
    assert summary["reason"] == "completed" and len(summary["turns"]) == 2
    (kernel,) = summary["confirmation"]
    faster = max(summary["turns"], key=lambda t: t["speedup"])["turn"]
    assert (kernel["turn"], kernel["verified"], kernel["implausible"]) == (faster, True, True)
    assert summary["best"]["implausible"] and summary["best"]["flag"].startswith("implausible runtime")
    assert summary["delivery"]["outcome"] == "refused" and summary["commit"] is None
    assert "not written: the best kernel is flagged: implausible runtime" in proc.stderr
    assert "Pass --accept-flagged to deliver it anyway" in proc.stderr
    assert _git(repo, "rev-parse", "HEAD") == head and not (repo / "affine_kevin.py").exists()

    # Accepted on resume: the stored confirmation is reused (no second timing), and the commit says
    # the kernel is flagged.
    resumed = kevin("resume", summary["run_id"], "--headless", "--accept-flagged", "--json", "r.json", cwd=repo)
    assert resumed.returncode == 0, resumed.stderr
    assert "confirming the best" not in resumed.stderr
    again = json.loads((repo / "r.json").read_text())
    assert again["best"]["confirmation"] == summary["best"]["confirmation"] and again["commit"]
    message = _git(repo, "log", "-1", "--format=%B")
    assert "Kevin-Flagged: implausible runtime" in message and "95% interval" in message
    assert "delivered although flagged" in resumed.stderr


@pytest.mark.slow
async def test_the_tui_asks_before_it_commits_a_flagged_kernel(tmp_path):
    repo = make_project(tmp_path / "proj", [RESPONSES[2]])
    config = RunConfig(backend="scripted", responses=repo / "responses.jsonl", device="cpu", turns=1, timed_runs=5,
                       warmup_runs=1, correctness_trials=2, min_speedup=0, confirm_rounds=20, bandwidth_gb_s=1e-6)
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink), runs_root=repo / ".kevin" / "runs")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.outcome is not None, 600, "the run to end")
        # The question, laid out: read before its first layout the body is wrapped at a few columns.
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#yes")
                       and app.screen.query_one("#dialog-body Static", Static).size.width > 40, 300, "the question")
        title = app.screen.query_one("#dialog").border_title
        body = str(app.screen.query_one("#dialog-body Static", Static).render())
        yes = str(app.screen.query_one("#yes", Button).label)
        assert (title, yes) == ("deliver a kernel flagged as implausible?", "Deliver flagged and commit (y)")
        assert "needs --accept-flagged" in body and "implausible runtime" in body and "confirmed" in body
        await pilot.press("y")
        await wait_for(pilot, lambda: app.delivery is not None, 120, "the delivery")
    assert app.delivery.committed and app.exit_code == 0
    assert "Kevin-Flagged: implausible runtime" in _git(repo, "log", "-1", "--format=%B")
