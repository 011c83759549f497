"""Shared fixtures. GPU tests are skipped where no GPU is present; builds are cached across the
session in one folder so each distinct kernel compiles once per test run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
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


from .xdist_timing import (  # noqa: E402, F401  (a timing test runs alone)
    pytest_configure_node, pytest_runtest_protocol, pytest_unconfigure)
from .gpufixtures import add_task, gpu_builds, tricks_dir  # noqa: E402, F401  (shared by every GPU module)


def _children_running() -> list[str]:
    """This process's child processes that are still running (zombies are not), as ``pid command``."""
    me, found = str(os.getpid()), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, _, rest = text.rpartition(")")
        fields = rest.split()
        if len(fields) > 1 and fields[1] == me and fields[0] not in ("Z", "X"):
            found.append(f"{stat.parent.name} {name.partition('(')[2]}")
    return found


@pytest.fixture(autouse=True)
def _gpu_memory_given_back(request):
    """After a GPU test that used the GPU in this process, the memory its allocator keeps is given
    back: the evaluators after it plan from what the device has free."""
    yield
    if "gpu" not in request.keywords:
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


@pytest.fixture(scope="module", autouse=True)
def _gpu_module_leaves_no_process(request):
    """Once a module of GPU tests is done (its evaluators closed), nothing it started may still run:
    a warm worker holds a CUDA context and the task's data, a spinning kernel holds the device, and
    the tests after it would fail for it in one ordered pass. Waited for (workers end in the
    background), then killed and reported."""
    yield
    if not HAS_GPU or not any(item.get_closest_marker("gpu") for item in request.session.items
                              if getattr(item, "module", None) is request.module):
        return
    deadline = time.monotonic() + 30
    while (left := _children_running()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for entry in left:
        try:
            os.kill(int(entry.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"{request.module.__name__} left processes running: {left}"


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
