"""Shared fixtures. GPU tests are skipped where no GPU is present; builds are cached across the
session in one folder so each distinct kernel compiles once per test run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (scripts/gpu-check runs these on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory) -> Path:
    """One build cache for the whole session (KEVIN_CACHE_DIR wins so CI can keep it warm)."""
    path = Path(os.environ.get("KEVIN_CACHE_DIR") or tmp_path_factory.mktemp("kevin-builds"))
    path.mkdir(parents=True, exist_ok=True)
    os.environ["KEVIN_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(autouse=True)
def _isolate_env(monkeypatch):
    # Never let the developer's own configuration leak into tests.
    for key in list(os.environ):
        if key.startswith("KEVIN_") and key != "KEVIN_CACHE_DIR":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("CI", "true")


def git_init(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "config", "user.name", "Test Person"], check=True)
    subprocess.run(["git", "-C", str(path), "config", "user.email", "test@example.com"], check=True)
    subprocess.run(["git", "-C", str(path), "config", "commit.gpgsign", "false"], check=True)
    return path
