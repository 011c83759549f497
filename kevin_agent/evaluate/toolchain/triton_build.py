"""A Triton candidate's "build", from the parent's side: no compiler runs here.

Triton compiles a ``@triton.jit`` kernel when it is first launched, for the argument types and
constants of that launch; so the build stage only writes the source as a module into the build
cache (its folder keyed by the source, Triton's version and the device), and the compile is the
candidate's first call on the task's inputs inside the run worker, a stage of its own with its own
limit (``worker.first_call``). Triton's compiled kernels go to kevin-opt's cache
(``TRITON_CACHE_DIR`` under the build cache), as the CUDA builds do; on the cpu device the workers
run the kernels in Triton's interpreter (``TRITON_INTERPRET=1``). Nothing here imports torch or
triton.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path

from .cache import torch_version

CACHE_FOLDER = "triton"
"""Under the build cache: Triton's own cache of compiled kernels."""
BUILD_NOTE = ("[kevin-opt build] triton: the source is written as a module; Triton compiles each kernel "
              "at its first launch, the candidate's first call in the run worker (the compile stage)")


def triton_version() -> str | None:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def build_key(source: str, device: str) -> str:
    """The build folder's name: the source, Triton's and torch's versions, and the device (the
    interpreter on cpu); never the same as a CUDA build's key."""
    h = hashlib.sha256(source.encode())
    h.update(json.dumps({"language": "triton", "device": device, "triton": triton_version(),
                         "torch": torch_version()}, sort_keys=True).encode())
    return "triton-" + h.hexdigest()[:24]


def worker_env(cache_dir: Path, device: str) -> dict[str, str]:
    """What a worker that runs Triton candidates needs in its environment."""
    env = {"TRITON_CACHE_DIR": str(cache_dir / CACHE_FOLDER)}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def write_module(folder: Path, source: str) -> bool:
    """Write ``source`` as ``folder/candidate.py``; whether the same source was there already."""
    folder.mkdir(parents=True, exist_ok=True)
    candidate = folder / "candidate.py"
    same = candidate.is_file() and candidate.read_text(encoding="utf-8") == source
    if not same:
        candidate.write_text(source, encoding="utf-8")
    return same
