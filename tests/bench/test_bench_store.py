"""The bench's folder and the forms of its table: tasks found in folders and lists, a result counted
once, the table as JSON (one schema), CSV, markdown and a PNG, and the progress line."""

from __future__ import annotations

import csv
import io
import json

import pytest

from kevin_agent.bench import find_tasks
from kevin_agent.bench.store import BenchStore
from kevin_agent.bench.table import build_table, render_markdown, table_csv, write_table
from kevin_agent.cli.bench_progress import BenchPrinter, BenchProgress, bar_line
from kevin_agent.errors import UsageError
from kevin_agent.results.bench import BenchInfo, TaskResult, TrajectoryResult
from kevin_agent.results.records import SCHEMA

TASK = "import torch\n\nclass Model(torch.nn.Module):\n    pass\n\ndef get_inputs():\n    return []\n"


def test_tasks_come_from_level_folders_in_kernelbench_order_and_from_lists(tmp_path):
    level = tmp_path / "level1"
    level.mkdir()
    for name in ("10_b.py", "2_a.py", "helper.py", "__init__.py"):
        (level / name).write_text(TASK if name != "helper.py" else "X = 1\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "2_a.py").write_text(TASK)
    listing = tmp_path / "tasks.txt"
    listing.write_text("# my tasks\nmine/2_a.py\n\nlevel1/2_a.py\n")
    tasks = find_tasks([level, listing])
    assert [t.task_id for t in tasks] == ["level1/2_a", "level1/10_b", "mine/2_a"]
    assert [t.level for t in tasks] == ["level1", "level1", None]


@pytest.mark.parametrize("make", ["empty folder", "missing", "empty list"])
def test_a_path_with_no_task_files_is_refused(tmp_path, make):
    target = tmp_path / "x"
    if make == "empty folder":
        target.mkdir()
        (target / "notes.py").write_text("X = 1\n")
    elif make == "empty list":
        target.write_text("# nothing\n")
    with pytest.raises(UsageError) as refused:
        find_tasks([target])
    assert refused.value.exit_code == 2 and str(target) in refused.value.message


def result(task_id, *, speedup=None, status="done", level="level1"):
    traj = [TrajectoryResult(trajectory=0, correct=speedup is not None, speedup=speedup,
                             first_correct_turn=1 if speedup else None)]
    return TaskResult(task_id=task_id, path=f"/t/{task_id}.py", level=level, status=status, trajectories=traj,
                      correct=speedup is not None, speedup=speedup, confirmed=speedup is not None,
                      first_correct_turn=1 if speedup else None, error="no class named 'Model'" if status == "failed" else None)


def bench(tmp_path, tasks):
    info = BenchInfo(bench_id="bench-1", created_at="2025-01-01T00:00:00+00:00", paths=[str(tmp_path)],
                     tasks=tasks, device="cpu", backend="scripted", model="scripted", trajectories=1, turns=2)
    return BenchStore.create(tmp_path / "benches", info)


def test_a_result_counts_once_and_the_table_is_written_in_every_form(tmp_path):
    level = tmp_path / "level1"
    level.mkdir()
    for name in ("1_a", "2_b", "3_c"):
        (level / f"{name}.py").write_text(TASK)
    store = bench(tmp_path, find_tasks([level]))
    assert store.record(result("level1/1_a", speedup=2.0))
    assert not store.record(result("level1/1_a", speedup=9.0))  # a copy that ran again
    assert store.record(result("level1/2_b", status="failed"))
    assert [t.task_id for t in store.pending()] == ["level1/3_c"]
    assert store.results()["level1/1_a"].speedup == 2.0
    table = write_table(store)
    data = json.loads((store.dir / "table.json").read_text())
    assert (data["schema"], data["kind"]) == (SCHEMA, "bench")
    assert data["tasks_done"] == 2 and data["pending"] == ["level1/3_c"]
    assert data["overall"]["eager"]["fast_p"]["1.5"] == 0.5 and data["levels"]["level1"]["tasks"] == 2
    rows = list(csv.DictReader(io.StringIO((store.dir / "table.csv").read_text())))
    assert [(r["task_id"], r["status"], r["speedup"]) for r in rows] == [("level1/1_a", "done", "2"),
                                                                         ("level1/2_b", "failed", "")]
    md = (store.dir / "table.md").read_text()
    assert md == render_markdown(table) and "| level1/2_b | failed (below) |" in md and "## Failed tasks" in md and "## level1 (2 tasks)" in md
    assert ", 1 trajectory x 2 turns, local; " in md  # one trajectory, in the singular
    assert "kevin-opt resume bench-1" in md
    assert (store.dir / "fast_p.png").read_bytes()[:4] == b"\x89PNG"
    assert build_table(store).status == "running"  # held by this process
    store.release()
    assert build_table(store).status == "interrupted"  # marked running, and no live process holds it
    store.update_info(status="completed")
    assert build_table(store).status == "completed"


def test_the_progress_line_counts_and_estimates():
    now = [100.0]
    progress = BenchProgress(clock=lambda: now[0])
    progress.total, progress.done_before = 10, 2
    assert progress.eta_s() is None
    progress.running = {"a", "b"}
    now[0] = 160.0
    progress.done, progress.failed = 3, 1
    assert progress.eta_s() == pytest.approx(60 / 3 * 5)
    line = bar_line(progress, 120)
    assert line.startswith("[" + "#" * 20) and "5/10 done · 2 running · 1 failed" in line and "ETA 1:40" in line
    assert len(bar_line(progress, 40)) <= 39


def test_headless_lines_and_the_live_line(tmp_path):
    out = io.StringIO()
    printer = BenchPrinter(out)
    printer.bench_started("bench-1", tmp_path, 2, 0, "local")
    printer.task_started("level1/1_a")
    printer.task_finished(result("level1/1_a", speedup=2.0), True)
    printer.task_finished(result("level1/1_a", speedup=2.0), False)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("kevin-opt: bench bench-1: 2 tasks, local")
    assert "[1/2] level1/1_a: correct 2.00x confirmed (first correct at turn 1, 1/1 trajectory)" in lines[2]
    assert "came back again" in lines[3]
    live = io.StringIO()
    printer = BenchPrinter(live, live=True, width=lambda: 100)
    printer.bench_started("bench-1", tmp_path, 2, 0, "local")
    printer.task_finished(result("level1/2_b", status="failed"), True)
    printer.end()
    text = live.getvalue()
    assert "\r\x1b[K" in text and "failed: no class named 'Model'" in text and text.endswith("ETA 0:00\n")
