"""What the README promises a newcomer, checked against what is true."""

from __future__ import annotations

import re
import shlex

from kevin_agent.cli import build_parser
from kevin_agent.registry import build_registry

from .clihelp import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def try_it() -> list[str]:
    section = README.split("## Try it", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_try_it_installs_the_cpu_build_from_pytorchs_cpu_index():
    installs = [line for line in try_it() if line.startswith("pip install torch")]
    assert installs and "--index-url https://download.pytorch.org/whl/cpu" in installs[0]
    assert "torch==2.13.0" in installs[0]
    assert "CUDA build" in README  # and what the plain pin does elsewhere


def test_try_it_runs_a_command_the_cli_takes():
    (run,) = [line for line in try_it() if line.startswith("kevin-opt ")]
    args = build_parser(build_registry()).parse_args(["run", *shlex.split(run)[1:]])
    assert (args.device, args.backend, args.commit) == ("cpu", "scripted", False)
    assert (REPO / args.file).is_file() and (REPO / args.responses).is_file()


def test_the_readme_says_how_long_the_demo_and_the_tests_take():
    assert re.search(r"about 4 minutes on 2 cores the first time .* about 40 s after that", README, re.S)
    assert "about 35 minutes on 2 cores" in README


def test_the_keys_the_readme_names_are_the_run_screens():
    from kevin_agent.tui.screens.run import RunScreen

    keys = {b.key: b.action.removeprefix("app.") for b in RunScreen.BINDINGS}
    assert keys["e"] == "toggle_reasoning" and keys["v"] == "follow_live"
    assert "`e` expand or collapse the reasoning" in README and "`v` view the live" in README


def test_start_from_your_model_leads_with_optimize_on_a_copy_of_the_example():
    section = README.split("## Start from your model", 1)[1].split("\n## ", 1)[0]
    copy, run = re.search(r"```bash\n(.*?)```", section, re.S).group(1).strip().splitlines()
    argv = shlex.split(run)
    assert argv[:2] == ["kevin-opt", "optimize"]
    args = build_parser(build_registry()).parse_args(argv[1:])
    assert (args.device, args.backend) == ("cpu", "scripted")
    # the demo runs in a scratch repository of its own, never in the person's kevin-opt clone
    steps = [shlex.split(step) for step in copy.split("&&")]
    cp = next(s for s in steps if s[0] == "cp")
    assert {f"examples/{args.model_file}", f"examples/{args.responses}"} <= set(cp)
    assert (REPO / "examples" / args.model_file).is_file() and (REPO / "examples" / args.responses).is_dir()
    assert [s[0] for s in steps].index("cd") < [s[:2] for s in steps].index(["git", "init"])


def test_the_readme_gives_every_exit_code_the_tool_uses():
    section = " ".join(README.split("Exit codes: ", 1)[1].split("\n\n", 1)[0].split())
    for code, words in (("`130`, `143`, `129`", "SIGINT, SIGTERM or SIGHUP"),
                        ("`130` also when `q` quits", "while a run goes on"), ("`141`", "SIGPIPE")):
        assert code in section and words in section, (code, section)
