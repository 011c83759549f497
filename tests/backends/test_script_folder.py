"""The scripted backend over a folder of scripts, one per task: which file a task's run is
served from, and what is said when the folder has none for it."""

from __future__ import annotations

import json

import pytest

from kevin_agent.backends.scripted import ScriptedBackend, script_for
from kevin_agent.errors import BackendError, ExitCode, UsageError
from kevin_agent.protocols import Replaying


def write(path, *texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "responses"
    folder.mkdir()
    write(folder / "softmax.jsonl", "softmax 0", "softmax 1")
    write(folder / "RowNorm.jsonl", "rownorm 0")
    write(folder / "layers.1.norm.jsonl", "layers.1.norm 0")
    (folder / "notes.txt").write_text("not a script\n")
    return folder


def test_the_first_name_with_a_script_wins(folder):
    assert script_for(folder, ["softmax"]) == folder / "softmax.jsonl"
    # A module group: its members' paths as the profile prints them, then its class name.
    assert script_for(folder, ["layers.0.norm", "layers.1.norm", "RowNorm"]) == folder / "layers.1.norm.jsonl"
    assert script_for(folder, ["layers.0.norm", "RowNorm"]) == folder / "RowNorm.jsonl"


def test_a_folder_without_the_tasks_script_names_what_it_looked_for(folder):
    with pytest.raises(UsageError) as missing:
        script_for(folder, ["layers.0.norm", "layers.0.norm", "notes", "ScaledNorm"])
    error = missing.value
    assert error.exit_code == ExitCode.USAGE
    assert str(folder) in error.message
    assert error.message.endswith("looked for layers.0.norm.jsonl, notes.jsonl, ScaledNorm.jsonl")
    assert "--responses FILE.jsonl" in error.hint


def test_one_backend_over_a_folder_serves_each_run_its_own_script(folder):
    backend = ScriptedBackend(folder)
    assert isinstance(backend, Replaying)
    with pytest.raises(BackendError, match="no run has chosen one"):
        backend.generate(["p"])
    backend.cue(["softmax"], 0)
    assert [g.text for g in backend.generate(["p"])] == ["softmax 0"]
    backend.cue(["layers.0.norm", "RowNorm"], 0)
    assert [g.text for g in backend.generate(["p"])] == ["rownorm 0"]
    backend.cue(["softmax"], 1)  # a resumed run: the responses it used are skipped
    assert [g.text for g in backend.generate(["p"])] == ["softmax 1"]
    with pytest.raises(UsageError, match="looked for mlp.jsonl"):
        backend.cue(["mlp"], 0)


def test_a_file_is_served_from_the_start_to_every_run(tmp_path):
    backend = ScriptedBackend(write(tmp_path / "r.jsonl", "a", "b"))
    assert [g.text for g in backend.generate(["p", "q"])] == ["a", "b"]
    backend.cue(["anything"], 0)
    assert [g.text for g in backend.generate(["p"])] == ["a"]


def test_a_script_is_checked_before_the_run_for_every_turn_it_must_answer(folder, tmp_path):
    from kevin_agent.backends.scripted import check_script
    from kevin_agent.config import load_config
    from kevin_agent.run.launch import check_scripts, script_names

    assert check_script(folder, ["softmax"], turns=2, trajectories=1) == folder / "softmax.jsonl"
    with pytest.raises(UsageError) as short:
        check_script(folder, ["softmax"], turns=3, trajectories=1)
    assert short.value.message == f"the script {folder / 'softmax.jsonl'} has 2 responses; 3 turns need 3"
    assert short.value.hint == "pass --turns 2 or fewer, or add responses"
    with pytest.raises(UsageError, match="1 response; 2 turns x 2 trajectories need 4") as wide:
        check_script(folder, ["RowNorm"], turns=2, trajectories=2)
    assert wide.value.hint == "add responses"  # not even one turn of two trajectories
    with pytest.raises(UsageError, match="does not exist"):
        check_script(tmp_path / "nowhere.jsonl", ["softmax"], turns=1, trajectories=1)

    # The examples name their scripts by device: rmsnorm.cpu.jsonl serves a cpu run of rmsnorm.py.
    write(folder / "rmsnorm.cpu.jsonl", "cpu 0")
    assert script_names([], tmp_path / "rmsnorm.py", "cpu") == ["rmsnorm", "rmsnorm.cpu"]
    assert script_for(folder, script_names([], tmp_path / "rmsnorm.py", "cpu")) == folder / "rmsnorm.cpu.jsonl"

    # Many tasks: one error naming each that cannot be answered, none for those that can.
    config = load_config({"backend": "scripted", "responses": folder, "device": "cpu", "turns": 2})
    check_scripts(config, [(tmp_path / "softmax.py", [])])
    with pytest.raises(UsageError) as many:
        check_scripts(config, [(tmp_path / "softmax.py", []), (tmp_path / "rmsnorm.py", []),
                               (tmp_path / "gelu.py", [])])
    text = many.value.message
    assert text.startswith(f"2 tasks cannot be answered from --responses {folder}")
    assert "rmsnorm.cpu.jsonl has 1 response; 2 turns need 2" in text
    assert "looked for gelu.jsonl, gelu.cpu.jsonl" in text and "softmax" not in text
