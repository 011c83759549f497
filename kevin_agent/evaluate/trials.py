"""The reference data inside a worker (``reference`` says what it is and where it lives).

``make`` (in the probe worker) draws every set of inputs from its seed, runs the reference on
it once under the conditions of a correctness trial (poisoned memory, no TF32), times the
reference, and stores it all. ``Trials.load`` (in every run worker, before its candidate
arrives) reads it back and draws again the inputs too large to store, checking every set
against the checksum stored with the reference's answer: an answer is only ever compared with
an output computed from bitwise the same inputs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import time
from pathlib import Path

import torch

from ..results import TimingStats
from .correctness import clone_all, leaves, nbytes_of, poisoned_memory, sync
from .jobs import Job
from .reference import INPUTS, META, OUTPUTS, STORE_INPUTS_BYTES, InputSet, ReferenceData, input_plan, read
from .taskcode import TaskProblem, describe, make_inputs, to_device
from .timing import Timer


def checksum(values) -> str:
    """sha256 over the bytes of every tensor (with its dtype and shape) and the repr of the rest."""
    h = hashlib.sha256()
    for _, v in leaves(list(values)):
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous().cpu()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            n = t.numel() * t.element_size()
            if n:
                h.update((ctypes.c_char * n).from_address(t.data_ptr()))
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


def draw_set(job: Job, task, ref: torch.nn.Module, name: str, seed: int, distribution: str,
             answered: bool) -> tuple[InputSet, list, object | None]:
    """One set of inputs drawn from its seed, what it is, and (when ``answered``) the reference's
    answer to it on the CPU, computed as in a correctness trial (poisoned memory)."""
    device = job.settings.device
    values = make_inputs(task, job, seed, distribution)
    entry = InputSet(name=name, seed=seed, distribution=distribution, checksum=checksum(values),
                     nbytes=nbytes_of(values), expected=answered)
    answer = None
    if answered:
        with poisoned_memory(device), torch.no_grad():
            out = ref(*clone_all(values))
            sync(device)
        answer = to_device(out, "cpu", copy=True)
    return entry, values, answer


def make(job: Job, task, ref: torch.nn.Module, request_timing) -> ReferenceData:
    """Draw, answer, time and store; ``request_timing()`` returns once the device is ours alone."""
    s, device = job.settings, job.settings.device
    plan = input_plan(s)
    name0, seed0, dist0, _ = plan[0]
    # Inputs drawn again must come out the same, or each worker's copy must come from disk.
    deterministic = checksum(make_inputs(task, job, seed0, dist0)) == checksum(make_inputs(task, job, seed0, dist0))
    sets, inputs, outputs, total = [], {}, {}, 0
    for name, seed, dist, answered in plan:
        entry, values, answer = draw_set(job, task, ref, name, seed, dist, answered)
        sets.append(entry)
        total += entry.nbytes
        if answer is not None:
            outputs[name] = answer
        if name == "timing":
            timing_inputs = values
        if inputs is not None:
            inputs[name] = to_device(values, "cpu", copy=True)
            if deterministic and total > STORE_INPUTS_BYTES:
                inputs = None  # drawn again by each worker, cheaper than gigabytes on disk

    request_timing()
    timer = Timer(device)
    start = time.perf_counter()
    eager = timer.time(ref, clone_all(timing_inputs), warmup=s.warmup_runs, runs=s.timed_runs)
    call_s = (time.perf_counter() - start) / (s.warmup_runs + s.timed_runs)
    compiled, compile_error = None, ""
    if s.compare_compile:
        try:
            compiled = timer.time(torch.compile(ref), clone_all(timing_inputs), warmup=max(s.warmup_runs, 1),
                                  runs=s.timed_runs)
        except Exception as exc:
            compile_error = describe(exc)[:300]
    bandwidth = timer.bandwidth_bytes_per_ms()

    folder = Path(job.reference_dir)
    torch.save(outputs, folder / OUTPUTS)
    if inputs is not None:
        torch.save(inputs, folder / INPUTS)
    for path in (folder / OUTPUTS, *([folder / INPUTS] if inputs is not None else [])):
        try:
            torch.load(path, mmap=True, weights_only=True)
        except Exception as exc:
            raise TaskProblem(f"the reference's answers cannot be stored and read back: {describe(exc)}") from None
    data = ReferenceData(key=folder.name, sets=sets, inputs_stored=inputs is not None, eager=eager,
                         call_s=call_s, compiled=compiled, compile_error=compile_error,
                         bandwidth_bytes_per_ms=bandwidth, output_bytes=nbytes_of(list(outputs.values())),
                         created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    tmp = folder / (META + ".tmp")
    tmp.write_text(data.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, folder / META)
    return data


class Trials:
    """The reference data one run worker checks its candidate against. Every call hands out
    fresh copies on the device: nothing the candidate touches is kept."""

    def __init__(self, meta: ReferenceData, inputs: dict[str, list], outputs: dict, device: str) -> None:
        self.meta, self._inputs, self._outputs, self.device = meta, inputs, outputs, device

    @classmethod
    def load(cls, job: Job, task) -> Trials:
        folder = Path(job.reference_dir)
        meta = read(folder)
        if meta is None:
            raise TaskProblem(f"the reference data in {folder} is missing or incomplete")
        outputs = torch.load(folder / OUTPUTS, mmap=True, weights_only=True)
        if meta.inputs_stored:
            inputs = torch.load(folder / INPUTS, mmap=True, weights_only=True)
        else:
            inputs = {s.name: to_device(make_inputs(task, job, s.seed, s.distribution), "cpu") for s in meta.sets}
        for s in meta.sets:
            if checksum(inputs[s.name]) != s.checksum:
                raise TaskProblem(f"get_inputs() under seed {s.seed} gave other inputs than when the reference's "
                                  "answers were stored; make it depend on torch's seed only")
        return cls(meta, inputs, outputs, job.settings.device)

    def inputs(self, name: str) -> list:
        return to_device(self._inputs[name], self.device, copy=True)

    def expected(self, name: str):
        return to_device(self._outputs[name], self.device, copy=True)

    def input_set(self, name: str) -> InputSet:
        return self.meta.input_set(name)

    @property
    def compiled(self) -> TimingStats | None:
        return self.meta.compiled
