"""What this machine offers the evaluator: the device, its name, its facts, how many workers fit.

Asked of NVML (``nvidia-ml-py``: the driver's management library, through ctypes), or of
``nvidia-smi`` where the library cannot be loaded; never of torch (the tool's process does not
import it, and a CUDA context here would stop vLLM from forking its engine).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import Literal

from ...results.device import DeviceFacts, sm_count_from_cores
from ..toolchain import cache


def detect_device() -> Literal["cuda", "cpu"]:
    """cuda when torch was built with CUDA and the driver lists a GPU; no CUDA context is made."""
    if not cache.torch_cuda_version():
        return "cpu"
    with _nvml() as nvml:
        if nvml is not None:
            return "cuda" if _quiet(nvml.nvmlDeviceGetCount) else "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    return "cuda" if out.returncode == 0 and "GPU" in out.stdout else "cpu"


@contextlib.contextmanager
def _nvml() -> Iterator[object | None]:
    """The ``pynvml`` module, initialised for the block; None without the package or the driver."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver library, no device, a driver too old: NVML is not there
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _quiet(call, *args):
    """``call(*args)``, or None where the driver cannot say (not supported, no permission)."""
    try:
        return call(*args)
    except Exception:
        return None


def _which(gpu: str | None) -> str:
    """The evaluation GPU as the workers' CUDA_VISIBLE_DEVICES names it (None: the first this process sees)."""
    return gpu if gpu is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()


def _handle(nvml, gpu: str | None):
    which = _which(gpu)
    if which.startswith(("GPU-", "MIG-")):
        return _quiet(nvml.nvmlDeviceGetHandleByUUID, which)
    return _quiet(nvml.nvmlDeviceGetHandleByIndex, int(which) if which.isdigit() else 0)


def read_facts(nvml, handle) -> DeviceFacts | None:
    """A device's facts from an initialised NVML: its name, memory, highest clocks, memory bus,
    SMs and compute capability (each None where the driver does not say)."""
    name = _quiet(nvml.nvmlDeviceGetName, handle)
    if not name:
        return None
    memory = _quiet(nvml.nvmlDeviceGetMemoryInfo, handle)
    capability = _quiet(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    cc = f"{capability[0]}.{capability[1]}" if capability else ""
    attributes = _quiet(nvml.nvmlDeviceGetAttributes_v2, handle)
    sms = getattr(attributes, "multiprocessorCount", 0) or None
    if sms is None and (cores := _quiet(nvml.nvmlDeviceGetNumGpuCores, handle)):
        sms = sm_count_from_cores(cores, cc)
    return DeviceFacts(name=name.decode() if isinstance(name, bytes) else str(name),
                       memory_total_bytes=getattr(memory, "total", None),
                       memory_clock_mhz=_quiet(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM) or None,
                       memory_bus_bits=_quiet(nvml.nvmlDeviceGetMemoryBusWidth, handle) or None,
                       sm_clock_mhz=_quiet(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM) or None,
                       sm_count=sms, compute_capability=cc, source="nvml")


_SMI_FIELDS = "name,memory.total,clocks.max.memory,clocks.max.sm,compute_cap"


def parse_smi_facts(line: str) -> DeviceFacts | None:
    """``nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,clocks.max.sm,compute_cap
    --format=csv,noheader,nounits``'s line (it has no bus width and no SM count)."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != 5 or not cells[0]:
        return None

    def number(text: str) -> int | None:
        return int(float(text)) if text.replace(".", "", 1).isdigit() else None

    mib = number(cells[1])
    return DeviceFacts(name=cells[0], memory_total_bytes=mib << 20 if mib is not None else None,
                       memory_clock_mhz=number(cells[2]), sm_clock_mhz=number(cells[3]),
                       compute_capability=cells[4] if cells[4][:1].isdigit() else "", source="nvidia-smi")


def device_facts(gpu: str | None = None) -> DeviceFacts | None:
    """The evaluation GPU as its driver describes it: from NVML, else from nvidia-smi, else None
    (no NVIDIA driver here)."""
    with _nvml() as nvml:
        if nvml is not None and (handle := _handle(nvml, gpu)) is not None:
            if (facts := read_facts(nvml, handle)) is not None:
                return facts
    return parse_smi_facts(_nvidia_smi(_SMI_FIELDS, gpu))


def _nvidia_smi(fields: str, gpu: str | None) -> str:
    """Fields of the evaluation GPU, '' when nvidia-smi cannot say."""
    which = _which(gpu)
    query = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
    if which and which.isdigit():
        query.insert(1, f"--id={which}")
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else ""


def host_device_name(device: str, gpu: str | None = None) -> str:
    """The device's name without starting a worker (the probe refines it)."""
    if device != "cuda":
        return cache.cpu_name()
    with _nvml() as nvml:
        if nvml is not None and (handle := _handle(nvml, gpu)) is not None:
            if name := _quiet(nvml.nvmlDeviceGetName, handle):
                return name.decode() if isinstance(name, bytes) else str(name)
    return _nvidia_smi("name", gpu)


def default_eval_workers(device: str) -> int:
    """Workers kept ready or getting ready (as many again may be busy with a candidate): a few, by cores."""
    return max(1, min(8, (os.cpu_count() or 1) // 2))


def gpu_free_bytes(gpu: str | None = None) -> int | None:
    """Free memory of the evaluation GPU in bytes (None when unknown)."""
    with _nvml() as nvml:
        if nvml is not None and (handle := _handle(nvml, gpu)) is not None:
            if (memory := _quiet(nvml.nvmlDeviceGetMemoryInfo, handle)) is not None:
                return int(memory.free)
    free = _nvidia_smi("memory.free", gpu)
    return int(free) << 20 if free.isdigit() else None
