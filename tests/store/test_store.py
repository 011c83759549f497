from __future__ import annotations

import json

import pytest

from kevin_agent.errors import RunNotFound, RunUnreadable
from kevin_agent.results import RunInfo, Status, TaskRef, TurnRecord
from kevin_agent.store import RunStore, default_runs_root, list_runs, new_run_id, now_iso

from ..conftest import git_init


def make_info(run_id: str = "20260101-000000-rms-abcd") -> RunInfo:
    return RunInfo(run_id=run_id, created_at=now_iso(), task=TaskRef(path="/x/rms.py", name="rms",
                   class_name="Model", digest="d"), device="cpu", backend="scripted", model="m",
                   turns=3, trajectories=1)


def rec(turn: int, status=Status.INCORRECT) -> TurnRecord:
    return TurnRecord(trajectory=0, turn=turn, status=status, feedback=f"feedback {turn}")


def test_append_and_read_back_in_order(tmp_path):
    store = RunStore.create(tmp_path, make_info())
    for t in (1, 2, 3):
        store.append(rec(t))
    again = RunStore.open(tmp_path, store.info.run_id)
    assert [r.turn for r in again.records()] == [1, 2, 3]
    assert again.record(0, 2).feedback == "feedback 2"
    assert (store.dir / "run.json").is_file() and (store.dir / "kernels").is_dir()


def test_torn_last_line_is_ignored_and_duplicates_kept_once(tmp_path):
    store = RunStore.create(tmp_path, make_info())
    store.append(rec(1))
    store.append(rec(1))  # a duplicate must not count twice
    with open(store.dir / "turns.jsonl", "a") as fh:
        fh.write(json.dumps(rec(2).model_dump(mode="json"))[:40])  # killed mid-write
    assert [r.turn for r in store.records()] == [1]


def test_open_by_unique_prefix_and_unknown_run(tmp_path):
    store = RunStore.create(tmp_path, make_info("20260101-000000-rms-abcd"))
    assert RunStore.open(tmp_path, "20260101-000000-rms").dir == store.dir
    with pytest.raises(RunNotFound) as exc:
        RunStore.open(tmp_path, "nope")
    assert "kevin-opt history" in exc.value.hint


def test_list_runs_newest_first_and_skips_damaged(tmp_path):
    a = make_info("a-run")
    a.created_at = "2026-01-01T00:00:00+00:00"
    b = make_info("b-run")
    b.created_at = "2026-02-01T00:00:00+00:00"
    RunStore.create(tmp_path, a)
    RunStore.create(tmp_path, b)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    assert [i.run_id for i, _ in list_runs(tmp_path)] == ["b-run", "a-run"]


def test_a_damaged_run_is_told_with_why_and_a_torn_last_turn_is_not_damage(tmp_path):
    """run.json not JSON, run.json missing a field, run.json gone, a turn in the middle of
    turns.jsonl not a turn: each left out of the runs and told in ``damaged``, saying which file
    and what is wrong. A torn last line (a killed write) is no damage: resume redoes that turn."""
    for name in ("good", "torn-tail", "bad-json", "no-task", "no-run-json", "bad-middle"):
        RunStore.create(tmp_path, make_info(name)).append(rec(1))
    with open(tmp_path / "torn-tail" / "turns.jsonl", "a") as fh:
        fh.write(json.dumps(rec(2).model_dump(mode="json"))[:40])
    (tmp_path / "bad-json" / "run.json").write_text("{not json")
    data = json.loads((tmp_path / "no-task" / "run.json").read_text())
    del data["task"]
    (tmp_path / "no-task" / "run.json").write_text(json.dumps(data))
    (tmp_path / "no-run-json" / "run.json").unlink()
    turns = tmp_path / "bad-middle" / "turns.jsonl"
    turns.write_text(turns.read_text() + "garbage\n" + json.dumps(rec(2).model_dump(mode="json")) + "\n")
    damaged: list = []
    assert sorted(i.run_id for i, _ in list_runs(tmp_path, damaged)) == ["good", "torn-tail"]
    why = {d.name: d.why for d in damaged}
    assert set(why) == {"bad-json", "no-task", "no-run-json", "bad-middle"} and {d.kind for d in damaged} == {"run"}
    assert why["bad-json"] == "run.json is unreadable: not JSON (Expecting property name enclosed in double " \
                              "quotes at line 1, column 2)"
    assert why["no-task"] == "run.json is unreadable: task: field required"
    assert why["no-run-json"] == "run.json is missing"
    assert why["bad-middle"].startswith("turns.jsonl, line 2, is not a turn record: not JSON")
    assert all(d.path == tmp_path / d.name for d in damaged)
    # What reads one run (show, resume) still reads what it can, as before.
    assert [r.turn for r in RunStore.open(tmp_path, "bad-middle").records()] == [1, 2]


def test_runs_root_is_at_the_top_of_the_git_repo(tmp_path):
    repo = git_init(tmp_path / "repo")
    (repo / "pkg").mkdir()
    assert default_runs_root(repo / "pkg") == repo / ".kevin" / "runs"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert default_runs_root(plain) == plain / ".kevin" / "runs"


def test_run_ids_are_unique_and_readable():
    ids = {new_run_id("My Layer!") for _ in range(20)}
    assert len(ids) == 20
    assert all("-my-layer-" in i for i in ids)


def test_every_file_of_the_run_store_says_its_layout(tmp_path):
    store = RunStore.create(tmp_path, make_info())
    store.append(rec(1))
    assert json.loads((store.dir / "run.json").read_text())["schema"] == 1
    assert json.loads((store.dir / "turns.jsonl").read_text())["schema"] == 1
    assert json.loads((store.dir / "lock").read_text())["schema"] == 1
    store.release()


def test_a_turn_of_an_unknown_layout_is_refused_naming_the_line(tmp_path):
    store = RunStore.create(tmp_path, make_info())
    store.append(rec(1))
    with open(store.dir / "turns.jsonl", "a") as fh:
        fh.write(json.dumps({**rec(2).model_dump(mode="json"), "schema": 7}) + "\n")
    with pytest.raises(RunUnreadable, match=r"turns.jsonl, line 2, is of layout \(schema\) 7"):
        store.records()
    # The history skips it, as it skips a damaged run.
    store.release()
    assert list_runs(tmp_path) == []
