"""The openai backend against a real HTTP server process (tests/servers/sse_server.py)."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from pathlib import Path

import pytest

from kevin_agent.backends.openai import OpenAIBackend
from kevin_agent.config import RunConfig
from kevin_agent.errors import BackendError
from kevin_agent.protocols import Backend

_spec = importlib.util.spec_from_file_location(
    "kevin_test_serverproc", Path(__file__).parents[1] / "servers" / "serverproc.py"
)
serverproc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serverproc)

pytestmark = pytest.mark.slow

ANSWER = "<think>memory bound</think>\n```python\nclass ModelNew:\n    pass\n```\nFused the add."


def backend_for(url: str, **overrides) -> OpenAIBackend:
    settings = {"backend": "openai", "base_url": url, "model": "tiny", "retries": 3,
                "request_timeout_s": 20.0, "temperature": 0.9, "max_tokens": 64, **overrides}
    backend = OpenAIBackend(RunConfig(**settings))
    backend.retry_backoff_s = 0.05
    return backend


def requests(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def chats(log: Path) -> list[dict]:
    return [r for r in requests(log) if r.get("path", "").endswith("/chat/completions")]


@pytest.fixture
def server_log(tmp_path):
    return tmp_path / "requests.jsonl"


def test_streams_content_and_sends_sampling_settings(server_log):
    with serverproc.start_sse_server("--content", ANSWER, "--log", str(server_log)) as server:
        backend = backend_for(server.url)
        assert isinstance(backend, Backend)
        seen: list[tuple[int, str, str]] = []
        out = backend.generate(["write a kernel"], on_token=lambda *a: seen.append(a))
        backend.close()
    assert out[0].text == ANSWER
    assert out[0].finish_reason == "stop" and not out[0].cancelled
    assert (out[0].prompt_tokens, out[0].completion_tokens) == (11, 22)
    assert len(seen) > 5, "tokens should arrive as several deltas"
    assert "".join(t for _, ch, t in seen if ch == "reasoning") == "memory bound"
    assert "".join(t for _, ch, t in seen if ch == "text").startswith("\n```python")
    body = chats(server_log)[0]["body"]
    assert body["stream"] is True and body["model"] == "tiny"
    assert body["temperature"] == 0.9 and body["max_tokens"] == 64
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "write a kernel"}]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_separate_reasoning_field_is_kept_apart(field):
    args = ("--content", "```python\nx\n```", "--reasoning", "think hard", "--reasoning-field", field)
    with serverproc.start_sse_server(*args) as server:
        seen: list[tuple[int, str, str]] = []
        out = backend_for(server.url).generate(["p"], on_token=lambda *a: seen.append(a))
    assert out[0].reasoning == "think hard"
    assert out[0].text == "```python\nx\n```"
    assert "".join(t for _, ch, t in seen if ch == "reasoning") == "think hard"


def test_batch_is_sent_concurrently_and_indexed(server_log):
    # Each stream takes ~1 s (20 chunks x 50 ms): all four are asked for before the first has ended.
    args = ("--content", "y" * 100, "--chunk-delay", "0.05", "--log", str(server_log))
    with serverproc.start_sse_server(*args) as server:
        backend = backend_for(server.url)
        backend.check_model()
        seen: list[tuple[int, str, str]] = []
        out = backend.generate(["a", "b", "c", "d"], on_token=lambda *a: seen.append(a))
    assert [g.text for g in out] == ["y" * 100] * 4
    assert {i for i, _, _ in seen} == {0, 1, 2, 3}
    log = requests(server_log)
    first_done = next(i for i, r in enumerate(log) if r.get("event") == "stream_done")
    assert len([r for r in log[:first_done] if r.get("path", "").endswith("/chat/completions")]) == 4, \
        "prompts were not sent concurrently"
    assert len(chats(server_log)) == 4


@pytest.mark.parametrize("status", [503, 429, 500])
def test_retries_with_backoff_then_succeeds(server_log, status):
    args = ("--fail", "2", "--fail-status", str(status), "--log", str(server_log))
    with serverproc.start_sse_server(*args) as server:
        out = backend_for(server.url, retries=3).generate(["p"])
    assert out[0].text.endswith("Replaced the add with a fused kernel.")
    assert len(chats(server_log)) == 3


def test_honours_retry_after_on_429(server_log):
    args = ("--fail", "1", "--fail-status", "429", "--retry-after", "0.6", "--log", str(server_log))
    with serverproc.start_sse_server(*args) as server:
        backend = backend_for(server.url)
        backend.check_model()
        start = time.monotonic()
        backend.generate(["p"])
        elapsed = time.monotonic() - start
    assert elapsed >= 0.6
    assert len(chats(server_log)) == 2


def test_gives_up_after_the_configured_retries(server_log):
    args = ("--fail", "10", "--fail-status", "503", "--log", str(server_log))
    with serverproc.start_sse_server(*args) as server:
        with pytest.raises(BackendError) as info:
            backend_for(server.url, retries=2).generate(["p"])
    assert "kept failing" in str(info.value) and "503" in str(info.value)
    assert info.value.exit_code == 3
    assert len(chats(server_log)) == 3


def test_does_not_retry_client_errors(server_log):
    args = ("--fail", "5", "--fail-status", "400", "--log", str(server_log))
    with serverproc.start_sse_server(*args) as server:
        with pytest.raises(BackendError, match=r"rejected the request \(400\)"):
            backend_for(server.url).generate(["p"])
    assert len(chats(server_log)) == 1


def test_stalled_stream_times_out_clearly(server_log):
    with serverproc.start_sse_server("--stall-after", "3", "--stall-s", "30", "--log", str(server_log)) as server:
        backend = backend_for(server.url, request_timeout_s=1.0)
        with pytest.raises(BackendError, match="sent nothing for 1 s") as info:
            backend.generate(["p"])
        said_while_stalled = not any(r.get("event") == "stream_done" for r in requests(server_log))
    assert said_while_stalled  # not after the server's 30 s
    assert "KEVIN_REQUEST_TIMEOUT_S" in str(info.value)


def test_cancel_closes_the_stream_and_returns_partial_text(server_log):
    args = ("--content", "z" * 2000, "--chunk-delay", "0.02", "--log", str(server_log))
    with serverproc.start_sse_server(*args) as server:
        backend = backend_for(server.url)
        cancel = threading.Event()
        seen: list[str] = []

        def on_token(i, channel, text):
            seen.append(text)
            if len(seen) == 10:
                cancel.set()

        out = backend.generate(["p"], on_token=on_token, cancel=cancel)
        streamed_on = not any(r.get("event") == "stream_done" for r in requests(server_log))
        time.sleep(0.5)  # let the server notice the closed connection
    assert out[0].cancelled
    assert 0 < len(out[0].text) < 2000 and set(out[0].text) == {"z"}
    assert streamed_on, "cancel should not wait for the rest of the stream"
    closed = [r for r in requests(server_log) if r.get("event") == "client_closed"]
    assert closed, "the server should see the client close the stream"


def test_cancel_during_a_stall_returns_promptly(server_log):
    with serverproc.start_sse_server("--stall-after", "4", "--stall-s", "30", "--log", str(server_log)) as server:
        backend = backend_for(server.url)
        backend.check_model()
        cancel = threading.Event()
        threading.Timer(1.0, cancel.set).start()
        out = backend.generate(["p", "q"], cancel=cancel)
        during_the_stall = not any(r.get("event") == "stream_done" for r in requests(server_log))
    assert all(g.cancelled for g in out)
    assert during_the_stall  # returned while the server still stalled, not after its 30 s


def test_unreachable_server_names_url_and_how_to_start_vllm():
    url = f"http://127.0.0.1:{serverproc.free_port()}/v1"
    backend = backend_for(url, retries=1)
    with pytest.raises(BackendError) as info:
        backend.generate(["p"])
    text = str(info.value)
    assert f"cannot reach the OpenAI-compatible server at {url}" in text
    assert "after 2 tries" in text
    assert "vllm serve cognition-ai/Kevin-32B" in text
    assert info.value.exit_code == 3


def test_wrong_model_lists_served_models():
    with serverproc.start_sse_server("--model", "kevin-small") as server:
        with pytest.raises(BackendError) as info:
            backend_for(server.url, model="Kevin-32B").generate(["p"])
    text = str(info.value)
    assert "does not serve model 'Kevin-32B'" in text and "kevin-small" in text
    assert "--model kevin-small" in text


def test_wrong_model_without_models_endpoint_still_clear():
    with serverproc.start_sse_server("--model", "kevin-small", "--no-models") as server:
        with pytest.raises(BackendError) as info:
            backend_for(server.url, model="Kevin-32B").generate(["p"])
    assert "does not serve model 'Kevin-32B'" in str(info.value)
    assert "does not exist" in str(info.value)


def test_auth_failure_is_clear(monkeypatch):
    monkeypatch.delenv("KEVIN_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with serverproc.start_sse_server("--api-key", "sesame") as server:
        with pytest.raises(BackendError, match="refused the API key") as info:
            backend_for(server.url).generate(["p"])
        assert "KEVIN_API_KEY" in str(info.value)
        monkeypatch.setenv("KEVIN_API_KEY", "sesame")
        out = backend_for(server.url).generate(["p"])
    assert out[0].text


def test_openai_api_key_env_is_used(monkeypatch):
    monkeypatch.delenv("KEVIN_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sesame")
    with serverproc.start_sse_server("--api-key", "sesame") as server:
        assert backend_for(server.url).generate(["p"])[0].text


def test_server_without_stream_options_still_works(server_log):
    args = ("--reject-stream-options", "--log", str(server_log))
    with serverproc.start_sse_server(*args) as server:
        out = backend_for(server.url).generate(["p"])
    assert out[0].text and out[0].completion_tokens is None
    bodies = [c["body"] for c in chats(server_log)]
    assert "stream_options" in bodies[0] and "stream_options" not in bodies[-1]


# --- the command line: the server is checked before the run starts -------------------------------
def cli_against(url: str, runs: Path, env: dict | None = None):
    from ..clihelp import REPO, kevin

    return kevin("run", REPO / "examples" / "rmsnorm.py", "--device", "cpu", "--backend", "openai",
                 "--base-url", url, "--model", "Kevin-32B", "--run-dir", runs, "--headless",
                 env={"KEVIN_RETRIES": "0"} if env is None else env)


def test_an_unreachable_server_is_said_before_the_run_and_makes_no_run_directory(tmp_path):
    url = f"http://127.0.0.1:{serverproc.free_port()}/v1"
    proc = cli_against(url, tmp_path / "runs", env={})  # the default retries: the check makes none
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(f"kevin-opt: error: cannot reach the OpenAI-compatible server at {url} "
                               "(on the first try)"), lines
    assert "vllm serve cognition-ai/Kevin-32B --max-model-len 32768 --reasoning-parser deepseek_r1" in lines[1]
    assert "run failed" not in proc.stderr and "run directory" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_server_without_the_model_is_said_before_the_run(tmp_path):
    with serverproc.start_sse_server("--model", "kevin-small") as server:
        proc = cli_against(server.url, tmp_path / "runs")
    assert proc.returncode == 3, proc.stderr
    assert "does not serve model 'Kevin-32B'" in proc.stderr and "--model kevin-small" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_progress_counts_tokens_as_they_stream_and_gives_the_servers_count_at_the_end(server_log):
    """A real server streaming a token every 20 ms: the headless progress says how many tokens a
    turn that generates long has streamed so far (nothing, before the first), and at its end the
    server's own count beside them; after it, the turn waits for evaluation, not for the server."""
    import io

    from kevin_agent import events as ev
    from kevin_agent.cli.progress import LONG_STAGE_S, ProgressPrinter

    now = [0.0]
    out = io.StringIO()
    printer = ProgressPrinter(out, turns=1, clock=lambda: now[0])
    printer.emit(ev.TurnStarted(trajectory=0, turn=1))
    now[0] += LONG_STAGE_S
    printer.tick()
    assert out.getvalue().splitlines()[-1] == "[t0 turn 1/1] generating, 0:15 so far, no tokens streamed yet"
    with serverproc.start_sse_server("--content", ANSWER, "--chunk-chars", "1", "--chunk-delay", "0.02",
                                     "--log", str(server_log)) as server:
        backend = backend_for(server.url)
        ticked: list[str] = []

        def on_token(i, channel, text):
            printer.emit(ev.TokenDelta(trajectory=0, turn=1, channel=channel, text=text))
            if not ticked and printer.streamed_tokens(0, 1) == 20:  # mid-stream: the person looks
                now[0] += LONG_STAGE_S
                printer.tick()
                ticked.append(out.getvalue().splitlines()[-1])

        (gen,) = backend.generate(["write a kernel"], on_token=on_token)
        backend.close()
    assert ticked == ["[t0 turn 1/1] generating, 0:30 so far, 20 tokens streamed"]
    streamed = printer.streamed_tokens(0, 1)
    assert 20 < streamed <= len(ANSWER)  # a delta a chunk, less the <think> tags the stream hides
    printer.emit(ev.GenerationFinished(trajectory=0, turn=1, completion_tokens=gen.completion_tokens, seconds=1.5))
    assert out.getvalue().splitlines()[-1] == (f"[t0 turn 1/1] response: 22 tokens (the server's count, {streamed} "
                                               "streamed), 1.5 s")
    now[0] += 4 * LONG_STAGE_S
    printer.tick()
    assert out.getvalue().splitlines()[-1] == "[t0 turn 1/1] waiting to be evaluated, 1:00 so far"
