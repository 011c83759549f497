from __future__ import annotations

import pytest

from kevin_agent.config import load_config
from kevin_agent.errors import ConfigError


def test_defaults_follow_the_paper():
    cfg = load_config({})
    assert (cfg.turns, cfg.temperature, cfg.max_tokens) == (8, 0.9, 16384)
    assert cfg.trajectories is None, "chosen per run from what the backend serves without preemption"
    assert cfg.backend == "vllm" and cfg.model == "cognition-ai/Kevin-32B"


def test_flags_beat_env_beat_pyproject(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.kevin]\nturns = 3\ntrajectories = 2\nmin-speedup = 1.5\n")
    cfg = load_config({}, project_dir=tmp_path)
    assert (cfg.turns, cfg.trajectories, cfg.min_speedup) == (3, 2, 1.5)
    monkeypatch.setenv("KEVIN_TURNS", "5")
    cfg = load_config({}, project_dir=tmp_path)
    assert (cfg.turns, cfg.trajectories) == (5, 2)
    cfg = load_config({"turns": 7}, project_dir=tmp_path)
    assert cfg.turns == 7


def test_api_key_from_either_variable_and_never_recorded(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    cfg = load_config({})
    assert cfg.api_key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in str(cfg.public_dict())
    monkeypatch.setenv("KEVIN_API_KEY", "kv-secret")
    assert load_config({}).api_key.get_secret_value() == "kv-secret"


def test_bad_values_name_the_field(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="turns"):
        load_config({"turns": 0})
    monkeypatch.setenv("KEVIN_TEMPERATURE", "hot")
    with pytest.raises(ConfigError, match="temperature"):
        load_config({})


def test_broken_pyproject_is_a_clear_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.kevin\nturns = 3\n")
    with pytest.raises(ConfigError, match="pyproject.toml"):
        load_config({}, project_dir=tmp_path)
