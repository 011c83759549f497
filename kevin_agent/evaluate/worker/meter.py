"""Device memory as a worker sees it: what is left, what an evaluation used at its peak, and the
verdict on an out-of-memory error (``memory`` holds the rules, this feeds them the numbers)."""

from __future__ import annotations

import traceback
from pathlib import Path

import torch

from ...config import EvalSettings
from ...formatting import gib
from ...results import MemoryUse
from .. import memory
from .correctness import nbytes_of
from ..memory import Footprint
from .taskcode import to_device


def _kib_fields(path: str, *keys: str) -> tuple[int, ...]:
    """The named fields (in kB) of a /proc file, in bytes (all 0 when it cannot be read)."""
    values = {}
    try:
        for line in Path(path).read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in keys:
                values[key] = int(rest.split()[0]) << 10
    except (OSError, ValueError, IndexError):
        return (0,) * len(keys)
    return tuple(values.get(k, 0) for k in keys)


def host_memory() -> tuple[int, int]:
    """(available, total) host memory in bytes (0, 0 when unknown)."""
    return _kib_fields("/proc/meminfo", "MemAvailable", "MemTotal")


def device_memory(device: str) -> tuple[int, int]:
    """(free, total) memory of the device the kernels run on."""
    if device == "cuda":
        return torch.cuda.mem_get_info()
    return host_memory()


def room(device: str) -> int | None:
    """What the next allocation could get: free on the device, and what the allocator holds unused
    (None on cpu, where no allocator says)."""
    if device != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()


def release(device: str) -> None:
    """Give the allocator's unused blocks back to the device (between the probe's steps, and
    before a worker waits for its candidate: a waiting worker holds nothing but its context)."""
    if device == "cuda":
        torch.cuda.empty_cache()


_host_base = [0]
"""cpu: the process's resident memory when the evaluation started."""


def _resident() -> tuple[int, ...]:
    """(resident now, its high-water mark) of this process in bytes (0, 0 when unknown)."""
    return _kib_fields("/proc/self/status", "VmRSS", "VmHWM")


def start(device: str) -> None:
    """The evaluation's peak is counted from here."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return
    try:  # "5" resets the high-water mark to what is resident now (Linux 4.0+)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    _host_base[0] = _resident()[0]


def use(device: str, fp: Footprint | None) -> MemoryUse | None:
    """The evaluation's peak so far, against the task's footprint. cuda: what the allocator held;
    cpu: how far the process's resident memory rose above where it started (tensors, the
    candidate's library, the harness's buffers)."""
    if fp is None:
        return None
    if device == "cuda":
        return MemoryUse(peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                         peak_reserved_bytes=torch.cuda.max_memory_reserved(), footprint_bytes=fp.total,
                         planned_bytes=memory.planned(fp), measured="cuda allocator")
    _, high = _resident()
    if not high:
        return None
    rise = max(high - _host_base[0], 0)
    return MemoryUse(peak_allocated_bytes=rise, peak_reserved_bytes=rise, footprint_bytes=fp.total,
                     planned_bytes=memory.planned(fp), measured="host resident memory")


def measure_forward(model, inputs: list, device: str) -> tuple[object, Footprint]:
    """Run ``model`` once on a device copy of ``inputs`` and measure the task's footprint: the
    reference's parameters, the inputs, and its forward's peak beyond them (cpu: how far the
    process's resident memory rose while it ran)."""
    params = nbytes_of([*model.parameters(), *model.buffers()])
    on_device = to_device(inputs, device)  # drawn there already, as a rule: no second copy
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        start(device)
        before = _host_base[0]
    with torch.no_grad():
        out = model(*on_device)
    outputs = nbytes_of([out])
    # cpu: the rise of resident memory (its temporaries included), at least the outputs
    peak = torch.cuda.max_memory_allocated() - before if device == "cuda" else max(_resident()[1] - before, outputs)
    return out, Footprint(param_bytes=params, input_bytes=nbytes_of(inputs), output_bytes=outputs, peak_bytes=peak)


def fit_problem(fp: Footprint, settings: EvalSettings, device_name: str) -> tuple[str, str, str] | None:
    """``memory.fit_problem`` with this device's numbers and the run's settings."""
    free, total = device_memory(settings.device)
    if not total:
        return None
    return memory.fit_problem(fp, free=free, total=total, device_name=device_name or settings.device,
                              model_fraction=settings.model_memory_fraction, limit=_limit(settings))


def capacity(settings: EvalSettings) -> int:
    """What the evaluation may use of the device, measured now (``memory.capacity``)."""
    free, total = device_memory(settings.device)
    return memory.capacity(free, total, model_fraction=settings.model_memory_fraction, limit=_limit(settings))


def _limit(settings: EvalSettings) -> int | None:
    return int(settings.eval_memory_gib * memory.GiB) if settings.eval_memory_gib is not None else None


def is_oom(exc: BaseException) -> bool:
    return memory.is_out_of_memory(str(exc), type(exc).__name__)


def raised_in(exc: BaseException, path: str) -> bool:
    """Whether code in file ``path`` was running when ``exc`` was raised (a frame of it is in the traceback)."""
    return bool(path) and any(f.filename == path for f in traceback.extract_tb(exc.__traceback__))


def oom_fault(exc: BaseException, device: str, fp: Footprint | None, candidate_path: str) -> str:
    """``candidate`` or ``harness`` (``memory.oom_fault``), for an out-of-memory error caught while
    a candidate was evaluated. The frames the traceback keeps alive are cleared first: what they
    held is not the candidate's."""
    in_candidate = raised_in(exc, candidate_path)
    traceback.clear_frames(exc.__traceback__)
    if device != "cuda" or fp is None:
        return memory.oom_fault(in_candidate=in_candidate)
    try:
        demand = torch.cuda.max_memory_allocated() + memory.requested_bytes(str(exc))
        left = room(device)
    except RuntimeError:  # the device cannot even say: nothing points at the candidate
        return memory.oom_fault(in_candidate=in_candidate)
    return memory.oom_fault(in_candidate=in_candidate, demand=demand, planned_bytes=memory.planned(fp),
                            room=left, entitled_bytes=memory.entitled(fp))


def candidate_note(fp: Footprint | None) -> str:
    """What the model is told, after its own out-of-memory error, about the room it had."""
    if fp is None:
        return ""
    return (f"\nThe task's inputs take {gib(fp.input_bytes)} and its outputs {gib(fp.output_bytes)}; a kernel "
            f"may allocate about {gib(memory.entitled(fp))} beyond its inputs.")


def harness_note(exc: BaseException, device: str, fp: Footprint | None, where: str) -> str:
    """Why the harness itself ran out of memory, in numbers, for the person."""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    text = f"the evaluation ran out of device memory {where} ({first[:300]})"
    if fp is not None:
        text += (f"; the task needs {gib(fp.total)} (inputs, the reference's outputs and peak) and one "
                 f"evaluation was planned at {gib(memory.planned(fp))}")
    if device == "cuda":
        try:
            free, total = torch.cuda.mem_get_info()
            text += f"; {gib(free)} of {gib(total)} are free on the device now"
        except RuntimeError:
            pass
    return text
