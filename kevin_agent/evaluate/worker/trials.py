"""The reference data inside a worker (``reference`` says what it is and where it lives).

``make`` (in the probe worker) draws every set of inputs from its seed, runs the reference on
it once under the conditions of a correctness trial (poisoned memory, no TF32), times the
reference, and stores it all. ``Trials.load`` (in every run worker, before its candidate
arrives) reads it back; inputs too large to store are drawn again when a set is used, one set
held on the host at a time, and every set is checked against the checksum stored with the
reference's answer: an answer is only ever compared with an output computed from bitwise the
same inputs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ...results import TimingStats
from . import meter
from .correctness import leaves, nbytes_of, poisoned_memory, sync
from .fingerprint import digest
from ..jobs import Job
from ..memory import Footprint, poison_bytes
from ..reference import (INPUTS, META, OUTPUTS, STORE_ANSWERS_BYTES, STORE_INPUTS_BYTES, InputSet, ReferenceData,
                        input_plan, read)
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


def read_meta(job: Job) -> ReferenceData:
    """The reference data's ``meta.json`` for ``job``, or the task's error when it is not there."""
    meta = read(Path(job.reference_dir))
    if meta is None:
        raise TaskProblem(f"the reference data in {job.reference_dir} is missing or incomplete")
    return meta


def draw_set(job: Job, task, ref: torch.nn.Module, name: str, seed: int, distribution: str,
             answered: bool, keep_answer: bool) -> tuple[InputSet, list, object | None]:
    """One set of inputs drawn from its seed and what it is (with the fingerprint of the
    reference's answer, when ``answered``), and that answer on the host when ``keep_answer``.
    The answer is computed as in a correctness trial (poisoned memory) and fingerprinted where it
    was computed: an answer too large to keep never travels to the host."""
    device = job.settings.device
    values = make_inputs(task, job, seed, distribution)
    answer, answer_digest = None, ""
    if answered:
        out = _answer(ref, values, device)
        answer_digest = digest(out)
        answer = to_device(out, "cpu", copy=True) if keep_answer else None
        del out
    entry = InputSet(name=name, seed=seed, distribution=distribution, checksum=checksum(values),
                     nbytes=nbytes_of(values), expected=answered, answer_digest=answer_digest)
    return entry, values, answer


def make(job: Job, task, ref: torch.nn.Module, request_timing, footprint: Footprint | None = None) -> ReferenceData:
    """Draw, answer, time and store; ``request_timing()`` returns once the device is ours alone.

    Each set is drawn where ``get_inputs()`` puts it (the host, by the KernelBench convention) and
    copied to the device for the reference, one set at a time."""
    s, device = job.settings, job.settings.device
    plan = input_plan(s)
    name0, seed0, dist0, _ = plan[0]
    # Inputs drawn again must come out the same, or each worker's copy must come from disk.
    deterministic = checksum(make_inputs(task, job, seed0, dist0)) == checksum(make_inputs(task, job, seed0, dist0))
    answered = sum(1 for *_, a in plan if a)
    sets, inputs, outputs, total, output_bytes, repeatable, draw_s = [], {}, {}, 0, 0, None, 0.0
    for name, seed, dist, answers in plan:
        drawn_at = time.perf_counter()
        values = make_inputs(task, job, seed, dist)
        sum_of_values = checksum(values)
        # A worker that draws the set again pays this too, inside a candidate's stage.
        draw_s = max(draw_s, time.perf_counter() - drawn_at)
        answer_digest = ""
        if answers:
            out = _answer(ref, values, device)
            answer_digest, answer_bytes = digest(out), nbytes_of([out])
            output_bytes += answer_bytes
            if outputs is not None and answer_bytes * answered > STORE_ANSWERS_BYTES:
                outputs = None  # computed again by each worker, cheaper than gigabytes on disk
            if outputs is not None:
                outputs[name] = to_device(out, "cpu", copy=True)
            del out
            if outputs is None and repeatable is None:
                # An answer computed again is checked only against a reference that repeats itself.
                repeatable = digest(_answer(ref, values, device)) == answer_digest
        sets.append(InputSet(name=name, seed=seed, distribution=dist, checksum=sum_of_values,
                             nbytes=nbytes_of(values), expected=answers, answer_digest=answer_digest))
        total += sets[-1].nbytes
        if name == "timing":
            timing_inputs = values
        if inputs is not None:
            inputs[name] = to_device(values, "cpu", copy=True)
            if deterministic and total > STORE_INPUTS_BYTES:
                inputs = None  # drawn again by each worker, cheaper than gigabytes on disk
        del values

    request_timing()
    timer = Timer(device)
    timing_inputs, transfer = _copied_to_device(timing_inputs, device)
    start = time.perf_counter()
    eager = timer.time(ref, timing_inputs, warmup=s.warmup_runs, runs=s.timed_runs)
    call_s = (time.perf_counter() - start) / (s.warmup_runs + s.timed_runs)
    compiled, compile_error = None, ""
    if s.compare_compile:
        try:
            compiled = timer.time(torch.compile(ref), timing_inputs, warmup=max(s.warmup_runs, 1), runs=s.timed_runs)
        except Exception as exc:
            compile_error = describe(exc)[:300]
    del timing_inputs
    bandwidth = timer.bandwidth_bytes_per_ms()

    folder = Path(job.reference_dir)
    stored = [(folder / OUTPUTS, outputs), (folder / INPUTS, inputs)]
    for path, content in stored:
        if content is not None:
            torch.save(content, path)
            try:
                torch.load(path, mmap=True, weights_only=True)
            except Exception as exc:
                raise TaskProblem(f"the reference's answers cannot be stored and read back: {describe(exc)}") from None
    data = ReferenceData(key=folder.name, sets=sets, inputs_stored=inputs is not None, eager=eager,
                         call_s=call_s, compiled=compiled, compile_error=compile_error,
                         bandwidth_bytes_per_ms=bandwidth, output_bytes=output_bytes,
                         answers_stored=outputs is not None, answers_repeatable=repeatable is not False,
                         footprint=footprint, transfer_bytes_per_s=transfer,
                         draw_s=draw_s if inputs is None else 0.0,
                         created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    tmp = folder / (META + ".tmp")
    tmp.write_text(data.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, folder / META)
    return data


def _answer(ref: torch.nn.Module, values: list, device: str):
    """The reference's answer to ``values``, computed as in a trial (poisoned memory, its own copy
    of the inputs on the device)."""
    with poisoned_memory(device), torch.no_grad():
        out = ref(*to_device(values, device, copy=True))
        sync(device)
    return out


def _copied_to_device(values: list, device: str) -> tuple[list, float]:
    """A copy of one set of inputs on the device, and how fast it was made in bytes per second (the
    stage limits allow for it; 0 below 1 MiB, too quick to time)."""
    nbytes = nbytes_of(values)
    start = time.perf_counter()
    copy = to_device(values, device, copy=True)
    sync(device)
    seconds = time.perf_counter() - start
    return copy, (nbytes / max(seconds, 1e-6) if nbytes >= (1 << 20) else 0.0)


def drawn_again(job: Job, task, s: InputSet) -> list:
    values = to_device(make_inputs(task, job, s.seed, s.distribution), "cpu")
    if checksum(values) != s.checksum:
        raise TaskProblem(f"get_inputs() under seed {s.seed} gave other inputs than when the reference's "
                          "answers were stored; make it depend on torch's seed only")
    return values


class ReferenceChanged(Exception):
    """The reference, computed again in a candidate's worker, did not give the answer recorded
    before any candidate ran: the candidate changed the reference or something it calls."""


class Trials:
    """The reference data one run worker checks its candidate against: every set of inputs as
    drawn (on the host), and the reference's answers. Device copies are handed out fresh; nothing
    the candidate touches is kept."""

    def __init__(self, meta: ReferenceData, inputs: dict[str, list] | None, outputs: dict | None, device: str,
                 draw: Callable[[InputSet], list] | None = None) -> None:
        self.meta, self._inputs, self._outputs, self.device, self._draw = meta, inputs, outputs, device, draw
        self._drawn: tuple[str, list] | None = None
        """The one set drawn again and still held (large inputs: one set on the host at a time)."""
        self.reference: torch.nn.Module | None = None
        """The reference, for answers computed again (set once it is on the device)."""
        self.lean = False
        """Poison less memory (an evaluation is tried again after the harness ran out of memory)."""

    @classmethod
    def load(cls, job: Job, task, meta: ReferenceData) -> Trials:
        """The reference data of ``meta`` (``read_meta``); inputs that were not stored are drawn
        again, on the host, when a set is used."""
        folder = Path(job.reference_dir)
        outputs = torch.load(folder / OUTPUTS, mmap=True, weights_only=True) if meta.answers_stored else None
        if not meta.inputs_stored:
            # Gigabytes per set: each is drawn when it is used, and only the last one is kept.
            return cls(meta, None, outputs, job.settings.device, draw=lambda s: drawn_again(job, task, s))
        inputs = torch.load(folder / INPUTS, mmap=True, weights_only=True)
        for s in meta.sets:
            if checksum(inputs[s.name]) != s.checksum:
                raise TaskProblem(f"the stored inputs of set {s.name} in {folder} are damaged; remove the folder")
        return cls(meta, inputs, outputs, job.settings.device)

    @classmethod
    def fresh(cls, job: Job, task, ref: torch.nn.Module, meta: ReferenceData) -> Trials:
        """Every set drawn anew from ``job.seed`` (a confirmation's fresh seeds) with the
        reference's answers, held as the run's sets are held (``meta``): where the run drew its
        inputs again per set, or computed its answers again, so do these, and the host keeps one
        set at a time. Each set is drawn here once, for its checksum and its answer's fingerprint."""
        keep_inputs, keep_answers = meta.inputs_stored, meta.answers_stored
        sets, inputs, outputs = [], {}, {}
        for name, seed, dist, answered in input_plan(job.settings.model_copy(update={"seed": job.seed})):
            entry, values, answer = draw_set(job, task, ref, name, seed, dist, answered, keep_answers)
            sets.append(entry)
            if keep_inputs:
                inputs[name] = to_device(values, "cpu")
            if answer is not None:
                outputs[name] = answer
            del values, answer
        trials = cls(meta.model_copy(update={"sets": sets}), inputs if keep_inputs else None,
                     outputs if keep_answers else None, job.settings.device,
                     draw=None if keep_inputs else lambda entry: drawn_again(job, task, entry))
        trials.reference = ref
        return trials

    def inputs(self, name: str) -> list:
        """Set ``name`` as drawn, on the host: to copy from, never to hand to a model."""
        if self._inputs is not None:
            return self._inputs[name]
        if self._drawn is None or self._drawn[0] != name:
            self._drawn = None  # the previous set goes before the next is drawn
            self._drawn = (name, self._draw(self.meta.input_set(name)))
        return self._drawn[1]

    def on_device(self, name: str) -> list:
        """A fresh copy of set ``name`` on the device."""
        return to_device(self.inputs(name), self.device, copy=True)

    def expected(self, name: str, inputs: Sequence | None = None):
        """The reference's answer to set ``name``, on the device: the stored one, or computed again
        from ``inputs`` (the set's values on the device, already used by the candidate and known
        unchanged) and checked against its recorded fingerprint."""
        if self._outputs is not None:
            return to_device(self._outputs[name], self.device, copy=True)
        if self.reference is None or inputs is None:
            raise RuntimeError(f"the answer to {name} is computed again, and needs the reference and the inputs")
        with torch.no_grad():
            out = self.reference(*inputs)
            sync(self.device)
        recorded = self.meta.input_set(name).answer_digest
        if self.meta.answers_repeatable and recorded and digest(out) != recorded:
            raise ReferenceChanged(f"[no-monkeypatch] the reference's answer to {name} is not the one recorded "
                                   "before any candidate ran: the candidate changed the reference or what it calls")
        return out

    def poison_bytes(self) -> int:
        """Memory to poison before each trial (``memory.poison_bytes``), within what the device has
        room for now: half of it, a quarter when ``lean``."""
        return poison_bytes(self.meta.footprint, meter.room(self.device), lean=self.lean)

    def input_set(self, name: str) -> InputSet:
        return self.meta.input_set(name)

    @property
    def compiled(self) -> TimingStats | None:
        return self.meta.compiled
