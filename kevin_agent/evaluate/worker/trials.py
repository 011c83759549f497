"""The reference data inside a worker (``reference`` says what it is and where it lives).

``make`` (in the probe worker) draws every set of inputs from its seed on the device, runs the
reference on it once under the conditions of a correctness trial (poisoned memory, no TF32),
records the fingerprints of both, times the reference, and stores what cannot be made again.
``Trials.load`` (in every run worker, before its candidate arrives) reads it back. A set is
drawn again on the device each time a model is to run on it, so every run gets a fresh copy it
may scribble on and nothing a model does reaches the next one; each draw is checked bitwise
against the recorded fingerprints, so an answer is only ever compared with an output computed
from the same inputs. Inputs are stored only when ``get_inputs()`` does not repeat itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ...results import TimingStats
from . import meter
from .correctness import nbytes_of, poisoned_memory, sync
from . import fingerprint
from .fingerprint import digest, digests
from ..jobs import Job
from ..memory import Footprint, poison_bytes
from ..reference import (INPUTS, MAX_SIGNATURES, META, OUTPUTS, STORE_ANSWERS_BYTES, InputSet, ReferenceData, Signature,
                         input_plan, read)
from .taskcode import TaskProblem, describe, describe_inputs, make_inputs, signature_factories, to_device
from .timing import Timer


def read_meta(job: Job) -> ReferenceData:
    """The reference data's ``meta.json`` for ``job``, or the task's error when it is not there."""
    meta = read(Path(job.reference_dir))
    if meta is None:
        raise TaskProblem(f"the reference data in {job.reference_dir} is missing or incomplete")
    return meta


def draw_place(task, job: Job, seed: int, distribution: str) -> str:
    """Where ``get_inputs()`` draws: the evaluation device, unless the task's code cannot run with
    it as the default device (it mixes devices, or calls what has no such kernel); then the host."""
    device = job.settings.device
    if device == "cpu":
        return "cpu"
    try:
        values = make_inputs(task, job, seed, distribution, on=device)
    except TaskProblem:
        return "cpu"
    del values
    return device


def drawn(task, job: Job, entry: InputSet) -> list:
    """Set ``entry`` drawn again from its seed where it was first drawn, on the device."""
    values = make_inputs(task, job, entry.seed, entry.distribution, on=entry.drawn_on, signature=entry.signature)
    return to_device(values, job.settings.device)


def inputs_of(task, job: Job, entry: InputSet, kept: list | None) -> list:
    """Set ``entry`` on the device: a copy of ``kept`` (its host copy) when there is one, else drawn again."""
    return to_device(kept, job.settings.device, copy=True) if kept is not None else drawn(task, job, entry)


def _answer(ref: torch.nn.Module, values: list, device: str):
    """The reference's answer to ``values`` (on the device), computed as in a trial: poisoned memory."""
    with poisoned_memory(device), torch.no_grad():
        out = ref(*values)
        sync(device)
    return out


def _seconds(step: Callable[[], object], device: str) -> tuple[object, float]:
    start = time.perf_counter()
    out = step()
    sync(device)
    return out, time.perf_counter() - start


def _transfer_rate(nbytes: int, device: str) -> float:
    """Bytes per second from the host to the device (0 when too small to time: under 1 MiB)."""
    size = min(max(nbytes, 0), 256 << 20)
    if size < (1 << 20):
        return 0.0
    host = torch.empty(size, dtype=torch.uint8)
    _, seconds = _seconds(lambda: host.to(device, copy=True), device)
    return size / max(seconds, 1e-6)


def draw_set(job: Job, task, ref: torch.nn.Module, name: str, seed: int, distribution: str,
             answered: bool, drawn_on: str, keep: bool = False,
             signature: int = 0) -> tuple[InputSet, list | None, object | None, float, float]:
    """One set drawn from its seed (on the device), what it is, the reference's answer to it (when
    ``answered``), and the seconds the draw (with its fingerprints) and the answer took. With
    ``keep`` the second item is a host copy of the set made before the reference saw it (a
    reference may change its inputs in place); else None."""
    device = job.settings.device

    def draw() -> tuple[list, list[str]]:
        values = to_device(make_inputs(task, job, seed, distribution, on=drawn_on, signature=signature), device)
        return values, digests(values)

    (values, sums), draw_s = _seconds(draw, device)
    kept = to_device(values, "cpu", copy=True) if keep else None
    out, answer_s, answer_digest = None, 0.0, ""
    nbytes, shapes = nbytes_of(values), describe_inputs(values)
    if answered:
        out, answer_s = _seconds(lambda: _answer(ref, values, device), device)
        answer_digest = digest(out)
    entry = InputSet(name=name, seed=seed, distribution=distribution, digests=sums, drawn_on=drawn_on,
                     signature=signature, nbytes=nbytes, shapes=shapes, expected=answered, answer_digest=answer_digest)
    return entry, kept, out, draw_s, answer_s


def make(job: Job, task, ref: torch.nn.Module, request_timing, footprint: Footprint | None = None) -> ReferenceData:
    """Draw, answer, time and store; ``request_timing()`` returns once the device is ours alone.
    The device holds one set, its answer and (once) the answer computed again at a time."""
    s, device = job.settings, job.settings.device
    factories = signature_factories(task, job)
    plan = input_plan(s, signatures=max(1, len(factories)))
    name0, seed0, dist0, _, _ = plan[0]
    drawn_on = draw_place(task, job, seed0, dist0)
    first = digests(to_device(make_inputs(task, job, seed0, dist0, on=drawn_on), device))
    # Inputs drawn again must come out the same, or each worker's copy must come from disk.
    repeats = first == digests(to_device(make_inputs(task, job, seed0, dist0, on=drawn_on), device))
    answered = sum(1 for _, _, _, answers, _ in plan if answers)
    sets, inputs, outputs = [], ({} if not repeats else None), {}
    output_bytes, repeatable, draw_s, answer_s, signature_s = 0, None, 0.0, 0.0, {}
    for name, seed, dist, answers, signature in plan:
        entry, kept, out, drew, answering = draw_set(job, task, ref, name, seed, dist, answers, drawn_on,
                                                     keep=inputs is not None, signature=signature)
        draw_s = max(draw_s, drew)
        if signature == 0:
            answer_s = max(answer_s, answering)
        elif answers:
            signature_s[signature] = answering
        if out is not None:
            output_bytes += nbytes_of([out])
            if outputs is not None and nbytes_of([out]) * answered > STORE_ANSWERS_BYTES:
                outputs = None  # computed again by each worker, cheaper than gigabytes on disk
            if outputs is not None:
                outputs[name] = to_device(out, "cpu", copy=True)
            if repeatable is None:
                # An answer computed again is checked only against a reference that repeats itself.
                again = inputs_of(task, job, entry, kept)
                repeatable = digest(_answer(ref, again, device)) == entry.answer_digest
                del again
            del out
        if inputs is not None:
            inputs[name] = kept
        sets.append(entry)

    transfer = _transfer_rate(output_bytes // max(answered, 1), device)
    if outputs is not None and device == "cuda" and repeatable and transfer > 0:
        # Computing an answer again on the device (and checking its fingerprint) is often quicker
        # than copying the stored one from the host; only answers worth the copy are stored.
        if answer_s < (output_bytes / max(answered, 1)) / transfer:
            outputs = None

    request_timing()
    timer = Timer(device)
    timing_inputs = inputs_of(task, job, next(e for e in sets if e.name == "timing"),
                              inputs["timing"] if inputs is not None else None)
    start = time.perf_counter()
    eager = timer.time(ref, timing_inputs, warmup=s.warmup_runs, runs=s.timed_runs)
    call_s = (time.perf_counter() - start) / (s.warmup_runs + s.timed_runs)
    compiled, compile_error = None, ""
    if s.compare_compile:
        try:
            compiled = timer.time(torch.compile(ref), timing_inputs, warmup=max(s.warmup_runs, 1), runs=s.timed_runs)
        except Exception as exc:
            compile_error = describe(exc)[:300]
    flops, dtype_name = count_flops(ref, timing_inputs, device)
    del timing_inputs
    bandwidth = timer.bandwidth_bytes_per_ms()
    flop_rate = timer.flop_rate_per_ms(FLOP_DTYPES[dtype_name]) if flops else None

    folder = Path(job.reference_dir)
    stored = [(folder / OUTPUTS, outputs), (folder / INPUTS, inputs)]
    for path, content in stored:
        if content is not None:
            torch.save(content, path)
            try:
                torch.load(path, mmap=True, weights_only=True)
            except Exception as exc:
                raise TaskProblem(f"the reference's data cannot be stored and read back: {describe(exc)}") from None
    signatures = [Signature(count=count, inputs=next(e.shapes for e in sets if e.signature == j),
                            call_s=eager.median_ms / 1e3 if j == 0 else signature_s.get(j, 0.0))
                  for j, (count, _) in enumerate(factories[:MAX_SIGNATURES])]
    data = ReferenceData(key=folder.name, sets=sets, inputs_stored=inputs is not None, eager=eager,
                         signatures=signatures,
                         call_s=call_s, compiled=compiled, compile_error=compile_error,
                         bandwidth_bytes_per_ms=bandwidth, output_bytes=output_bytes, flops=flops,
                         flop_dtype=dtype_name, flop_rate_per_ms=flop_rate,
                         answers_stored=outputs is not None, answers_repeatable=repeatable is not False,
                         footprint=footprint, transfer_bytes_per_s=transfer, draw_s=draw_s,
                         created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    tmp = folder / (META + ".tmp")
    tmp.write_text(data.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, folder / META)
    return data


FLOP_DTYPES = {"float64": torch.float64, "float32": torch.float32, "tf32": torch.float32, "float16": torch.float16,
               "bfloat16": torch.bfloat16}
"""The dtypes a FLOP rate is measured in, by the name the roofline records."""


def flop_dtype(inputs, device: str) -> str:
    """The dtype a call's FLOPs are done in, for the FLOP rate: its first floating input's, ``tf32``
    for float32 where TF32 matmuls are on; '' for one that has no FLOP rate here."""
    floating = next((v.dtype for v in inputs if isinstance(v, torch.Tensor) and v.is_floating_point()), torch.float32)
    name = str(floating).removeprefix("torch.")
    if name == "float32" and device == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        name = "tf32"
    return name if name in FLOP_DTYPES else ""


def count_flops(ref: torch.nn.Module, inputs: list, device: str) -> tuple[float | None, str]:
    """The reference's FLOPs on ``inputs`` (``torch.utils.flop_counter``: matmuls, convolutions,
    attention) and the dtype they are done in (``flop_dtype``). (None, '') where the counter cannot
    follow the reference or the dtype has no FLOP rate."""
    from torch.utils.flop_counter import FlopCounterMode

    name = flop_dtype(inputs, device)
    if not name:
        return None, ""
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            ref(*inputs)
    except Exception:  # a reference the counter cannot trace still runs: it gets the bytes' roofline
        return None, name
    return float(counter.get_total_flops()), name


class ReferenceChanged(Exception):
    """The reference, computed again in a candidate's worker, did not give the answer recorded
    before any candidate ran: the candidate changed the reference or something it calls."""


class Trials:
    """The reference data one run worker checks its candidate against. ``draw`` hands out a fresh
    copy of a set on the device each time; nothing a model touches is kept."""

    def __init__(self, meta: ReferenceData, outputs: dict | None, device: str,
                 draw: Callable[[InputSet], list]) -> None:
        self.meta, self._outputs, self.device, self._draw = meta, outputs, device, draw
        self.reference: torch.nn.Module | None = None
        """The reference, for answers computed again (set once it is on the device)."""
        self.lean = False
        """Poison less memory (an evaluation is tried again after the harness ran out of memory)."""
        self.timer: Timer | None = None
        """The timer the timing stage uses, made while the worker got ready (``prepare``)."""

    def prepare(self) -> None:
        """Make the harness's long-lived buffers (the timer's cache-flush buffer, the fingerprint's
        weights) while nothing else is allocated, so that none of them later pins a large free block."""
        self.timer = Timer(self.device)
        fingerprint.prepare(self.device)

    @classmethod
    def load(cls, job: Job, task, meta: ReferenceData) -> Trials:
        """The reference data of ``meta`` (``read_meta``): sets drawn again on the device, or copied
        from the stored inputs where ``get_inputs()`` does not repeat itself."""
        folder = Path(job.reference_dir)
        outputs = torch.load(folder / OUTPUTS, mmap=True, weights_only=True) if meta.answers_stored else None
        device = job.settings.device
        if not meta.inputs_stored:
            return cls(meta, outputs, device, draw=lambda entry: drawn(task, job, entry))
        inputs = torch.load(folder / INPUTS, mmap=True, weights_only=True)
        for s in meta.sets:
            if digests(inputs[s.name]) != s.digests:
                raise TaskProblem(f"the stored inputs of set {s.name} in {folder} are damaged; remove the folder")
        return cls(meta, outputs, device, draw=lambda entry: to_device(inputs[entry.name], device, copy=True))

    @classmethod
    def fresh(cls, job: Job, task, ref: torch.nn.Module, meta: ReferenceData) -> Trials:
        """Every set drawn anew from ``job.seed`` (a confirmation's fresh seeds) with the reference's
        answers, held as the run's sets are held (``meta``): stored answers are kept on the host,
        others are computed again after each kernel, and inputs are drawn again where they are used
        (kept on the host where ``get_inputs()`` does not repeat itself). Each set is drawn here
        once, for its fingerprints and its answer's."""
        device, drawn_on = job.settings.device, meta.sets[0].drawn_on if meta.sets else job.settings.device
        sets, inputs, outputs = [], {}, {}
        plan = input_plan(job.settings.model_copy(update={"seed": job.seed}), signatures=max(1, len(meta.signatures)))
        for name, seed, dist, answered, signature in plan:
            entry, kept, answer, _, _ = draw_set(job, task, ref, name, seed, dist, answered, drawn_on,
                                                 keep=meta.inputs_stored, signature=signature)
            sets.append(entry)
            if kept is not None:
                inputs[name] = kept
            if answer is not None and meta.answers_stored:
                outputs[name] = to_device(answer, "cpu", copy=True)
            del answer
        draw = ((lambda entry: to_device(inputs[entry.name], device, copy=True)) if meta.inputs_stored
                else (lambda entry: drawn(task, job, entry)))
        trials = cls(meta.model_copy(update={"sets": sets}), outputs if meta.answers_stored else None, device, draw)
        trials.reference = ref
        return trials

    def draw(self, name: str) -> list:
        """A fresh copy of set ``name`` on the device, bitwise the set the reference answered."""
        entry = self.meta.input_set(name)
        values = self._draw(entry)
        if digests(values) != entry.digests:
            raise TaskProblem(f"get_inputs() under seed {entry.seed} gave other inputs than when the reference "
                              "answered them; make it depend on torch's seed only")
        return values

    def digests(self, name: str) -> list[str]:
        """The fingerprints of set ``name``'s inputs, as drawn."""
        return self.meta.input_set(name).digests

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

    def poison_unit(self) -> int:
        """The size fresh poison comes in where the room binds (``memory.fit_poison``): the outputs'."""
        fp = self.meta.footprint
        return fp.output_bytes if fp is not None and not self.lean else 0

    def input_set(self, name: str) -> InputSet:
        return self.meta.input_set(name)

    @property
    def compiled(self) -> TimingStats | None:
        return self.meta.compiled
