"""The screens at 80x24 and at 160x48: layout, marks, live evaluation, history navigation.

Everything here runs on stored runs and on events posted to a real app under ``run_test()``;
nothing compiles.
"""

from __future__ import annotations

import re

import pytest
from textual.widgets import Collapsible, DataTable, OptionList
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
from kevin_agent.tui.format import MARKS, kernel_content
from kevin_agent.tui.messages import message_for
from kevin_agent.tui.screens.dialogs import ConfirmScreen, HelpScreen, commit_summary, key_rows
from kevin_agent.tui.screens.history import TABS, HistoryScreen
from kevin_agent.tui.screens.run import RunScreen
from kevin_agent.tui.widgets import CodePane, CodeView, FeedbackView, ModelOutput, TurnList

from ..tui_support import (
    beam_run,
    better_module_plan,
    build_store,
    confirmed_run_events,
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
        assert lines[0].startswith(" fused_attention") and " cuda " in lines[0] and "turns 0/6" in lines[0]
        assert "best none yet" in lines[0] and len(lines[0].rstrip()) <= size[0]
        assert lines[1].strip() == "running"  # the status has the line to itself
        if size[0] >= 160:
            assert task in lines[0]  # room enough: only the least important parts are cut
        else:
            assert "…" in lines[0] and device_name not in lines[0]


@sizes
async def test_the_header_says_the_confirmed_best_and_its_turns_own_in_full(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        events = confirmed_run_events()
        screen = await run_screen(app, pilot, events[:-3])
        screen.apply(events[-3])  # the confirmation starts: the longest status there is
        await pilot.pause()
        lines = screen_lines(app)[:2]
        assert lines[1].strip() == "confirming the best 2 kernels: verified again, timed head to head"
        for event in events[-2:]:
            app.post_message(message_for(event))
        await pilot.pause()
        lines = screen_lines(app)[:2]
        assert "best 2.70x confirmed  (t0 turn 3: 2.00x)" in lines[0] and "…" not in lines[0]
        assert lines[1].strip() == "finished"


@sizes
async def test_the_turn_list_keeps_one_width_for_the_whole_run(tmp_path, size):
    """The list is as wide as any label of the run can be from before its first event, so the panes
    beside it never move; labels fit in it, the confirmed ones too."""
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        events = confirmed_run_events()
        screen = await run_screen(app, pilot, [])  # starting: the run has not said its size yet
        turns, output = screen.query_one(TurnList), screen.query_one(ModelOutput)
        widths = [turns.outer_size.width]
        for event in events:
            app.post_message(message_for(event))
            await pilot.pause()
            widths.append(turns.outer_size.width)
        assert len(set(widths)) == 1, widths
        widest = max(o.prompt.cell_length for o in turns.options)
        assert widest + 2 + 2 + 1 <= turns.outer_size.width <= size[0] * 0.4
        assert output.region.x == screen.query_one("#side").region.right
        assert output.region.right == size[0]
        lines = screen_lines(app)
        assert any("✗ turn 2  compile error" in line for line in lines)
        assert any("✓ turn 3  2.00x conf 2.70x" in line for line in lines)  # the confirmed after the own
        assert any("✓ turn 2  1.25x dropped" in line for line in lines)


@sizes
async def test_notifications_stay_off_what_is_read_and_break_paths_between_names(tmp_path, size):
    """A toast sits over the speedup chart, as wide as the side column: never over the model output
    (its top shows what is being written), the feedback, the turns or the header, and nothing of the
    panes under it peeks out beside it."""
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    path = "/srv/proj/models/attention/fused_attention_kevin.py"
    async with app.run_test(size=size, notifications=True) as pilot:
        screen = await run_screen(app, pilot, run_events())
        app.notify(f"wrote {path}", title="delivery", markup=False)
        await wait_for(pilot, lambda: bool(screen.query(Toast)), 10, "the toast")
        await pilot.pause()
        toast = screen.query_one(Toast)
        for pane in (ModelOutput, FeedbackView, TurnList):
            assert not overlaps(toast.region, screen.query_one(pane).region), pane
        assert not overlaps(toast.region, screen.query_one("#run-header").region)
        side = screen.query_one("#side").region
        assert (toast.region.x, toast.region.right) == (side.x, side.right)
        assert overlaps(toast.region, screen.query_one("#chart").region)
        rows = [line[toast.region.x:toast.region.right] for line in screen_lines(app)[toast.region.y:toast.region.bottom]]
        text = "".join(row.strip(" ▌") for row in rows)
        assert path in text  # every name whole: breaks only after a "/"
        shown = [row.strip(" ▌") for row in rows if "/" in row]
        assert shown  # broken only after a "/" where the column is narrower than the path
        assert all(row.endswith("/") or row.endswith(".py") for row in shown), shown


@sizes
async def test_a_long_message_goes_to_the_feedback_pane_and_stays_there(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    notes = ["wrote examples/rmsnorm_kevin.py, examples/rmsnorm_kevin_report.md, examples/rmsnorm_kevin_report.json, "
             "examples/rmsnorm_kevin_report.png", "not committed: --no-commit; the files are untracked",
             "replaced rmsnorm_kevin.py, which claimed 2.10x on Test CPU (run 20250101-000000-rmsnorm-0000, turn 5)",
             "delivered although flagged: faster than the bytes it moves allow at 12 GB/s"]
    async with app.run_test(size=size, notifications=True) as pilot:
        screen = await run_screen(app, pilot, run_events())
        app.notify("\n".join(notes), title="delivery", markup=False)
        await wait_for(pilot, lambda: bool(screen.query(Toast)), 10, "the toast")
        await pilot.pause()
        toast = screen.query_one(Toast)
        assert all(n.timeout <= 6 for n in app._notifications)  # gone in seconds
        (pointer,) = [n.message for n in app._notifications]
        assert len(pointer.splitlines()) == 1 and "more in the feedback pane" in pointer
        assert toast.region.height <= 4  # its title and one line: a pointer, not the text
        feedback = screen.query_one(FeedbackView)
        assert not overlaps(toast.region, feedback.region)
        box = screen.query_one("#feedback-messages-box", Collapsible)
        assert box.display and box.region.y <= feedback.region.y + 1 and box.title == "1 message: delivery"
        assert all(note in screen.query_one("#feedback-messages").plain for note in notes)
        # What went well waits folded, in one line; a warning opens it, and shows it whole.
        assert box.collapsed and "speedup:" in "".join(screen_lines(app))
        app.notify("\n".join(notes[:1] + ["not committed: the commit was refused by a hook"] * 3),
                   title="delivery", severity="warning", markup=False)
        await pilot.pause()
        assert not box.collapsed and box.title == "2 messages: delivery"
        drawn = "\n".join(line[feedback.region.x:feedback.region.right] for line in screen_lines(app))
        assert "the commit was" in drawn
        # Reading turns folds it again; it stays, after the toast is gone.
        screen.query_one(TurnList).focus()
        await pilot.press("up")
        app.clear_notifications()
        await pilot.pause()
        assert box.collapsed and box.display
        assert "not committed: --no-commit" in screen.query_one("#feedback-messages").plain


async def test_notifications_wait_while_a_dialog_is_open_and_stay_off_tables(tmp_path):
    app = KevinApp(runs_root=build_store(tmp_path / "runs"), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        app.notify("shown before the question", markup=False)
        await pilot.pause()
        app.push_screen(ConfirmScreen("replace the existing files?", "a question"))
        await pilot.pause()
        app.notify("the run stopped", markup=False)
        await pilot.pause(0.5)
        box = app.screen.query_one("#dialog").region
        drawn = "\n".join(line[box.x:box.right] for line in screen_lines(app)[box.y:box.bottom])
        assert "a question" in drawn
        assert "shown before" not in drawn and "the run stopped" not in drawn  # nothing over the question
        assert not [t for t in app.screen.query(Toast) if t.display]
        await pilot.press("n")
        await wait_for(pilot, lambda: bool(app.screen.query(Toast)), 10, "the toast, once the question is gone")
        await pilot.pause()
        history = app.screen
        assert isinstance(history, HistoryScreen)
        toast = history.query_one(Toast)
        assert not overlaps(toast.region, history.query_one("#runs").region)
        assert not overlaps(toast.region, history.query_one("#turn-tabs Tabs").region)


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
        await pilot.press("e")  # open the reasoning
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
async def test_help_shows_every_mark_scrolls_to_the_last_and_wraps_under_its_text(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        await run_screen(app, pilot, run_events())
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        legend = app.screen.query_one("#help-legend").plain
        for mark in MARKS.values():
            assert re.search(rf"{re.escape(mark.glyph)} {mark.label}\s+{re.escape(mark.meaning)}", legend), mark
        assert "⊝ cancelled" in legend and "never shown to the model" in legend and "… in progress" in legend
        assert "conf 2.63x" in legend and "dropped" in legend
        assert len({m.glyph for m in MARKS.values()}) == len(MARKS)  # one mark per outcome
        # It scrolls to its last mark, and a wrapped line goes on under its text, not its key.
        for _ in range(6):
            await pilot.press("pagedown")
        await pilot.pause()
        lines = screen_lines(app)
        assert any("dropped" in line and "verified in its turn" in line for line in lines), lines
        assert any("escape closes" in line for line in lines)
        keys = app.screen.query_one("#help-keys")
        await pilot.press("home")
        await pilot.pause()
        lines = screen_lines(app)
        row = next(i for i, line in enumerate(lines) if "Continue the selected finished turn" in line)
        column = lines[row].index("Continue the selected finished turn")
        if size[0] < 120:  # wrapped: the rest starts under the text, not under the key
            assert lines[row + 1][keys.region.x:column].strip() == "" and lines[row + 1][column:].strip()
        assert keys.region.height >= len(key_rows(app.run_screen, app))


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
        assert str(app.screen.query_one(DataTable).get_row_at(0)[3]) == "1/6"  # cancelled ones do not count


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


TORCH_LOG = [
    "I1201 09:21:34.929000 13183 .venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py:2542] "
    "Building extension module affine_v3...",
    "I1201 09:21:34.930000 13183 .venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py:2839] "
    "Allowing ninja to set a default number of workers... (overridable by setting the environment variable MAX_JOBS=N)",
]


@sizes
async def test_a_build_shows_the_compilers_output_not_torchs_log_lines(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=Clock())
    async with app.run_test(size=size) as pilot:
        screen = await run_screen(app, pilot, [started(trajectories=1), TurnStarted(trajectory=0, turn=1),
                                               GenerationFinished(trajectory=0, turn=1, seconds=5.0),
                                               EvalStage(trajectory=0, turn=1, stage=Stage.COMPILE)])
        for line in [*TORCH_LOG, "[1/2] c++ -MMD -MF main.o.d -O3 -c main.cpp -o main.o",
                     "[2/2] c++ main.o -shared -o affine_v3.so"]:
            app.sink.emit(EvalOutput(trajectory=0, turn=1, text=line + "\n"))
        await pilot.pause(1.3)
        text = text_of(app, "#feedback-text")
        assert "[1/2] c++ -MMD" in text and "[2/2] c++ main.o" in text
        assert "I1201" not in text and "cpp_extension.py" not in text and "Allowing ninja" not in text
        # The same for a failed build's log, kept with its turn.
        record = fixed_records()[3]
        log = "\n".join([*TORCH_LOG, record.eval.compile_log])
        failed = record.model_copy(update={"trajectory": 0, "turn": 1,
                                           "eval": record.eval.model_copy(update={"compile_log": log})})
        app.post_message(message_for(TurnFinished(record=failed, best=None)))
        await pilot.pause()
        text = text_of(app, "#feedback-text")
        assert "'n' was not declared in this scope" in text and "ninja: build stopped" in text
        assert "I1201" not in text and "Allowing ninja" not in text
        assert screen.query_one(TurnList).options


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
        assert "x" not in offered_keys(app)
        await pilot.press("x")  # not offered: nothing happens
        assert not app._notifications


# --- the history screen --------------------------------------------------------------------------
@sizes
async def test_history_shows_each_run_id_first_and_in_full(tmp_path, size):
    app = KevinApp(runs_root=build_store(tmp_path / "runs"))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert [str(c.label) for c in table.ordered_columns][:3] == ["id", "kind", "status"]
        lines = screen_lines(app)
        for run_id in ("20250102-090000-affine-0002", "20250101-120000-affine-0001"):
            assert any(line.startswith(f"│ {run_id}  ") for line in lines), lines
        assert lines[0].startswith(" history  20250102-090000-affine-0002  interrupted")


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
        assert [str(table.get_row_at(i)[2]) for i in range(3)] == ["live", "interrupted", "completed"]
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


def ten_runs(root):
    """Ten stored runs, newest first in the list; each but the newest is unfinished."""
    for day in range(10):
        store = RunStore.create(root, fixed_info(f"202501{day + 10}-120000-affine-{day:04d}",
                                                 status="interrupted" if day < 9 else "completed",
                                                 created_at=f"2025-01-{day + 10}T12:00:00+00:00", turns=4))
        for rec in fixed_records()[:2 + day % 4]:
            store.append(rec)
    return root


def burst(app, *keys: str) -> None:
    """Keys as a held key or a fast typist sends them: queued at once, with no pause between."""
    from textual import events

    for key in keys:
        app._driver.send_message(events.Key(key, key if len(key) == 1 else None))


async def test_a_burst_of_arrows_in_the_history_settles_on_the_row_the_cursor_rests_on(tmp_path):
    app = KevinApp(runs_root=ten_runs(tmp_path / "runs"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        history = app.screen
        table = history.query_one(DataTable)
        burst(app, *["down"] * 6)
        await wait_for(pilot, lambda: table.cursor_row == 6, 10, "the cursor")
        # The cursor stays where the keys left it, and that run is the one shown: no highlight
        # that arrived late sends it back (the screen used to cycle over the runs forever).
        seen = set()
        for _ in range(10):
            await pilot.pause(0.05)
            seen.add((table.cursor_row, history.run_id))
        row_key = table.coordinate_to_cell_key((6, 0)).row_key.value
        assert seen == {(6, row_key)}, seen
        assert screen_lines(app)[0].startswith(f" history  {row_key}")
        # The app still answers keys at once: the help opens and closes.
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert app.screen is history and table.cursor_row == 6
        # Up and down again, faster than anything is drawn: the same.
        burst(app, *["up", "down"] * 5, "up", "up")
        await wait_for(pilot, lambda: history.run_id == table.coordinate_to_cell_key((4, 0)).row_key.value, 10,
                       "the run under the cursor")
        await pilot.pause(0.3)
        assert table.cursor_row == 4


async def test_a_burst_of_arrows_on_the_run_screen_draws_the_turn_the_cursor_rests_on_once(tmp_path):
    """A held arrow over the run's turns: the output and feedback panes are drawn for the turn the
    cursor rests on, once per burst, not once per key (each drawing lays out a whole kernel and
    its feedback: per key, a burst kept the app busy for seconds)."""
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await run_screen(app, pilot, run_events())
        turns = screen.query_one(TurnList)
        turns.focus()
        await pilot.pause()
        drawn: list = []
        output, feedback = screen.query_one(ModelOutput), screen.query_one(FeedbackView)
        show_record, show = output.show_record, feedback.show
        output.show_record = lambda record: (drawn.append((record.trajectory, record.turn)), show_record(record))
        feedback.show = lambda record, **kw: (drawn.append("feedback"), show(record, **kw))
        assert turns.highlighted_key == (0, 3)  # the run is over: its winner is shown
        for keys, resting in ((["down"] * 3, (1, 3)), (["up", "down"] * 6 + ["up", "up"], (1, 1)), (["up"], (0, 3))):
            drawn.clear()
            burst(app, *keys)
            await wait_for(pilot, lambda: turns.highlighted_key == resting, 10, "the cursor")
            await pilot.pause(0.2)
            assert screen.pinned == resting
            assert drawn == [resting, "feedback"], drawn  # the resting turn, once
        # A kernel is highlighted once however often it is shown (a long one takes most of a second).
        code = screen.state.record((0, 3)).code
        assert kernel_content(code) is kernel_content(code)


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


@sizes
async def test_every_tab_title_is_on_screen_and_lineage_lines_wrap_between_turns(tmp_path, size):
    root = tmp_path / "runs"
    store = RunStore.create(root, fixed_info(RUN_ID, status="completed", created_at="2025-01-01T12:00:00+00:00",
                                             turns=12))
    for turn in range(1, 13):  # a chain far wider than 80 columns
        store.append(fixed_records()[0].model_copy(update={"turn": turn}))
    app = KevinApp(runs_root=root)
    async with app.run_test(size=size) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        titles = [title for _, title, _ in TABS]
        tab_row = next(line for line in screen_lines(app) if "Feedback" in line and "Kernel" in line)
        assert all(f" {title} " in tab_row + " " for title in titles), tab_row
        await pilot.press("l")
        await pilot.pause()
        lines = screen_lines(app)
        tab_row = next(line for line in lines if "Kernel" in line and "Diff" in line)
        assert all(f" {title} " in tab_row + " " for title in titles), tab_row  # none scrolled away
        lineage = app.screen.query_one("#tab-lineage-text")
        pane = lineage.region
        drawn = [line[pane.x:pane.right].rstrip() for line in lines[pane.y:pane.bottom]]
        chains = [line for line in drawn if re.match(r"\s*(t\d|->)", line)]
        cells = ["1:[parse error]", *(f"{n}:parse error" for n in range(2, 13))]
        joined = " ".join(chains)
        assert all(len(re.findall(rf"(?<!\d){re.escape(cell)}", joined)) == 1 for cell in cells), chains  # whole
        assert all(len(line) <= pane.width for line in chains)
        if size[0] < 120:
            assert len(chains) > 1 and all(line.lstrip().startswith("-> ") for line in chains[1:])


async def test_one_meaning_per_key_across_the_screens():
    meanings: dict[str, set[str]] = {}
    for node in (KevinApp, RunScreen, HistoryScreen, ConfirmScreen, HelpScreen):
        for binding in node.BINDINGS:
            if not binding.show:
                continue
            for key in binding.key.split(","):
                meanings.setdefault(key, set()).add(binding.action.removeprefix("app."))
    # Escape goes back out of what is open (a dialog, a level), and ? opens and closes the help.
    meanings["escape"] = {"close"}
    meanings["question_mark"] = {"help"}
    shared = {key: actions for key, actions in meanings.items() if len(actions) > 1}
    assert not shared, shared
    assert "q" not in {k for b in HelpScreen.BINDINGS for k in b.key.split(",")}  # q quits, everywhere


@sizes
async def test_the_footer_offers_only_keys_that_work_now(tmp_path, size):
    app = KevinApp(runs_root=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        await run_screen(app, pilot, run_events())  # a finished run, no run going in this window
        offered = offered_keys(app)
        assert not offered & {"s", "x", "v", "b"}, offered
        assert {"h", "e", "q", "question_mark"} <= offered
        await pilot.press("question_mark")
        await pilot.pause()
        assert offered_keys(app) == {"escape", "question_mark"}  # the help's own: close it


# --- dialogs -------------------------------------------------------------------------------------
@sizes
async def test_the_delivery_dialog_names_each_target_once_and_keeps_its_buttons_on_screen(tmp_path, size):
    plan = better_module_plan(tmp_path / "proj")
    title, yes = plan.question()
    app = KevinApp(runs_root=tmp_path / "runs", clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        await run_screen(app, pilot, run_events())
        app.push_screen(ConfirmScreen(title, commit_summary(plan), yes=yes))
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#yes"), 10, "it")
        await pilot.pause()
        dialog = app.screen
        screen_region = dialog.region
        for button in ("#yes", "#no"):
            region = dialog.query_one(button).region
            assert region.height and screen_region.contains_region(region), (button, region)
            assert dialog.query_one("#dialog").region.contains_region(region)
        body = dialog.query_one("#dialog-body Rows").plain
        for name in ("my_relu_kevin.py", "my_relu_kevin_report.md"):
            assert body.count(f"layers/{name}") == 1, body  # each target once
        assert "layers/my_relu_kevin_report.md, .json, .png: exists, untracked: needs --replace or a yes" in body
        assert "claims 2.70x (run 20241231-090000-my-relu-0001, turn 5), better than this run's 1.83x" in body
        assert str(tmp_path) not in body  # relative to the repository
        # The body scrolls; its last line, the commit, can be brought into view above the buttons.
        scroller = dialog.query_one("#dialog-body")
        scroller.scroll_end(animate=False)
        await pilot.pause()
        assert any("commit" in line and "--no-commit" in line for line in screen_lines(app))
        # Its footer offers its own keys, and the app's keys do nothing under it.
        assert offered_keys(app) == {"y", "n", "escape"}
        await pilot.press("q", "question_mark")
        assert app.screen is dialog
        await pilot.press("n")
        assert isinstance(app.screen, RunScreen)


async def test_no_to_a_second_delivery_says_the_first_ones_files_stay(tmp_path):
    """With --no-commit the kernel was written; `c` on a better kernel asks again, and its No must
    not say that nothing was written."""
    from kevin_agent.delivery import Delivery

    plan = better_module_plan(tmp_path / "proj")
    app = KevinApp(runs_root=tmp_path / "runs", clock=lambda: 0.0)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await run_screen(app, pilot, run_events())
        app.delivery = Delivery(plan=plan.consented(), outcome="written", written=plan.paths)
        app._ask(None, plan, False)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#no"), 10, "it")
        await pilot.press("n")
        await pilot.pause()
        said = " ".join(app.run_screen.query_one("#feedback-messages").plain.split())
        assert "nothing written, nothing committed" not in said
        assert "my_relu_kevin.py" in said and "from the earlier delivery" in said and "stay" in said
