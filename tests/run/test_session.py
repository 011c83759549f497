"""One run session for every front end, and a backend it did not make: many runs in one process
on one backend (a model's modules, a bench's tasks), the backend made once and closed by its
owner, with a plugin backend loaded through KEVIN_PLUGINS_DIR and the openai backend against a
real HTTP server. The responses need no compiler: every turn ends before the build."""

from __future__ import annotations

import importlib.util
import io
import json
import textwrap
from pathlib import Path

import pytest

from kevin_agent.config import RunConfig
from kevin_agent.errors import ConfigError
from kevin_agent.registry import build_registry
from kevin_agent.results import Status
from kevin_agent.run.finish import Outputs
from kevin_agent.run.launch import open_backend
from kevin_agent.run.session import RunSession
from kevin_agent.store import RunStore, lock_owner
from kevin_agent.tui import KevinApp

from ..clihelp import REPO
from ..tui_support import wait_for

SOFTMAX, RMSNORM = REPO / "examples" / "softmax.py", REPO / "examples" / "rmsnorm.py"

_spec = importlib.util.spec_from_file_location("kevin_test_serverproc", REPO / "tests" / "servers" / "serverproc.py")
serverproc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serverproc)

COUNTED_PLUGIN = textwrap.dedent('''
    """A plugin backend that writes a line to $COUNTED_LOG when it is made and when it is closed."""
    import os

    from kevin_agent.backends.scripted import ScriptedBackend
    from kevin_agent.registry.hookspecs import hookimpl


    def _note(what):
        with open(os.environ["COUNTED_LOG"], "a") as fh:
            fh.write(what + "\\n")


    class Counted(ScriptedBackend):
        name = "counted"
        sequences_that_fit = 2  # as the vllm backend knows its KV cache once started

        def __init__(self, config, *, skip=0):
            super().__init__(config.responses, skip=skip)
            _note("made")

        def close(self):
            _note("closed")


    class Stuck(ScriptedBackend):
        """Replays one run's responses and cannot be cued for another."""
        cue = None

        def __init__(self, config, *, skip=0):
            super().__init__(config.responses, skip=skip)


    @hookimpl
    def register_backends(register):
        register("counted", Counted, replays=True)
        register("stuck", Stuck, replays=True)
''')


class Events:
    def __init__(self) -> None:
        self.seen: list = []

    def emit(self, event) -> None:
        self.seen.append(event)


def answer(label: str, i: int) -> dict:
    return {"text": f"<think>[hand-written test response] {label} {i}</think>No code for {label} yet ({i})."}


def write_script(path: Path, label: str, count: int) -> Path:
    path.write_text("".join(json.dumps(answer(label, i)) + "\n" for i in range(count)))
    return path


def run_to_end(session: RunSession, registry) -> int:
    session.open(Events())
    ending = session.drive()
    assert ending.outcome is not None, ending.error
    return session.close(Outputs(), registry, stream=io.StringIO())


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """The plugin, loaded as any plugin is, and its log of constructions and closes."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "counted.py").write_text(COUNTED_PLUGIN)
    log = tmp_path / "counted.log"
    monkeypatch.setenv("KEVIN_PLUGINS_DIR", str(plugins))
    monkeypatch.setenv("COUNTED_LOG", str(log))
    registry = build_registry()
    assert not registry.load_errors and "counted" in registry.backends
    return registry, lambda: log.read_text().split() if log.exists() else []


def config_for(tmp_path: Path, **extra) -> RunConfig:
    settings = dict(device="cpu", turns=1, run_dir=tmp_path / "runs", min_speedup=0, correctness_trials=1)
    return RunConfig(**{**settings, **extra})


def test_a_shared_plugin_backend_is_made_once_and_closed_by_its_owner(tmp_path, counted):
    registry, log = counted
    config = config_for(tmp_path, backend="counted", responses=write_script(tmp_path / "r.jsonl", "shared", 2))
    backend = open_backend(config, registry)
    runs = []
    for task in (SOFTMAX, RMSNORM):
        session = RunSession.new(config, task, registry=registry, backend=backend)
        assert run_to_end(session, registry) == 1  # nothing verified: exit 1, as headless
        assert log() == ["made"], "a run closed a backend it was given"
        assert lock_owner(session.engine.store.dir) is None  # the run was given up
        runs.append(session.engine.store)
    backend.close()
    assert log() == ["made", "closed"]
    for store in runs:
        store = RunStore.open(store.dir.parent, store.info.run_id)
        # Trajectories settled from the one backend's capacity, and each run served from the
        # start of the script: the shared backend keeps no place from the run before.
        assert store.info.trajectories == 2 and store.info.status == "completed"
        assert [r.response for r in store.records()] == [answer("shared", 0)["text"], answer("shared", 1)["text"]]


def test_a_session_that_makes_its_backend_closes_it(tmp_path, counted):
    registry, log = counted
    config = config_for(tmp_path, backend="counted", responses=write_script(tmp_path / "r.jsonl", "own", 2))
    session = RunSession.new(config, SOFTMAX, registry=registry)
    session.open(Events())
    assert log() == ["made"]
    session.drive()
    assert log() == ["made", "closed"]
    assert session.close(Outputs(), registry, stream=io.StringIO()) == 1


def test_a_backend_that_cannot_be_cued_is_not_shared(tmp_path, counted):
    registry, _ = counted
    config = config_for(tmp_path, backend="stuck", responses=write_script(tmp_path / "r.jsonl", "stuck", 2))
    backend = open_backend(config, registry)
    with pytest.raises(ConfigError, match="cannot serve several runs"):
        RunSession.new(config, SOFTMAX, registry=registry, backend=backend).open(Events())
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_resumed_run_on_a_shared_backend_skips_the_responses_it_used(tmp_path, counted):
    registry, log = counted
    config = config_for(tmp_path, backend="counted", responses=write_script(tmp_path / "r.jsonl", "go", 4),
                        trajectories=1)
    backend = open_backend(config, registry)
    first = RunSession.new(config, SOFTMAX, registry=registry, backend=backend)
    run_to_end(first, registry)
    other = RunSession.new(config, RMSNORM, registry=registry, backend=backend)
    run_to_end(other, registry)
    run_id = first.engine.store.info.run_id
    again = RunSession.resumed(run_id, runs_root=tmp_path / "runs", overrides={"turns": 2}, registry=registry,
                               backend=backend)
    run_to_end(again, registry)
    backend.close()
    assert log() == ["made", "closed"]
    records = RunStore.open(tmp_path / "runs", run_id).records()
    assert [r.response for r in records] == [answer("go", 0)["text"], answer("go", 1)["text"]]


def test_one_scripted_backend_over_a_folder_serves_each_run_its_own_script(tmp_path):
    folder = tmp_path / "responses"
    folder.mkdir()
    for name in ("softmax", "rmsnorm", "RowNorm"):
        write_script(folder / f"{name}.jsonl", name, 2)
    config = config_for(tmp_path, backend="scripted", responses=folder)
    registry = build_registry()
    backend = open_backend(config, registry)
    served = {}
    for task, names in ((SOFTMAX, ()), (RMSNORM, ()), (RMSNORM, ("layers.0.norm", "RowNorm"))):
        session = RunSession.new(config, task, registry=registry, backend=backend, names=names)
        run_to_end(session, registry)
        served[names or task.stem] = session.engine.store.info.run_id
    # The first run again, one turn further: the response its first turn used is skipped.
    resumed = RunSession.resumed(served["softmax"], runs_root=tmp_path / "runs", overrides={"turns": 2},
                                 registry=registry, backend=backend)
    run_to_end(resumed, registry)
    backend.close()

    def responses(run_id: str) -> list[str]:
        return [r.response for r in RunStore.open(tmp_path / "runs", run_id).records()]

    assert responses(served["softmax"]) == [answer("softmax", 0)["text"], answer("softmax", 1)["text"]]
    assert responses(served["rmsnorm"]) == [answer("rmsnorm", 0)["text"]]
    # A module group of a model is served by a member's module path, or by its class name.
    assert responses(served[("layers.0.norm", "RowNorm")]) == [answer("RowNorm", 0)["text"]]


async def test_the_terminal_ui_runs_a_session_on_a_backend_it_was_given(tmp_path, counted):
    registry, log = counted
    config = config_for(tmp_path, backend="counted", responses=write_script(tmp_path / "r.jsonl", "tui", 2))
    backend = open_backend(config, registry)
    session = RunSession.new(config, SOFTMAX, registry=registry, backend=backend)
    app = KevinApp(session, runs_root=tmp_path / "runs")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.delivery is not None, 300, "the run to end and deliver")
        # Nothing verified: nothing to ask, the delivery says so; the ending is the session's.
        assert app.delivery.outcome == "nothing" and app.ending() is session.ending
        assert app.exit_code == 1 and app.outcome.reason == "completed"
        assert lock_owner(session.engine.store.dir) is None
        await pilot.press("q")
    assert log() == ["made"]
    backend.close()
    assert log() == ["made", "closed"]


@pytest.mark.slow
def test_the_openai_backend_serves_two_runs_in_a_row(tmp_path):
    reply = answer("served", 0)["text"]
    log = tmp_path / "requests.jsonl"
    with serverproc.start_sse_server("--content", reply, "--model", "tiny", "--log", str(log)) as server:
        config = config_for(tmp_path, backend="openai", base_url=server.url, model="tiny", max_tokens=64,
                            context_tokens=4096, retries=0)
        registry = build_registry()
        backend = open_backend(config, registry)
        stores = []
        for task in (SOFTMAX, RMSNORM):
            session = RunSession.new(config, task, registry=registry, backend=backend)
            assert run_to_end(session, registry) == 1
            assert not backend._client.is_closed()
            stores.append(session.engine.store)
        backend.close()
        assert backend._client.is_closed()
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    chats = [r["body"]["messages"][0]["content"] for r in requests if r.get("path", "").endswith("/chat/completions")]
    # One request per run, each with its own task, on the one connection pool; checked once.
    assert len(chats) == 2 and "softmax" in chats[0].lower() and "rms" in chats[1].lower()
    assert sum(r.get("path", "").endswith("/models") for r in requests) == 1
    for store in stores:
        (record,) = RunStore.open(store.dir.parent, store.info.run_id).records()
        assert record.response == reply and record.status is Status.PARSE_ERROR
