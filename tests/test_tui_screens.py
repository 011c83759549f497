"""The screens at 80x24 and at 160x48: layout, marks, live evaluation, history navigation.

Everything here runs on stored runs and on events posted to a real app under ``run_test()``;
nothing compiles.
"""

from __future__ import annotations

import re

import pytest
from textual.widgets import DataTable, OptionList
from textual.widgets._toast import Toast

from kevin_agent.events import (
    EvalOutput,
    EvalStage,
    GenerationFinished,
    RunStarted,
    TokenDelta,
    TurnFinished,
    TurnStarted,
)
from kevin_agent.results import Stage, StageTimes, Status, TurnRecord
from kevin_agent.store import RunStore
from kevin_agent.tui import KevinApp
from kevin_agent.tui.format import MARKS
from kevin_agent.tui.messages import message_for
from kevin_agent.tui.screens.dialogs import HelpScreen
from kevin_agent.tui.screens.history import HistoryScreen
from kevin_agent.tui.screens.run import RunScreen
from kevin_agent.tui.widgets import CodePane, CodeView, FeedbackView, ModelOutput, TurnList

from .tui_support import (
    beam_run,
    build_store,
    correct_eval,
    fixed_info,
    fixed_records,
    offered_keys,
    run_events,
    screen_lines,
    text_of,
    wait_for,
)

SIZES = [(80, 24), (160, 48)]
sizes = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
RUN_ID = "20250101-120000-affine-0001"
LONG_LINE = "import torch  # " + "a comment that runs far past the edge of any pane " * 4


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def started(**changes) -> RunStarted:
    fields = dict(run_id=RUN_ID, run_dir="/nonexistent", task="affine", device="cpu", device_name="Test CPU",
                  backend="scripted", model="scripted (hand-written responses)", turns=3, trajectories=2)
    return RunStarted(**{**fields, **changes})


async def run_screen(app, pilot, events) -> RunScreen:
    app.switch_mode("run")
    await pilot.pause()
    for event in events:
        app.post_message(message_for(event))
    await pilot.pause()
    assert isinstance(app.screen, RunScreen)
    return app.screen


def overlaps(a, b) -> bool:
    return a.overlaps(b)


# --- the run screen's layout --------------------------------------------------------------------
@sizes
async def test_header_stays_two_lines_with_a_long_task_and_device(tmp_path, size):
    task = "fused_attention_with_rotary_embeddings_and_a_very_long_descriptive_name_for_this_layer"
    device_name = "NVIDIA H200 141GB HBM3e with a long marketing name"
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        screen = await run_screen(app, pilot, [started(task=task, device="cuda", device_name=device_name,
                                                       model="cognition-ai/Kevin-32B")])
        header = screen.query_one("#run-header")
        assert header.region.height == 2
        assert screen.query_one(TurnList).region.y == 2  # the panes start right under it
        lines = screen_lines(app)[:2]
        assert lines[0].startswith(" fused_attention") and " cuda " in lines[0]
        assert "…" in lines[0] and len(lines[0].rstrip()) <= size[0]
        assert lines[1].lstrip().startswith("running") and "turns 0/6" in lines[1]
        if size[0] >= 160:
            assert task in lines[0]  # room enough: only the least important parts are cut


@sizes
async def test_turn_list_takes_only_the_width_its_labels_need(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        screen = await run_screen(app, pilot, run_events())
        turns, output = screen.query_one(TurnList), screen.query_one(ModelOutput)
        widest = max(o.prompt.cell_length for o in turns.options)
        # The labels fit, with the border, the option padding and a scrollbar's room, and nothing more.
        assert turns.outer_size.width == widest + 2 + 2 + 1
        assert output.region.x == screen.query_one("#side").region.right
        assert output.region.right == size[0]
        lines = screen_lines(app)
        assert any("✗ turn 2  compile error" in line for line in lines)


@sizes
async def test_notifications_stay_off_the_feedback_and_break_paths_between_names(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    path = "/srv/projects/a-rather-long-project-name/src/models/attention/fused_attention_kevin.py"
    async with app.run_test(size=size, notifications=True) as pilot:
        screen = await run_screen(app, pilot, run_events())
        app.notify(f"wrote {path}\ncommitted 0123456789 on main", title="delivery", markup=False)
        await wait_for(pilot, lambda: bool(screen.query(Toast)), 10, "the toast")
        await pilot.pause()
        toast = screen.query_one(Toast)
        assert not overlaps(toast.region, screen.query_one(FeedbackView).region)
        assert not overlaps(toast.region, screen.query_one(TurnList).region)
        assert not overlaps(toast.region, screen.query_one("#run-header").region)
        rows = [line[toast.region.x:toast.region.right] for line in screen_lines(app)[toast.region.y:toast.region.bottom]]
        text = "".join(row.strip(" ▌") for row in rows)
        assert path in text  # every name whole: breaks only after a "/"
        shown = [row.strip(" ▌") for row in rows if "/" in row]
        assert len(shown) >= (2 if size[0] < 120 else 1)
        assert all(row.endswith("/") or row.endswith(".py") for row in shown), shown


# --- code --------------------------------------------------------------------------------------
def long_line_records() -> list[TurnRecord]:
    first, second = fixed_records()[2], fixed_records()[4]  # trajectory 0, turns 2 and 3
    return [first, second.model_copy(update={"code": second.code.replace("import torch", LONG_LINE, 1)})]


@sizes
async def test_a_long_kernel_line_scrolls_sideways_instead_of_wrapping(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    records = long_line_records()
    async with app.run_test(size=size) as pilot:
        screen = await run_screen(app, pilot, run_events(records))
        output = screen.query_one(ModelOutput)
        code = output.query_one(CodeView)
        assert code.max_scroll_x > 0
        lines = screen_lines(app)
        row = next(i for i, line in enumerate(lines) if "import torch  # a comment" in line)
        # The line is cut at the pane's edge; the next row is the next line of code, not the rest.
        assert "a comment that runs far past" not in lines[row + 1] and "runs far past the edge" not in lines[row + 1]
        output.focus()
        await pilot.press("right", "right", "right")
        assert code.scroll_x > 0 and output.scroll_x == 0


async def test_diff_lines_keep_their_marks_and_scroll_sideways(tmp_path):
    root = tmp_path / "runs"
    info = fixed_info(RUN_ID, status="completed", created_at="2025-01-01T12:00:00+00:00")
    store = RunStore.create(root, info)
    for rec in long_line_records():
        store.append(rec)
    app = KevinApp(runs_root=root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")  # open the run
        turns = app.screen.query_one("#history-turns", OptionList)
        turns.highlighted = next(i for i, o in enumerate(turns.options) if o.id == "t0-3")
        await pilot.press("d")
        await pilot.pause()
        pane = app.screen.query_one("#tab-diff-pane", CodePane)
        assert pane.max_scroll_x > 0
        lines = screen_lines(app)
        x = pane.region.x + 1  # inside its padding
        body = [line[x:pane.region.right - 1] for line in lines[pane.region.y:pane.region.bottom - 1]]
        body = [line for line in body if line.strip()]
        assert any(line.startswith("+import torch  # a comment") for line in body)
        assert all(line[:1] in "+- @" for line in body), body


# --- reasoning, marks, legend -------------------------------------------------------------------
async def test_a_parse_error_shows_its_reasoning_once(tmp_path):
    reasoning = "Consider fusing the two element-wise ops into one pass"
    record = TurnRecord(trajectory=0, turn=1, status=Status.PARSE_ERROR, reasoning=reasoning,
                        response=f"<think>{reasoning}</think>\nI would write a kernel, but not today.",
                        parse_error="no ```python code block in the answer", feedback="...")
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await run_screen(app, pilot, [started(trajectories=1), TurnStarted(trajectory=0, turn=1),
                                               TurnFinished(record=record, best=None)])
        await pilot.press("r")  # open the reasoning
        await pilot.pause()
        text = text_of(app, "#reasoning") + text_of(app, "#answer")
        assert text.count("Consider fusing") == 1
        assert "I would write a kernel, but not today." in text_of(app, "#answer")
        assert "<think>" not in text
        assert screen.query_one(ModelOutput).query_one(CodeView).display is False
    # The history's response tab: the response as written, the reasoning in it once.
    root = tmp_path / "runs"
    RunStore.create(root, fixed_info(RUN_ID, status="stopped", created_at="2025-01-01T12:00:00+00:00")).append(record)
    app = KevinApp(runs_root=root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter", "o")
        assert text_of(app, "#tab-response-text").count("Consider fusing") == 1


@sizes
async def test_help_shows_every_mark_with_its_meaning(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        await run_screen(app, pilot, run_events())
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        legend = text_of(app, "#help-legend")
        for mark in MARKS.values():
            assert re.search(rf"{re.escape(mark.glyph)} {mark.label}\s+{re.escape(mark.meaning)}", legend), mark
        assert "⊝ cancelled" in legend and "never shown to the model" in legend and "… in progress" in legend
        assert len({m.glyph for m in MARKS.values()}) == len(MARKS)  # one mark per outcome


def cancelled_then_done() -> list:
    cancelled = TurnRecord(trajectory=0, turn=1, status=Status.CANCELLED, reasoning="half a thought",
                           feedback="the generation was cancelled; it is not shown to the model and the turn "
                                    "is generated again")
    done = fixed_records()[2].model_copy(update={"turn": 1})
    return [started(trajectories=1), TurnStarted(trajectory=0, turn=1),
            GenerationFinished(trajectory=0, turn=1, seconds=3.0, cancelled=True),
            TurnFinished(record=cancelled, best=None), TurnStarted(trajectory=0, turn=1),
            TurnFinished(record=done, best=None)]


@sizes
async def test_a_cancelled_turn_has_its_own_mark_in_the_list_and_the_feedback(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        screen = await run_screen(app, pilot, cancelled_then_done())
        options = [str(o.prompt) for o in screen.query_one(TurnList).options]
        assert options == ["⊝ turn 1  cancelled", "✓ turn 1  1.25x"]
        turns = screen.query_one(TurnList)
        turns.focus()
        turns.highlighted = 0
        await pilot.pause()
        feedback = text_of(app, "#feedback-text")
        assert feedback.startswith("⊝ cancelled  trajectory 0 · turn 1")
        assert "never shown to the model" in feedback and "feedback to the model" not in feedback
        # The state kept both: the cancelled attempt did not hide the turn that followed.
        assert screen.state.records[(0, 1)].status is Status.CORRECT


async def test_the_history_lists_cancelled_generations_where_they_happened(tmp_path):
    root = tmp_path / "runs"
    store = RunStore.create(root, fixed_info(RUN_ID, status="stopped", created_at="2025-01-01T12:00:00+00:00"))
    for event in cancelled_then_done():
        if isinstance(event, TurnFinished):
            store.append(event.record)
    app = KevinApp(runs_root=root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        turns = app.screen.query_one("#history-turns", OptionList)
        assert [str(o.prompt) for o in turns.options] == ["⊝ turn 1  cancelled", "✓ turn 1  1.25x"]
        assert str(app.screen.query_one(DataTable).get_row_at(0)[2]) == "1/6"  # cancelled ones do not count


# --- a turn in flight ---------------------------------------------------------------------------
@sizes
async def test_a_compile_shows_a_running_timer_and_the_compilers_output_as_it_comes(tmp_path, size):
    clock = Clock()
    app = KevinApp(runs_root=tmp_path, clock=clock)
    async with app.run_test(size=size) as pilot:
        screen = await run_screen(app, pilot, [started(trajectories=1), TurnStarted(trajectory=0, turn=1)])
        app.sink.emit(TokenDelta(trajectory=0, turn=1, channel="text", text="```python\nclass ModelNew: ...\n```"))
        clock.now += 75
        for event in (GenerationFinished(trajectory=0, turn=1, seconds=75.0),
                      EvalStage(trajectory=0, turn=1, stage=Stage.COMPILE)):
            app.post_message(message_for(event))
        await pilot.pause()
        for i in range(1, 61):
            app.sink.emit(EvalOutput(trajectory=0, turn=1, text=f"[{i}/60] c++ -c part{i}.cpp -o part{i}.o\n"))
        clock.now += 42
        await pilot.pause(1.3)  # the once-a-second redraw of the timer
        feedback = screen.query_one(FeedbackView)
        assert feedback.border_title == "feedback · compile 0:42"
        text = text_of(app, "#feedback-text")
        assert "compile 0:42…" in text and "generation 1:15" in text
        assert "compiler output:" in text and "[1/60] c++" in text and "[60/60] c++ -c part60.cpp" in text
        assert text.index("[59/60]") < text.index("[60/60]")
        # The end of the output is in view as it comes.
        assert any("[60/60] c++" in line for line in screen_lines(app))
        assert "… turn 1  compile" in [str(o.prompt) for o in screen.query_one(TurnList).options]
        # The build ends: its time is kept, the next stage's timer starts.
        clock.now += 3
        app.post_message(message_for(EvalStage(trajectory=0, turn=1, stage=Stage.LOAD)))
        await pilot.pause(0.3)
        text = text_of(app, "#feedback-text")
        assert "compile 45.0 s" in text and "load 0:00…" in text
        record = fixed_records()[2].model_copy(update={"turn": 1})
        app.post_message(message_for(TurnFinished(record=record, best=None)))
        await pilot.pause()
        assert feedback.border_title == "feedback" and text_of(app, "#feedback-text").startswith("✓ correct")


async def test_stage_times_show_in_the_feedback_when_the_evaluation_has_them(tmp_path):
    timed = correct_eval(0.125).model_copy(update={"stage_s": StageTimes(queue=0.25, compile=31.5, load=1.2,
                                                                          correctness=0.8, timing=2.1)})
    record = fixed_records()[4].model_copy(update={"eval": timed, "generate_s": 12.0})
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await run_screen(app, pilot, [started(), TurnStarted(trajectory=0, turn=3),
                                      TurnFinished(record=record, best=None)])
        assert ("time: generation 12.0 s · queue 0.2 s · compile 31.5 s · load 1.2 s · correctness 0.8 s · "
                "timing 2.1 s") in text_of(app, "#feedback-text")
        # Without them (older records): the build time alone.
        plain = fixed_records()[4]
        app.post_message(message_for(TurnFinished(record=plain.model_copy(update={"turn": 4}), best=None)))
        await pilot.pause()
        assert "time: compile 31.5 s" in text_of(app, "#feedback-text")


async def test_cancel_is_offered_only_while_the_model_generates(tmp_path):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_screen(app, pilot, run_events()[:3])
        assert "x" not in offered_keys(app) and "s" in offered_keys(app)
        await pilot.press("x")  # not offered: nothing happens
        assert not app._notifications


# --- the history screen --------------------------------------------------------------------------
@sizes
async def test_history_shows_each_run_id_first_and_in_full(tmp_path, size):
    app = KevinApp(runs_root=build_store(tmp_path / "runs"))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert [str(c.label) for c in table.ordered_columns][:2] == ["run", "status"]
        lines = screen_lines(app)
        for run_id in ("20250102-090000-affine-0002", "20250101-120000-affine-0001"):
            assert any(line.startswith(f"│ {run_id}  ") for line in lines), lines
        assert lines[0].startswith(" history  2 runs  20250102-090000-affine-0002  interrupted")


async def test_escape_goes_back_a_level_and_never_out(tmp_path):
    app = KevinApp(runs_root=build_store(tmp_path / "runs"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        history = app.screen
        assert isinstance(history, HistoryScreen)
        # At the top of `kevin-opt history` there is nowhere to go back to: escape is not offered
        # and does nothing (q quits).
        assert "escape" not in offered_keys(app)
        await pilot.press("escape")
        assert app.screen is history and app.is_running
        # Open a run: its turns take the screen; escape comes back to the list.
        await pilot.press("down", "enter")
        assert history.detail and not history.query_one(DataTable).display
        assert isinstance(app.focused, TurnList) and "escape" in offered_keys(app)
        await pilot.press("escape")
        assert not history.detail and app.focused is history.query_one(DataTable)
        assert history.run_id == RUN_ID
        # Tab into the preview, escape comes back up to the list.
        await pilot.press("tab")
        assert isinstance(app.focused, TurnList)
        await pilot.press("escape")
        assert app.focused is history.query_one(DataTable)
        await pilot.press("escape")
        assert app.screen is history and app.is_running
        await pilot.press("q")
    assert app.return_code == 0


async def test_escape_from_the_history_of_a_run_returns_to_the_run(tmp_path):
    app = KevinApp(runs_root=build_store(tmp_path / "runs"), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await run_screen(app, pilot, run_events())
        await pilot.press("h")
        history = app.screen
        assert isinstance(history, HistoryScreen) and "escape" in offered_keys(app)
        await pilot.press("enter", "escape", "escape")  # the run's turns, the list, the run screen
        assert app.screen is screen


async def test_resume_is_offered_only_for_a_run_nobody_runs_that_is_unfinished(tmp_path):
    root = build_store(tmp_path / "runs")
    live = RunStore.create(root, fixed_info("20250103-080000-affine-0003", status="running",
                                            created_at="2025-01-03T08:00:00+00:00"))
    live.append(fixed_records()[0])
    app = KevinApp(runs_root=root)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        history = app.screen
        table = history.query_one(DataTable)
        assert [str(table.get_row_at(i)[1]) for i in range(3)] == ["live", "interrupted", "completed"]
        # The live run: no resume offered; asking anyway says who runs it.
        assert history.run_id == "20250103-080000-affine-0003" and "r" not in offered_keys(app)
        await pilot.press("r")
        assert not app.running
        refusal = " ".join(list(app._notifications)[-1].message.split())
        assert "20250103-080000-affine-0003 is live" in refusal and "cannot be resumed while it runs" in refusal
        # The interrupted run resumes; the completed one does not.
        await pilot.press("down")
        assert "r" in offered_keys(app)
        await pilot.press("down")
        assert "r" not in offered_keys(app)
        await pilot.press("r")
        assert not app.running and "only unfinished runs resume" in " ".join(list(app._notifications)[-1].message.split())


async def test_the_history_draws_the_lineage_of_a_beam_run(tmp_path):
    """`l` shows which turn continued which: the winner's path starred, the selected turn bracketed."""
    root = tmp_path / "runs"
    beam_run(root, RUN_ID, {(1, 2): 0})
    app = KevinApp(runs_root=root)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("enter")
        turns = app.screen.query_one("#history-turns", OptionList)
        turns.highlighted = next(i for i, o in enumerate(turns.options) if o.id == "t1-2")
        await pilot.press("l")
        await pilot.pause()
        text = text_of(app, "#tab-lineage-text")
        assert "t1 (from t0 turn 1)  2:[compile error]" in text
        assert "3:2.00x*" in text.splitlines()[2]
