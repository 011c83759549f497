"""Ending a run early: --stop-at-roofline beside --target-speedup. The rules on records built the
way the engine stores them; the whole thing with the real CLI on the CPU device (the TUI tests'
affine task, its C++ kernel really built, verified, timed and confirmed)."""

from __future__ import annotations

import json

import pytest

from ..clihelp import kevin
from ..run_records import correct
from ..tui.test_tui import GOOD, make_project
from kevin_agent.config import RunConfig
from kevin_agent.engine import stopping
from kevin_agent.results.winner import Winner
from kevin_agent.evaluate.plausibility import reached, roofline
from kevin_agent.results import Confirmed


def _at(fraction: float, speedup: float = 2.0, *, flagged: bool = False, turn: int = 1):
    """A verified turn whose kernel reached ``fraction`` of its roofline, and its confirmation."""
    rec = correct(0, turn, speedup)
    runtime = rec.eval.runtime.median_ms
    roof = reached(roofline(1_000_000, 1_000_000 / (fraction * runtime)), runtime)
    flags = ["implausible runtime 0.1 ms: below the physical floor"] if flagged else []
    rec = rec.model_copy(update={"eval": rec.eval.model_copy(update={"roofline": roof, "implausible": flagged,
                                                                     "flags": flags})})
    confirmed = Confirmed(trajectory=0, turn=turn, verified=True, speedup_median=speedup, ci95=[speedup, speedup],
                          runs=100, roofline=roof, implausible=flagged, flags=flags)
    return rec, confirmed


def test_a_turn_at_the_share_of_its_roofline_asked_for_reaches_the_stop():
    config = RunConfig(stop_at_roofline=0.8)
    near, far = _at(0.85, turn=1)[0], _at(0.5, turn=2)[0]
    assert stopping.asked(config) and not stopping.asked(RunConfig())
    assert stopping.reaching(config, [near, far]) == {(0, 1)}
    # A flagged kernel never stops a run, however close to the roofline it reads.
    assert stopping.reaching(config, [_at(0.99, flagged=True)[0]]) == set()


def test_the_confirmed_winner_at_its_roofline_ends_the_run_and_says_why():
    rec, confirmed = _at(0.93)
    reason, words = stopping.ending(RunConfig(stop_at_roofline=0.9), Winner(rec, confirmed))
    assert reason == "roofline_reached"
    assert words.startswith("t0 turn 1 confirmed at 93% of its roofline (memory-bound), at or above "
                            "--stop-at-roofline 0.9")
    # Unconfirmed, below the mark, or flagged: the run goes on.
    assert stopping.ending(RunConfig(stop_at_roofline=0.9), Winner(rec)) is None
    assert stopping.ending(RunConfig(stop_at_roofline=0.95), Winner(rec, confirmed)) is None
    flagged = _at(0.93, flagged=True)
    assert stopping.ending(RunConfig(stop_at_roofline=0.9), Winner(*flagged)) is None
    # Both asked for and both met: the speedup target is the reason given.
    assert stopping.ending(RunConfig(stop_at_roofline=0.9, target_speedup=1.5), Winner(rec, confirmed))[0] == \
        "target_reached"
    below = stopping.not_ended(RunConfig(stop_at_roofline=0.95), Winner(rec, confirmed))
    assert below == ("--stop-at-roofline 0.95 was reached by a turn, but on a second look the winner confirmed "
                     "at 2.00x, 93% of its roofline; the run goes on")


def test_the_flag_takes_a_share_above_zero():
    proc = kevin("run", "affine.py", "--stop-at-roofline", "0")
    assert proc.returncode == 2 and "--stop-at-roofline: must be more than 0, got 0.0" in proc.stderr


@pytest.mark.slow
def test_stop_at_roofline_ends_a_scripted_run_on_a_kernel_at_its_bound(tmp_path):
    repo = make_project(tmp_path / "proj", [{"reasoning": "Fuse it.", "text": "```python\n" + GOOD + "```\nFused."}] * 3)
    (repo / "kernel.py").write_text(GOOD)
    # What this machine's affine kernel reaches, measured first; the run then asks for a tenth of
    # it, which its first turn reaches however loaded the machine is.
    check = kevin("check", "affine.py", "kernel.py", "--device", "cpu", "--timed-runs", "5", "--json", "c.json",
                  cwd=repo)
    assert check.returncode == 0, check.stderr + check.stdout
    measured = json.loads((repo / "c.json").read_text())["roofline"]
    assert measured["bound"] == "memory" and measured["flops"] == 0.0 and measured["fraction"] > 0
    assert "of its roofline (memory-bound" in check.stdout
    mark = measured["fraction"] / 10

    proc = kevin("run", "affine.py", "--device", "cpu", "--backend", "scripted", "--responses", "responses.jsonl",
                 "--headless", "--turns", "3", "--timed-runs", "5", "--correctness-trials", "2", "--confirm-rounds",
                 "20", "--min-speedup", "0", "--no-commit", "--stop-at-roofline", f"{mark:.6f}", "--json", "s.json",
                 cwd=repo)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((repo / "s.json").read_text())
    assert summary["reason"] == "roofline_reached" and len(summary["turns"]) == 1, proc.stderr
    stderr = proc.stderr
    assert stderr.index("[t0 turn 1/3] correct") < stderr.index("confirmed t0 turn 1:") < stderr.index(
        "of its roofline (memory-bound), at or above --stop-at-roofline") < stderr.index("run roofline_reached")
    assert "little is left to win on this device; the run ends" in stderr
    # The fraction is in every record: the turn's own, the confirmed winner's with PyTorch's beside it.
    turn = summary["turns"][0]
    assert turn["roofline_fraction"] > 0 and turn["roofline_bound"] == "memory"
    best = summary["best"]["roofline"]
    assert best["fraction"] >= mark and best["reference_fraction"] > 0
    assert summary["confirmation"][0]["roofline"]["fraction"] == best["fraction"]
    report = (repo / "affine_kevin_report.md").read_text()
    assert "Roofline: the kernel reaches **" in report and "of roofline** (best)" in report
