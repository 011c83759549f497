"""The build cache: one folder per candidate source and toolchain.

The key is the sha256 of the source, the torch version, the compiler version(s), the device,
(on cuda) the target architectures and the build path (``build.py``), so the same candidate
compiles once per toolchain and a toolchain upgrade rebuilds. A folder is a cache hit once a successful build left its marker.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path

MARKER = "kevin-build.json"
FAST_PATH_VERSION = 2
"""Changes whenever the fast path changes what a build reads: how ``build`` sets a call up, and what
``light`` generates (part of the build cache key, so fast builds made otherwise are not reused)."""


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[0] if cmd[-1] != "--version" or "nvcc" not in cmd[0] else (lines[-1] if lines else "")


def torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return ""


@lru_cache(maxsize=1)
def torch_cuda_version() -> str | None:
    """``torch.version.cuda`` read from the installed file, without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "version.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(node.value, ast.Constant):
            return node.value.value
    return None


def cuda_home() -> str | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and Path(candidate, "bin", "nvcc").exists():
            return candidate
    nvcc = shutil.which("nvcc")
    return str(Path(nvcc).resolve().parent.parent) if nvcc else None


@lru_cache(maxsize=4)
def toolchain(device: str) -> dict[str, str]:
    """Versions that decide whether a build can be reused (and that run.json records)."""
    cxx = os.environ.get("CXX", "c++")
    out = {"torch": torch_version(), "compiler": _first_line([cxx, "--version"])}
    if device == "cpu":
        # Kernels may build with -march=native: a build is only good for the CPU it was made on.
        out["cpu"] = cpu_model()
    if device == "cuda":
        home = cuda_home()
        if home:
            out["nvcc"] = _first_line([str(Path(home, "bin", "nvcc")), "--version"])
        smi = _first_line(["nvidia-smi", "--query-gpu=driver_version,compute_cap", "--format=csv,noheader"])
        if smi:
            driver, _, cap = smi.partition(",")
            out["driver"] = driver.strip()
            out["arch"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or cap.strip()
    return out


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it ('' when unknown)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    """The CPU's name and a digest of its feature flags (what -march=native depends on)."""
    name, flags = os.uname().machine, ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name == os.uname().machine:
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = hashlib.sha256(value.strip().encode()).hexdigest()[:12]
    except OSError:
        pass
    return f"{name} [{flags}]" if flags else name


def build_key(source: str, device: str, fast: bool = True) -> str:
    """Covers the source, the toolchain and the build path: a fast build (precompiled
    bindings header, light CUDA headers of that version) and a plain one are kept apart."""
    h = hashlib.sha256(source.encode())
    path = {"fast": FAST_PATH_VERSION} if fast else {"plain": 1}
    h.update(json.dumps({"device": device, **toolchain(device), "build": path}, sort_keys=True).encode())
    return h.hexdigest()[:24]


def toolchain_env(device: str) -> dict[str, str]:
    """Environment a build needs besides the scrubbed one: where CUDA is, and an explicit
    architecture list, which keeps load_inline from opening a CUDA context to ask the GPU."""
    out: dict[str, str] = {}
    if device == "cuda":
        home = cuda_home()
        if home:
            out["CUDA_HOME"] = home
        arch = toolchain("cuda").get("arch")
        if arch:
            out["TORCH_CUDA_ARCH_LIST"] = arch
    return out


def build_paths(folder: Path) -> list[dict]:
    """How each load_inline call of the build in ``folder`` was built (see ``build.py``)."""
    path = folder / "kevin-build-paths.jsonl"
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def is_built(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def mark_built(folder: Path, compile_s: float) -> None:
    (folder / MARKER).write_text(json.dumps({"compile_s": compile_s, "built_at": time.time()}))


def up_to_date(folder: Path) -> bool:
    """Whether ninja, as a worker would run it, has nothing to rebuild in ``folder``'s extensions.

    A build can go stale behind the cache's back (another ninja's log, a header touched by a
    system update); the rebuild then belongs in a build, not in the worker that loads it."""
    ninja = shutil.which("ninja")
    if ninja is None:
        return True
    for build_file in folder.glob("*/build.ninja"):
        try:
            out = subprocess.run([ninja, "-n", "-C", str(build_file.parent)], capture_output=True, text=True,
                                 timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return False
        if out.returncode != 0 or "no work to do" not in out.stdout:
            return False
    return True


class GaveUpWaiting(Exception):
    """``locked``'s ``give_up`` said so before the folder's maker was done."""


@contextlib.contextmanager
def locked(folder: Path, give_up: Callable[[], bool] | None = None) -> Iterator[None]:
    """One maker per folder, across processes (two runs, a bench's tasks, a test suite's workers on one
    cache): the others wait and then find it made. The kernel drops the lock with its process, so a
    killed maker never leaves the folder locked; the file is not ``lock``, which ``clear_locks`` clears.
    A waiter whose ``give_up`` turns true (its run was stopped) raises ``GaveUpWaiting`` instead of
    waiting out another process's build."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (fcntl.LOCK_NB if give_up is not None else 0))
                break
            except BlockingIOError:
                if give_up():
                    raise GaveUpWaiting(str(folder)) from None
                time.sleep(0.1)
        yield


def clear_locks(folder: Path) -> None:
    """Remove the build locks a killed compiler left behind; the next build would wait forever."""
    for lock in folder.rglob("lock"):
        lock.unlink(missing_ok=True)
