from __future__ import annotations

import subprocess
import sys

from kevin_agent.registry import build_registry

PLUGIN = '''
from kevin_agent.registry.hookspecs import hookimpl
from kevin_agent.results import Violation

def no_printf(tree, source, device):
    return [Violation(rule="no-printf", message="printf in a kernel slows it down")] if "printf" in source else []

@hookimpl
def register_checks(register):
    register("no-printf", "kernels must not call printf", no_printf)

@hookimpl
def register_backends(register):
    register("echo", lambda config, *, skip=0: None)
'''


def test_builtins_come_through_the_same_hooks():
    reg = build_registry()
    assert {"vllm", "openai", "scripted"} <= set(reg.backends)
    assert {"cpu", "cuda"} <= set(reg.devices)
    assert {"independent", "beam"} <= set(reg.searches)
    assert "builtin" in reg.plugins and "kevin-opt" in reg.checks
    # Capabilities are declared, not found by reading signatures: only a replaying backend is
    # told how many responses a resumed run has used.
    assert reg.replaying == {"scripted"}


SEARCH_PLUGIN = '''
from kevin_agent.registry.hookspecs import hookimpl
from kevin_agent.engine.search import IndependentSearch

class EveryOther(IndependentSearch):
    pass

@hookimpl
def register_searches(register):
    register("every-other", lambda config: EveryOther())

@hookimpl
def register_backends(register):
    seen = []
    register("plain", lambda config: seen)
'''


def test_searches_and_backends_come_by_registered_name(tmp_path):
    from kevin_agent.config import RunConfig
    from kevin_agent.errors import ConfigError

    (tmp_path / "every_other.py").write_text(SEARCH_PLUGIN)
    reg = build_registry([tmp_path])
    assert type(reg.make_search(RunConfig(search="every-other"))).__name__ == "EveryOther"
    assert type(reg.make_search(RunConfig(search="beam", trajectories=8))).__name__ == "BeamSearch"
    # A backend registered without replays=True is made from the config alone, resumed or not.
    assert reg.make_backend(RunConfig(backend="plain"), skip=3) == []
    try:
        reg.make_search(RunConfig(search="nope"))
    except ConfigError as exc:
        assert "unknown search 'nope'" in exc.message and "every-other" in exc.hint
    else:
        raise AssertionError("an unknown search was accepted")


def test_folder_plugins_register_and_broken_ones_are_skipped(tmp_path):
    (tmp_path / "printf_rule.py").write_text(PLUGIN)
    (tmp_path / "broken.py").write_text("import does_not_exist_anywhere\n")
    reg = build_registry([tmp_path])
    assert "echo" in reg.backends and "no-printf" in reg.checks
    assert len(reg.load_errors) == 1 and "broken.py" in reg.load_errors[0]
    assert "does_not_exist_anywhere" in reg.load_errors[0]
    bad = reg.check('printf("x")\n', "cpu")
    assert not bad.passed and "no-printf" in {v.rule for v in bad.violations}


def test_broken_plugin_is_reported_on_stderr_and_the_tool_goes_on(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    env = {"KEVIN_PLUGINS_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "CI": "true"}
    proc = subprocess.run([sys.executable, "-m", "kevin_agent.cli", "history", "--run-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "broken.py failed to import and was skipped" in proc.stderr
    assert "boom at import" in proc.stderr
    assert "Traceback" not in proc.stderr


REPLAY_PLUGIN = '''
from kevin_agent.registry.hookspecs import hookimpl

def replay(config, *, skip=0):
    from kevin_agent.backends.scripted import ScriptedBackend

    return ScriptedBackend(config.responses, skip=skip, model="replay-plugin")

@hookimpl
def register_backends(register):
    register("replay", replay, replays=True)
'''


def test_a_plugin_backend_from_kevin_plugins_dir_runs_a_whole_run(tmp_path):
    """`--backend NAME` takes any registered name: a folder plugin's backend drives a real run."""
    import json

    from .clihelp import REPO, kevin

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "replay.py").write_text(REPLAY_PLUGIN)
    summary = tmp_path / "summary.json"
    proc = kevin("run", REPO / "examples" / "rmsnorm.py", "--device", "cpu", "--backend", "replay",
                 "--responses", REPO / "examples" / "rmsnorm.cpu.jsonl", "--turns", "1", "--headless",
                 "--no-commit", "--run-dir", tmp_path / "runs", "--json", summary,
                 env={"KEVIN_PLUGINS_DIR": str(plugins)})
    assert proc.returncode == 1, proc.stderr  # the script's first answer has no code: no verified kernel
    data = json.loads(summary.read_text())
    assert data["backend"] == "replay" and data["model"].startswith("replay-plugin")
    assert [t["status"] for t in data["turns"]] == ["parse_error"]
    assert "replay" in kevin("run", "--help", env={"KEVIN_PLUGINS_DIR": str(plugins)}).stdout
