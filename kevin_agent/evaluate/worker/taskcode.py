"""The person's task file inside a worker: import it, call its factories, draw inputs.

Everything here runs in a worker process (it imports torch and the task).
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

import torch

from ...task import TensorSpec
from ..jobs import Job
from ..memory import is_out_of_memory

DISTRIBUTIONS = ("as-given", "rescaled")


class TaskProblem(Exception):
    """The task file itself cannot be built."""


def describe(exc: BaseException, *paths: str) -> str:
    """The exception with the last frame that is in one of ``paths`` (the code someone wrote)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in paths]
    where = ""
    if frames:
        f = frames[-1]
        where = f"{Path(f.filename).name}, line {f.lineno}, in {f.name}: {(f.line or '').strip()}\n"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return (where + text)[:3000]


def import_file(path: str, name: str):
    """Import the person's (or a candidate's) file, and whatever of theirs it imports, writing no
    bytecode beside it: their folders stay as they were. torch's own modules, imported lazily
    elsewhere in the worker, do cache theirs, so that the next worker does not compile them again."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


def import_task(job: Job):
    sys.path.insert(0, str(Path(job.task_path).parent))
    try:
        module = import_file(job.task_path, "kevin_task")
    except Exception as exc:
        raise TaskProblem(f"importing the task failed: {describe(exc, job.task_path)}") from None
    missing = [n for n in (job.class_name, "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise TaskProblem(f"the module defines no {', '.join(missing)}")
    return module


def _raise_if_out_of_memory(exc: Exception) -> None:
    """Out of memory is not the task file's fault to fix: the worker says how much memory the task
    needs, or whose the failure is when a candidate was running."""
    if is_out_of_memory(str(exc), type(exc).__name__):
        raise exc


def call_factory(module, name: str, job: Job) -> list:
    return _listed(lambda: getattr(module, name)(), f"{name}()", job)


def _listed(factory, what: str, job: Job) -> list:
    """What the task's ``factory()`` returns, as a list; a ``TaskProblem`` naming ``what`` when it
    raises or returns anything else."""
    try:
        values = factory()
    except Exception as exc:
        _raise_if_out_of_memory(exc)
        raise TaskProblem(f"{what} raised {describe(exc, job.task_path)}") from None
    if not isinstance(values, (list, tuple)):
        raise TaskProblem(f"{what} must return a list, got {type(values).__name__}")
    return list(values)


def to_device(value, device: str, *, copy: bool = False):
    """``value`` with every tensor in it (lists and tuples followed) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=copy)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device, copy=copy) for v in value)
    return value


def signature_factories(module, job: Job) -> list[tuple[int, object]]:
    """The task's input signatures, most frequent first, as (count, factory) pairs: what
    ``get_input_signatures()`` returns (an extracted task names every signature its model used); []
    for a task that defines none. The first is the headline's, the one ``get_inputs()`` draws."""
    named = getattr(module, "get_input_signatures", None)
    if named is None:
        return []
    try:
        pairs = list(named())
    except Exception as exc:
        _raise_if_out_of_memory(exc)
        raise TaskProblem(f"get_input_signatures() raised {describe(exc, job.task_path)}") from None
    for i, pair in enumerate(pairs):
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], int) and pair[0] > 0
        if not ok or not callable(pair[1]):
            raise TaskProblem(f"get_input_signatures() item {i} must be (count, factory): a positive int and "
                              f"a function returning that signature's inputs, got {pair!r:.100}")
    return [(count, factory) for count, factory in pairs]


def make_inputs(module, job: Job, seed: int, distribution: str, on: str = "cpu", signature: int = 0) -> list:
    """The set drawn under ``seed``, with ``get_inputs()`` run where ``on`` says: on the evaluation
    device (torch's default device for the call, so its factories draw there, in a fraction of a
    millisecond where the host takes seconds for gigabytes) or on the host (``cpu``), as the
    KernelBench convention writes it. A tensor the task puts on a device of its own stays there;
    callers move the set to the device."""
    torch.manual_seed(seed)
    scale = 1.0
    if distribution == "rescaled":
        gen = torch.Generator().manual_seed(seed)
        scale = 2.0 ** (4.0 * float(torch.rand(1, generator=gen)) - 2.0)
    draw = (lambda: call_factory(module, "get_inputs", job)) if signature == 0 else (
        lambda: _signature_inputs(module, job, signature))
    if on == "cpu":
        values = draw()
    else:
        with torch.device(on):
            values = draw()
    if distribution == "rescaled":
        _rescale(values, scale)
    return values


def _rescale(values: list, scale: float) -> None:
    """Every floating tensor of ``values`` times ``scale``: in place where nothing but the list
    holds it (a copy beside it would hold a multi-gigabyte input twice for a moment); a new tensor
    where anything else might see the change (a view of it or of something else, a tensor the task
    keeps, one that appears twice), bitwise the same either way."""
    for i in range(len(values)):  # not enumerate(): its tuple would hold one more reference
        v = values[i]
        if not (isinstance(v, torch.Tensor) and v.is_floating_point()):
            continue
        # References: the list, ``v`` and getrefcount's own argument.
        alone = v._base is None and not v.requires_grad and sys.getrefcount(v) <= 3
        if alone:
            with torch.no_grad():
                v.mul_(scale)
        else:
            values[i] = v * scale


def _signature_inputs(module, job: Job, signature: int) -> list:
    """The inputs at input signature ``signature`` (its factory's)."""
    factories = signature_factories(module, job)
    if signature >= len(factories):
        raise TaskProblem(f"get_input_signatures() names {len(factories)} signatures; there is no {signature}")
    return _listed(factories[signature][1], f"the factory of input signature {signature}", job)


def describe_inputs(values) -> list[str]:
    """Each input's dtype and shape, with its strides where not contiguous (``float32[64, 512]``)."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            text = f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
            out.append(text if v.is_contiguous() else f"{text} strides {list(v.stride())}")
        else:
            out.append(repr(v)[:60])
    return out


def build_reference(module, job: Job) -> torch.nn.Module:
    """The task's model, built under the run's seed (``ModelNew`` is built under it too)."""
    init = call_factory(module, "get_init_inputs", job)
    torch.manual_seed(job.settings.seed)
    try:
        return getattr(module, job.class_name)(*init).to(job.settings.device)
    except Exception as exc:
        _raise_if_out_of_memory(exc)
        raise TaskProblem(f"building {job.class_name} failed: {describe(exc, job.task_path)}") from None


def spec(value) -> TensorSpec | str:
    if isinstance(value, torch.Tensor):
        return TensorSpec(shape=list(value.shape), dtype=str(value.dtype).removeprefix("torch."))
    return repr(value)[:200]
