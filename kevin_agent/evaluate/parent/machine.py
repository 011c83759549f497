"""What this machine offers the evaluator: the device, its name, how many workers fit at once.
Asked of ``nvidia-smi``, never of torch (the tool's process does not import it)."""

from __future__ import annotations

import os
import subprocess
from typing import Literal

from ..toolchain import cache


def detect_device() -> Literal["cuda", "cpu"]:
    """cuda when torch was built with CUDA and ``nvidia-smi`` lists a GPU; no CUDA context is made."""
    if not cache.torch_cuda_version():
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    return "cuda" if out.returncode == 0 and "GPU" in out.stdout else "cpu"


def _nvidia_smi(field: str, gpu: str | None) -> str:
    """One field of the evaluation GPU (``gpu``: what the workers' CUDA_VISIBLE_DEVICES names,
    None: the first GPU this process sees), '' when nvidia-smi cannot say."""
    gpu = gpu if gpu is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    query = ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"]
    if gpu and gpu.isdigit():
        query.insert(1, f"--id={gpu}")
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else ""


def host_device_name(device: str, gpu: str | None = None) -> str:
    """The device's name without starting a worker (the probe refines it)."""
    return _nvidia_smi("name", gpu) if device == "cuda" else cache.cpu_name()


def default_eval_workers(device: str) -> int:
    """Workers kept ready or getting ready (as many again may be busy with a candidate): a few, by cores."""
    return max(1, min(8, (os.cpu_count() or 1) // 2))


def gpu_free_bytes(gpu: str | None = None) -> int | None:
    """Free memory of the evaluation GPU in bytes (None when unknown)."""
    free = _nvidia_smi("memory.free", gpu)
    return int(free) << 20 if free.isdigit() else None
