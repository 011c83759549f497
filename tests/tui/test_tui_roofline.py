"""The roofline in the TUI: each verified turn's share of it beside its speedup in the turn list
(the confirmed one where the run confirmed it), its words in the feedback pane, and Nsight Compute
on a finished turn (`i`), offered on a GPU run only: on a CPU run it says why not."""

from __future__ import annotations

import pytest

from ..tui_support import build_store, fixed_records, offered_keys, run_events, screen_lines, wait_for
from kevin_agent.evaluate.plausibility import reached, roofline
from kevin_agent.events import RunStarted
from kevin_agent.results import Confirmed
from kevin_agent.tui import KevinApp
from kevin_agent.tui.format import feedback_content, turn_label, widest_turn_label
from kevin_agent.tui.messages import message_for
from kevin_agent.tui.screens.run import RunScreen

RUN_ID = "20250101-120000-affine-0001"


def _with_roofline(rec, fraction: float):
    """A verified turn whose kernel reached ``fraction`` of a memory-bound roofline (eager a fifth of it)."""
    ms = rec.eval.runtime.median_ms
    roof = reached(roofline(1_000_000, 1_000_000 / (fraction * ms)), ms, rec.eval.reference.median_ms)
    return rec.model_copy(update={"eval": rec.eval.model_copy(update={"roofline": roof})})


def test_a_turns_line_has_its_share_of_the_roofline_after_its_speedup_and_fits_the_list():
    rec = _with_roofline(fixed_records()[4], 0.62)
    assert turn_label(rec).plain == "✓ turn 3  2.00x 62%"
    roof = rec.eval.roofline.model_copy(update={"fraction": 0.71})
    confirmed = Confirmed(trajectory=0, turn=3, verified=True, speedup_median=2.31, ci95=[2.3, 2.32], runs=100,
                          roofline=roof)
    # Confirmed: the confirmed speedup and the confirmed share.
    label = turn_label(rec, confirmed).plain
    assert label == "✓ turn 3  2.00x conf 2.31x 71%" and len(label) <= widest_turn_label(8)
    assert turn_label(fixed_records()[0]).plain == "? turn 1  parse error"  # no kernel, no roofline


def test_the_feedback_says_the_roofline_under_the_speedup_with_what_eager_reaches():
    rec = _with_roofline(fixed_records()[4], 0.62)
    lines = feedback_content(rec).plain.splitlines()
    assert lines[1].startswith("speedup: 2.00x vs eager")
    assert lines[2] == "roofline: 62% (memory-bound: 1 MB at 12.9 GB/s measured, 77.5 µs); eager 31%"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_turn_list_shows_the_share_on_screen(tmp_path, size):
    records = [_with_roofline(r, 0.62) if r.correct else r for r in fixed_records()]
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        app.switch_mode("run")
        await pilot.pause()
        for event in run_events(records):
            app.post_message(message_for(event))
        await pilot.pause()
        assert any("turn 3  2.00x 62%" in line for line in screen_lines(app))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
async def test_nsight_is_offered_on_a_gpu_run_only_and_on_a_cpu_run_says_why_not(tmp_path, device):
    root = build_store(tmp_path / "runs")
    events = run_events()
    events[0] = RunStarted(**{**events[0].model_dump(), "run_dir": str(root / RUN_ID), "device": device})
    app = KevinApp(runs_root=root, clock=lambda: 0.0)
    async with app.run_test(size=(160, 36), notifications=True) as pilot:
        app.switch_mode("run")
        await pilot.pause()
        for event in events:
            app.post_message(message_for(event))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.pinned == (0, 3)  # the run is over: its winner is shown
        await pilot.pause()
        assert ("i" in offered_keys(app)) is (device == "cuda"), offered_keys(app)
        if device == "cuda":
            return  # profiling itself needs ncu and an NVIDIA GPU: `kevin-opt show --ncu`'s tests
        await pilot.press("i")
        await pilot.pause()
        # A message longer than a toast goes to the feedback pane, where it stays to be read.
        toasts = [n.message for n in app._notifications if n.severity == "warning"]
        said = " ".join(" ".join(toasts + [app.run_screen.query_one("#feedback-messages").plain]).split())
        assert "Nsight Compute profiles CUDA kernels: this run is on the cpu device (Test CPU)" in said, said
        assert not any(w.group == "ncu" for w in screen.workers)  # nothing was started
