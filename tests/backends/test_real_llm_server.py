"""The openai backend and the real CLI against a real LLM server.

`transformers serve` (a FastAPI/uvicorn OpenAI-compatible server) serves a tiny random-weight
Qwen2 (Kevin's architecture family) that scripts/make_tiny_qwen2.py builds offline. Whatever
the noise model says, every turn must get its feedback and the run must end with exit code 1.
Install with .ci/requirements-llm.txt.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.backends.openai import OpenAIBackend
from kevin_agent.config import RunConfig

REPO = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location(
    "kevin_test_serverproc", Path(__file__).parents[1] / "servers" / "serverproc.py"
)
serverproc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serverproc)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STATUSES = {"parse_error", "check_failed", "compile_error", "runtime_error", "incorrect", "correct",
            "timeout"}
#: Short answers keep the run quick on two CPU cores; the plumbing is the same at 16K.
MAX_TOKENS = "48"


def _serving_missing() -> str | None:
    for module in ("transformers", "tokenizers", "fastapi", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory):
    missing = _serving_missing()
    if missing:
        message = f"{missing} is not installed: pip install -r .ci/requirements-llm.txt"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    model_dir = tmp_path_factory.mktemp("models") / "tiny-qwen2"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_tiny_qwen2.py"), str(model_dir)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    port = serverproc.free_port()
    # Everything is local: no hub look-ups, no update check against the package index.
    env = {**os.environ, "TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_HUB_DISABLE_UPDATE_CHECK": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    server = serverproc.start_command(cmd, port, timeout_s=240, env=env)
    try:
        yield server, str(model_dir)
    finally:
        server.stop()


def test_backend_streams_from_a_real_llm_server(llm_server):
    server, model = llm_server
    backend = OpenAIBackend(RunConfig(backend="openai", base_url=server.url, model=model,
                                      max_tokens=16, retries=1))
    seen: list[tuple[int, str, str]] = []
    out = backend.generate(["Write a fast kernel.", "Another one."],
                           on_token=lambda *a: seen.append(a))
    backend.close()
    assert len(out) == 2
    for i, generation in enumerate(out):
        assert generation.finish_reason in {"length", "stop"}
        assert generation.text or generation.reasoning, "the server produced no tokens"
        assert any(index == i for index, _, _ in seen), f"prompt {i} did not stream"


def test_wrong_model_name_against_a_real_llm_server(llm_server):
    server, model = llm_server
    backend = OpenAIBackend(RunConfig(backend="openai", base_url=server.url, model="Kevin-32B",
                                      retries=0))
    with pytest.raises(Exception) as info:
        backend.generate(["p"])
    assert "does not serve model 'Kevin-32B'" in str(info.value) and model in str(info.value)


def _kevin_opt() -> list[str]:
    exe = shutil.which("kevin-opt")
    if exe:
        return [exe]
    return [sys.executable, "-c", "import sys; from kevin_agent.cli import main; sys.exit(main())"]


def test_cli_runs_two_turns_against_a_real_llm_server(llm_server, tmp_path):
    server, model = llm_server
    task = tmp_path / "rmsnorm.py"
    shutil.copy(REPO / "examples" / "rmsnorm.py", task)
    out = tmp_path / "out.json"
    env = {**os.environ, "KEVIN_MAX_TOKENS": MAX_TOKENS, "KEVIN_RETRIES": "1"}
    env.pop("KEVIN_API_KEY", None)
    env.pop("OPENAI_API_KEY", None)
    requests_before = sum("/v1/chat/completions" in line for line in server.output)
    proc = subprocess.run(
        [*_kevin_opt(), "run", str(task), "--backend", "openai", "--base-url", server.url,
         "--model", model, "--device", "cpu", "--turns", "2", "--no-commit", "--headless",
         "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    summary = json.loads(out.read_text())
    assert summary["backend"] == "openai" and summary["model"] == model
    assert summary["device"] == "cpu"
    turns = summary["turns"]
    assert [t["turn"] for t in turns] == [1, 2], turns
    for turn in turns:
        assert turn["status"] in STATUSES
        assert turn["status"] != "correct"
        assert isinstance(turn["feedback"], str) and turn["feedback"].strip()
    assert summary["best"] is None
    requests_after = sum("/v1/chat/completions" in line for line in server.output)
    assert requests_after - requests_before == 2, "each turn should have asked the server once"
