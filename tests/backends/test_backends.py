"""The scripted backend, the think splitter, backend selection and the vllm backend's refusals."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import pytest

from kevin_agent.backends.scripted import ScriptedBackend
from kevin_agent.registry import build_registry
from kevin_agent.backends.streaming import ThinkSplitter
from kevin_agent.config import RunConfig
from kevin_agent.errors import BackendError, ConfigError, EnvironmentUnavailable, UsageError
from kevin_agent.protocols import Backend


def write_script(path: Path, items: list[dict], extra_lines: list[str] | None = None) -> Path:
    lines = [json.dumps(item) for item in items] + (extra_lines or [])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def collect():
    seen: list[tuple[int, str, str]] = []
    return seen, lambda i, channel, text: seen.append((i, channel, text))


# --- think splitter -------------------------------------------------------------------------


def joined(parts, channel):
    return "".join(text for ch, text in parts if ch == channel)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_splitter_routes_thinking_whatever_the_chunking(size):
    text = "pre <think>deep < thought</think>the answer <b>"
    splitter = ThinkSplitter()
    parts = []
    for i in range(0, len(text), size):
        parts += splitter.feed(text[i:i + size])
    parts += splitter.flush()
    assert joined(parts, "reasoning") == "deep < thought"
    assert joined(parts, "text") == "pre the answer <b>"


def test_splitter_can_start_inside_thinking():
    splitter = ThinkSplitter(in_reasoning=True)
    parts = splitter.feed("still thinking</thi") + splitter.feed("nk>done") + splitter.flush()
    assert joined(parts, "reasoning") == "still thinking"
    assert joined(parts, "text") == "done"


# --- scripted backend -----------------------------------------------------------------------


def test_scripted_serves_in_order_across_calls_and_batches(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": f"answer {i}"} for i in range(5)],
                        extra_lines=["", "   "])
    backend = ScriptedBackend(path)
    assert isinstance(backend, Backend)
    assert backend.name == "scripted"
    assert "hand-written" in backend.model
    first = backend.generate(["p0", "p1"])
    second = backend.generate(["p2"])
    assert [g.text for g in first] == ["answer 0", "answer 1"]
    assert [g.text for g in second] == ["answer 2"]
    assert all(g.finish_reason == "stop" and not g.cancelled for g in first + second)


def test_scripted_skip_resumes_after_used_responses(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": f"answer {i}"} for i in range(4)])
    backend = ScriptedBackend(path, skip=3)
    assert backend.generate(["p"])[0].text == "answer 3"


def test_scripted_streams_in_chunks_with_reasoning_channel(tmp_path):
    text = "<think>" + "why " * 20 + "</think>```python\nclass ModelNew: ...\n```\nFused it."
    path = write_script(tmp_path / "r.jsonl", [{"text": "a"}, {"text": text, "reasoning": "plan"}])
    seen, on_token = collect()
    out = ScriptedBackend(path).generate(["p0", "p1"], on_token=on_token)
    assert out[1].text == text
    assert out[1].reasoning == "plan"
    chunks_for_1 = [s for s in seen if s[0] == 1]
    assert len(chunks_for_1) > 3, "the text should stream in several chunks"
    assert "".join(t for i, ch, t in seen if i == 1 and ch == "reasoning") == "plan" + "why " * 20
    streamed_text = "".join(t for i, ch, t in seen if i == 1 and ch == "text")
    assert streamed_text == "```python\nclass ModelNew: ...\n```\nFused it."
    assert [t for i, ch, t in seen if i == 0] == ["a"]


def test_scripted_cancel_returns_partial(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": "x" * 500}])
    cancel = threading.Event()
    seen: list[str] = []

    def on_token(i, channel, text):
        seen.append(text)
        if len(seen) == 3:
            cancel.set()

    out = ScriptedBackend(path).generate(["p"], on_token=on_token, cancel=cancel)
    assert out[0].cancelled
    assert out[0].text == "".join(seen)
    assert 0 < len(out[0].text) < 500


def test_scripted_running_out_names_file_and_turn(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": "a"}, {"text": "b"}, {"text": "c"}])
    backend = ScriptedBackend(path)
    backend.generate(["p", "q"])
    with pytest.raises(BackendError) as info:
        backend.generate(["p", "q"])
    message = str(info.value)
    assert str(path) in message and "has 3 responses" in message and "turn 2" in message
    assert "lower --turns or add responses" in message
    assert info.value.exit_code == 3


def test_scripted_bad_json_names_file_and_line(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": "a"}], extra_lines=["", "{oops"])
    with pytest.raises(UsageError) as info:
        ScriptedBackend(path)
    assert f"{path}, line 3" in str(info.value)
    assert info.value.exit_code == 2  # bad input, as a bad flag is


def test_scripted_line_without_text_is_rejected(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": "a"}, {"answer": "b"}])
    with pytest.raises(UsageError, match="line 2"):
        ScriptedBackend(path)


def test_scripted_missing_file_is_clear(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        ScriptedBackend(tmp_path / "nope.jsonl")


def test_scripted_count_tokens_is_an_estimate(tmp_path):
    backend = ScriptedBackend(write_script(tmp_path / "r.jsonl", [{"text": "a"}]))
    assert backend.count_tokens("x" * 400) == 100
    assert backend.count_tokens("") == 0


# --- selection ------------------------------------------------------------------------------


def make_backend(config, *, skip=0):
    return build_registry().make_backend(config, skip=skip)


def test_builtin_backends_are_registered_through_the_hooks():
    assert {"scripted", "openai", "vllm"} <= set(build_registry().backends)


def test_unknown_backend_names_the_registered_ones():
    with pytest.raises(ConfigError, match="unknown backend 'nope'") as info:
        make_backend(RunConfig(backend="nope"))
    assert "openai, scripted, vllm" in info.value.hint and info.value.exit_code == 2


def test_make_backend_scripted_with_skip(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": "a"}, {"text": "b"}])
    backend = make_backend(RunConfig(backend="scripted", responses=path), skip=1)
    assert backend.generate(["p"])[0].text == "b"


def test_make_backend_scripted_needs_responses():
    with pytest.raises(ConfigError, match="--responses"):
        make_backend(RunConfig(backend="scripted"))


def test_make_backend_openai_needs_base_url():
    with pytest.raises(ConfigError, match="--base-url") as info:
        make_backend(RunConfig(backend="openai"))
    assert info.value.exit_code == 2


def test_make_backend_uses_plugin_factories(tmp_path):
    path = write_script(tmp_path / "r.jsonl", [{"text": "from plugin"}])

    def plugin_factory(config):  # no skip parameter: plugins need not take one
        return ScriptedBackend(path, model="plugin")

    registry = build_registry()
    registry.backends["mine"] = plugin_factory
    backend = registry.make_backend(RunConfig(backend="mine"), skip=3)
    assert backend.model.startswith("plugin")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_without_vllm_says_how_to_install():
    with pytest.raises(EnvironmentUnavailable) as info:
        make_backend(RunConfig(backend="vllm"))
    text = str(info.value)
    assert "vLLM is not installed" in text
    assert "pip install 'kevin-opt[vllm]'" in text and "--backend openai" in text
    assert info.value.exit_code == 3


def test_vllm_backend_without_gpu_says_so(monkeypatch, tmp_path):
    """With vllm importable but no GPU visible, the refusal names the GPU (exit 3)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    # A stand-in package on sys.path makes `import vllm` succeed; nothing of it is used before
    # the GPU check, which is the behaviour under test.
    fake = tmp_path / "vllm"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvironmentUnavailable, match="needs an NVIDIA GPU") as info:
        make_backend(RunConfig(backend="vllm"))
    assert info.value.exit_code == 3


def test_vllm_engine_args_from_the_environment(monkeypatch):
    """KEVIN_VLLM_ENGINE_ARGS adds EngineArgs fields; unset or blank adds none."""
    from kevin_agent.backends.vllm import extra_engine_args

    monkeypatch.delenv("KEVIN_VLLM_ENGINE_ARGS", raising=False)
    assert extra_engine_args() == {}
    monkeypatch.setenv("KEVIN_VLLM_ENGINE_ARGS", "  ")
    assert extra_engine_args() == {}
    monkeypatch.setenv("KEVIN_VLLM_ENGINE_ARGS",
                       '{"enforce_eager": true, "attention_backend": "TRITON_ATTN"}')
    assert extra_engine_args() == {"enforce_eager": True, "attention_backend": "TRITON_ATTN"}


@pytest.mark.parametrize(("raw", "message"), [
    ("{enforce_eager: true}", "is not valid JSON"),
    ('["enforce_eager"]', "must be a JSON object, not list"),
])
def test_vllm_backend_refuses_malformed_engine_args(monkeypatch, raw, message):
    """A malformed setting stops the run (exit 3) before vLLM or a GPU is looked for."""
    monkeypatch.setenv("KEVIN_VLLM_ENGINE_ARGS", raw)
    with pytest.raises(BackendError, match=message) as info:
        make_backend(RunConfig(backend="vllm"))
    assert "KEVIN_VLLM_ENGINE_ARGS='{\"enforce_eager\": true}'" in info.value.hint
    assert info.value.exit_code == 3
