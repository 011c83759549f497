"""`--help`: every option says what it does in a whole sentence, where a person looks for it."""

from __future__ import annotations

import argparse
import re

import pytest

from kevin_agent.cli import build_parser
from kevin_agent.config import RunConfig, field_help, first_sentence
from kevin_agent.registry import build_registry

from ..clihelp import kevin

# Words a description never ends on: a help text that ends on one was cut mid-sentence.
DANGLING = {"a", "an", "the", "and", "or", "but", "of", "to", "in", "at", "by", "for", "with", "from", "than",
            "once", "whenever", "while", "less", "its", "their", "which", "if", "each", "every"}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser(build_registry())
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options(name: str) -> list[argparse.Action]:
    return [a for a in subcommands()[name]._actions if not isinstance(a, argparse._HelpAction)]


def group_of(parser: argparse.ArgumentParser, option: str) -> str:
    for group in parser._action_groups:
        if any(option in a.option_strings for a in group._group_actions):
            return group.title
    raise AssertionError(f"{option} is in no group")


def assert_whole(text: str, what: str) -> None:
    assert text, f"{what} has no help"
    assert text.count("(") == text.count(")"), f"{what}: {text!r}"
    while (bare := re.sub(r"\s*\([^()]*\)$", "", text)) != text:  # "(default on)" is no sentence end
        text = bare
    last = text.rstrip(".;:").rsplit(" ", 1)[-1].lower()
    assert last not in DANGLING, f"{what} ends mid-sentence: {text!r}"


COMMANDS = ["run", "resume", "check", "history", "show", "bench", "optimize", "profile", "extract", "install", "e2e"]


@pytest.mark.parametrize("command", COMMANDS)
def test_no_option_help_ends_mid_sentence(command):
    for action in options(command):
        text = (action.help or "").replace("%%", "%").strip()
        name = "/".join(action.option_strings) or action.metavar or action.dest
        assert_whole(text, f"{command} {name}")
        assert "None:" not in text, f"{command} {name} speaks of Python's None: {text!r}"
        # Lower case as argparse's own lines are; a word in capitals (JSONL, URL) stays.
        assert not text[:2].istitle(), f"{command} {name}: {text!r}"
        # A value is named by what it is (N, X, PATH, NAME, ...), never by the flag's own name again.
        if action.option_strings and action.nargs != 0 and action.choices is None:
            assert action.metavar and action.metavar != action.dest.upper(), f"{command} {name}: {action.metavar}"


def test_every_command_is_described_in_a_whole_sentence():
    parser = build_parser(build_registry())
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    described = {a.dest: a.help for a in sub._choices_actions}
    assert set(described) == set(COMMANDS)
    for name, text in described.items():
        assert_whole(text, f"kevin-opt {name}")


def test_device_says_what_it_means_for_each_command():
    helps = {c: next(a.help for a in options(c) if "--device" in a.option_strings)
             for c in ("run", "profile", "extract", "e2e")}
    assert helps["run"].startswith("where kernels run")
    assert helps["profile"].startswith("where the model runs while it is profiled")
    assert helps["extract"].startswith("where the model runs while the module is recorded")
    assert helps["e2e"].startswith("where the whole model runs")


def test_a_settings_help_is_its_docstrings_whole_first_sentence():
    for name, info in RunConfig.model_fields.items():
        sentence = first_sentence(info.description or "").rstrip(".")
        assert field_help(name).startswith(sentence), name
    assert first_sentence("Cut here.\nNot this.") == "Cut here."
    assert first_sentence("Base URL, e.g. http://host:8000/v1.") == "Base URL, e.g. http://host:8000/v1."
    assert first_sentence("A limit (one per stage. or so) and\nmore. Next.") == "A limit (one per stage. or so) and more."


def test_run_help_says_what_was_cut_and_says_it_the_right_way_round():
    proc = kevin("run", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "a worker stops sooner once each kernel's 95% interval is within 1% of its median" in text
    assert "and plainly whenever that fails (see docs/evaluation.md)" in text
    assert "less the model's share" in text
    helps = {o: a.help.replace("%%", "%") for a in options("run") for o in a.option_strings}
    assert helps["--no-commit"].startswith("write the best kernel and its report") and "commit nothing" in helps[
        "--no-commit"]
    assert "beside the task" in helps["--run-dir"]


def test_reporters_sit_with_the_other_outputs():
    for command in ("run", "resume"):
        parser = subcommands()[command]
        assert group_of(parser, "--junit") == group_of(parser, "--json") == "output"
