"""`kevin-opt history`: every kind of record the store holds, by kind, in aligned columns; the damaged
ones listed with why; an optimize's runs known as its own, with its commit."""

from __future__ import annotations

import json

from kevin_agent.cli import main

from ..tui_support import BENCH_ID, DAMAGED_RUN, GROUP_RUN, OPTIMIZE_ID, every_kind

RUN_ID = "20250101-120000-affine-0001"


def history(capsys, *args: str) -> str:
    assert main(["history", *args]) == 0
    return capsys.readouterr().out


def _tables(out: str) -> dict[str, list[str]]:
    """Each table of the plain listing by its first column's head."""
    return {block.split()[0]: block.splitlines() for block in out.strip().split("\n\n")}


def test_plain_history_lists_every_kind_in_aligned_columns(tmp_path, capsys):
    runs, benches = every_kind(tmp_path)
    out = history(capsys, "--plain", "--run-dir", str(runs), "--bench-dir", str(benches))
    tables = _tables(out)
    assert list(tables) == ["OPTIMIZE", "BENCH", "RUN", "DAMAGED"]
    assert tables["OPTIMIZE"][1].startswith(OPTIMIZE_ID) and tables["BENCH"][1].startswith(BENCH_ID)
    assert [line.split()[0] for line in tables["RUN"][1:]] == [GROUP_RUN, RUN_ID]
    right = {"TURNS", "TASKS", "CORRECT", "MEAN", "KEPT"}
    for lines in tables.values():
        head = lines[0]
        # Each column's values start under its head, a number's end under it: however long the ids.
        for name in head.split()[1:]:
            start = head.index(name)
            end = start + len(name)
            for line in lines[1:]:
                if name in right:
                    assert line[end - 1] != " " and line[end] == " ", (name, head, line)
                else:
                    assert line[start - 1] == " " and line[start] != " ", (name, head, line)
    damaged = tables["DAMAGED"][1]
    assert damaged.startswith(DAMAGED_RUN) and "run" in damaged.split()
    assert damaged.endswith("run.json is unreadable: task: field required")


def test_an_optimizes_run_says_the_optimizes_commit_not_no_commit(tmp_path, capsys):
    runs, benches = every_kind(tmp_path)
    out = history(capsys, "--plain", "--run-dir", str(runs), "--bench-dir", str(benches))
    row = next(line for line in _tables(out)["RUN"] if line.startswith(GROUP_RUN))
    assert row.endswith(f"in {OPTIMIZE_ID}'s commit 3d405aa17a")
    assert "--no-commit" not in out
    listed = json.loads(history(capsys, "--json", "--run-dir", str(runs), "--bench-dir", str(benches)))
    entry = {e["run_id"]: e for e in listed["runs"]}
    assert entry[GROUP_RUN]["optimize_id"] == OPTIMIZE_ID and entry[GROUP_RUN]["commit"] == "3d405aa17a5c0ffee"
    assert entry[RUN_ID]["optimize_id"] is None and entry[RUN_ID]["commit"] is None
    assert entry[GROUP_RUN]["turns_total"] == 8  # 2 trajectories x 4 turns
    (damaged,) = listed["damaged"]
    assert damaged["id"] == DAMAGED_RUN and damaged["kind"] == "run"
    assert damaged["why"].startswith("run.json is unreadable: task: field required")
    assert [b["bench_id"] for b in listed["benches"]] == [BENCH_ID]


def test_a_folder_holding_only_a_bench_lists_the_bench_and_an_empty_one_says_so(tmp_path, capsys):
    _, benches = every_kind(tmp_path)
    # The benches folder given as the store (a folder holding only a bench): the bench, no "no runs".
    out = history(capsys, "--plain", "--run-dir", str(benches), "--bench-dir", str(tmp_path / "none"))
    assert out.splitlines()[0].startswith("BENCH") and BENCH_ID in out and "no runs" not in out
    assert json.loads(history(capsys, "--json", "--run-dir", str(benches)))["benches"][0]["bench_id"] == BENCH_ID
    empty = tmp_path / "empty"
    out = history(capsys, "--plain", "--run-dir", str(empty), "--bench-dir", str(empty))
    assert out == f"no runs, optimizes or benches in {empty}\n"


def test_an_interrupted_optimize_says_interrupted_once(tmp_path, capsys):
    from kevin_agent.store import OptimizeStore

    runs, _ = every_kind(tmp_path)
    store = OptimizeStore.open(runs, OPTIMIZE_ID)
    store.record.status, store.record.why, store.record.commit = "interrupted", "interrupted", None
    store.save()
    out = history(capsys, "--plain", "--run-dir", str(runs))
    assert "interrupted: interrupted" not in out
    assert main(["show", OPTIMIZE_ID, "--run-dir", str(runs)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"optimize {OPTIMIZE_ID}  interrupted"
