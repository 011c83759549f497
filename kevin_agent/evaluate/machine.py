"""What this machine offers the evaluator: the device, its name, how many workers fit at once.
Asked of ``nvidia-smi``, never of torch (the tool's process does not import it)."""

from __future__ import annotations

import os
import subprocess
from typing import Literal

from . import cache


def detect_device() -> Literal["cuda", "cpu"]:
    """cuda when torch was built with CUDA and ``nvidia-smi`` lists a GPU; no CUDA context is made."""
    if not cache.torch_cuda_version():
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    return "cuda" if out.returncode == 0 and "GPU" in out.stdout else "cpu"


def host_device_name(device: str) -> str:
    """The device's name without starting a worker (the probe refines it)."""
    if device == "cuda":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=False)
            return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
        except (OSError, subprocess.SubprocessError):
            return ""
    return cache.cpu_name()


def default_eval_workers(device: str) -> int:
    """Run workers alive at once (waiting or busy, each as many again): a few, by cores."""
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def gpu_free_bytes() -> int | None:
    """Free memory of the evaluation GPU, from nvidia-smi (None when unknown)."""
    # The evaluation GPU is the first one the workers see.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    query = ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"]
    if visible.isdigit():
        query.insert(1, f"--id={visible}")
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=False)
        return int(out.stdout.split()[0]) << 20 if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
