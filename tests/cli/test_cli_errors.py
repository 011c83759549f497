"""Bad input and bad flags: a clear message naming the problem, exit code 2, no traceback."""

from __future__ import annotations

import pytest

from ..clihelp import REPO, kevin

EX = REPO / "examples" / "rmsnorm.py"


def assert_clean_failure(proc, code: int, *needles: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "args, needles",
    [
        (["run", EX, "--turns", "0"], ["--turns", "at least 1"]),
        (["run", EX, "--turns", "many"], ["not a whole number"]),
        (["run", EX, "--backend", "gpt"], ["unknown backend 'gpt'", "openai, scripted, vllm"]),
        (["run", EX, "--device", "tpu"], ["unknown device 'tpu'", "cpu, cuda"]),
        (["run", EX, "--frobnicate"], ["unrecognized arguments", "--frobnicate"]),
        (["run", EX, "--turn", "2", "--fast"], ["unrecognized arguments: --turn (did you mean --turns?) 2",
                                                "kevin-opt run --help"]),
        (["history", "--pla"], ["unrecognized arguments: --pla (did you mean --plain?)"]),
        (["run", EX, "--min-speedup", "-1"], ["must not be negative"]),
        (["run"], ["FILE"]),
    ],
)
def test_bad_flags_exit_2(args, needles):
    assert_clean_failure(kevin(*args), 2, *needles)


def test_a_bad_flag_value_is_said_first_not_after_the_usage():
    proc = kevin("run", EX, "--turns", "many")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2
    assert lines[0] == "kevin-opt: error: argument --turns: 'many' is not a whole number", lines
    assert lines[1:] == ["  hint: see `kevin-opt run --help`"]


def test_no_command_prints_help_and_exits_2():
    proc = kevin()
    assert proc.returncode == 2 and "usage: kevin-opt" in proc.stderr


def test_bare_file_means_run(tmp_path):
    proc = kevin(tmp_path / "missing.py", "--device", "cpu", "--backend", "scripted", "--responses", "x.jsonl")
    assert_clean_failure(proc, 2, "missing.py: no such file")


@pytest.mark.parametrize(
    "text, needles",
    [
        ("def broken(:\n", ["syntax error at line 1"]),
        ("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_init_inputs():\n    return []\n",
         ["missing `get_inputs()`", "hint:"]),
        ("def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n", ["no class named 'Model'"]),
    ],
)
def test_bad_task_files_exit_2(tmp_path, text, needles):
    task = tmp_path / "layer.py"
    task.write_text(text)
    proc = kevin("run", task, "--device", "cpu", "--backend", "scripted", "--responses", tmp_path / "r.jsonl",
                 "--run-dir", tmp_path / "runs", "--headless")
    assert_clean_failure(proc, 2, str(task), *needles)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_scripted_backend_needs_responses(tmp_path):
    proc = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--run-dir", tmp_path, "--headless")
    assert_clean_failure(proc, 2, "--responses")


def test_show_unknown_run_exits_2(tmp_path):
    proc = kevin("show", "nope", "--run-dir", tmp_path)
    assert_clean_failure(proc, 2, "no run 'nope'", "kevin-opt history")


def test_history_of_an_empty_store(tmp_path):
    proc = kevin("history", "--run-dir", tmp_path)
    assert proc.returncode == 0 and "no runs" in proc.stdout


def test_inputs_that_fail_to_build_exit_2(tmp_path):
    task = tmp_path / "layer.py"
    task.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
        "def get_inputs():\n    return [torch.randn(4, 'eight')]\ndef get_init_inputs():\n    return []\n"
    )
    (tmp_path / "r.jsonl").write_text('{"text": "no code"}\n')
    proc = kevin("run", task, "--device", "cpu", "--backend", "scripted", "--responses", tmp_path / "r.jsonl",
                 "--turns", "1", "--run-dir", tmp_path / "runs", "--headless")
    assert_clean_failure(proc, 2, str(task), "get_inputs")


@pytest.mark.parametrize(
    "script, needles",
    [
        (None, ["the response script", "does not exist", "--responses PATH"]),
        ("this is not JSON\n", ["line 1: not valid JSON", "one JSON object"]),
        ('["a list"]\n', ['line 1: expected an object with a "text" string']),
        ("\n\n", ["has no responses"]),
    ],
    ids=["missing", "not-jsonl", "not-an-object", "empty"],
)
def test_a_response_script_that_cannot_be_read_is_bad_input_exit_2(tmp_path, script, needles):
    path = tmp_path / "responses.jsonl"
    if script is not None:
        path.write_text(script)
    proc = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--responses", path,
                 "--run-dir", tmp_path / "runs", "--headless")
    assert_clean_failure(proc, 2, str(path), *needles)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_no_parser_takes_a_flag_by_its_first_letters():
    import argparse

    from kevin_agent.cli import build_parser
    from kevin_agent.registry import build_registry

    parser = build_parser(build_registry())
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    parsers = {"kevin-opt": parser, **sub.choices}
    assert {name for name, p in parsers.items() if p.allow_abbrev} == set()
