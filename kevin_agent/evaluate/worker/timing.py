"""Timing inside a worker process.

Every timed run starts cold: just before it a buffer larger than the last-level cache (L2 on
cuda) is written, on the same stream, so inputs come from memory. Warm-up calls come first; the
median of ``timed_runs`` runs is the number reported.

cuda: **the headline time is the call's own GPU time, with the whole call queued before the GPU
reaches it.** Each run queues the flush, then a spin kernel of ``lead`` milliseconds, then the
start event, the call and the end event, all on the current stream. While the GPU flushes and
spins, the host queues the call; when the GPU reaches the start event every kernel of the call is
already waiting, so the time between the two events is GPU time alone, however fast or slow the
host launches. Whether that held is checked on every run: right after the end event is queued the
start event must not have been reached yet. If it had been, the GPU waited for the host inside the
timed region: the run is thrown away and the lead doubled (up to ``LEAD_MAX_MS``). A call that
still finds the GPU waiting at the longest lead makes the host wait on the GPU itself (it
synchronises); its runs are kept and counted in ``TimingStats.host_waits``. The lead starts at
twice the time the host takes to queue one call, and each callable keeps its own.

This matters for calls made of many small launches (an eager PyTorch module): queued behind the
flush alone, how much of their launch gaps the timer saw depended on how fast the host was
compared with the GPU, and so on the process, its path through the harness and the machine's load.

Beside the headline, ``launched`` times the call the way KernelBench does and the way an eager
model pays for it: the GPU idle at the start event, so the call's launches are in the time.

After the end event every run waits for the whole device and records a third event, so each run
also gives the time with a device-wide synchronisation before the end mark. Work that escapes the
stream (a side stream, deferred work) is not in the stream time but is in the synchronised one.
``sync_overhead_ms`` measures the synchronisation on an empty call, and ``hidden_work`` applies the
rule: with

    hidden = median over runs of (synchronised time - stream time) - overhead

a candidate is refused when ``hidden > max(HIDDEN_ABS_MS, HIDDEN_REL x its stream median)`` (``runs.hidden_work``;
the statistics of the runs and the ratios a speedup is made of are ``evaluate.rounds``).

The "in a CUDA graph" column times replays with this timer's flush and lead (``graphs.py``).

cpu: ``time.perf_counter`` brackets the call, after the same kind of flush; the synchronised
time is the same number, and there is no lead: the host is the device.

The timer functions are bound when this module is imported, before any candidate code runs, so a
candidate that rebinds ``torch.cuda.synchronize``, the event methods, the spin kernel or
``time.perf_counter`` does not change what is measured.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ...results import TimingStats
from .placements import Placements
from ..rounds import stats
from .runs import Run, Runs

_perf_counter = time.perf_counter
_median = statistics.median
# The C functions under torch.cuda.synchronize and torch.cuda.Event: rebinding the Python wrappers
# (or the names in torch._C) after this import does not reach these references.
_c_sync = getattr(torch._C, "_cuda_synchronize", None)
_EventBase = getattr(torch._C, "_CudaEventBase", None)
_event_record = getattr(_EventBase, "record", None)
_event_elapsed = getattr(_EventBase, "elapsed_time", None)
_event_wait = getattr(_EventBase, "synchronize", None)
_event_query = getattr(_EventBase, "query", None)
_spin = getattr(torch._C, "_cuda_sleep", None)
_current_stream = torch.cuda.current_stream

LEAD_MIN_MS = 0.05
"""The shortest lead the GPU is given before the start event."""
LEAD_MAX_MS = 20.0
"""The longest: a call the host needs longer than this to queue waits on the GPU itself."""
LEAD_TRIES = 8
"""Runs thrown away at most per kept run while the lead grows."""
LAUNCHED_RUNS = 25
"""Runs of the ``launched`` column (the headline has ``timed_runs``)."""


def _cuda_sync() -> None:
    """Device-wide: waits for every stream of the current device, side streams included."""
    _c_sync()


def _cpu_cache_bytes() -> int:
    """Size of the largest CPU cache from sysfs (32 MiB when unknown)."""
    best = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size_file.read_text().strip().upper()
        try:
            value = int(text.rstrip("KMG"))
        except ValueError:
            continue
        best = max(best, value * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1))
    return best or (32 << 20)


def _event():
    return _EventBase(enable_timing=True)


def _nothing() -> None:
    return None


@dataclass
class _Lead:
    """How long the GPU spins before one callable's start event."""

    fn: Callable
    first_ms: float
    ms: float
    waits: bool = False
    """Even the longest lead left the GPU waiting: the call synchronises inside."""


class Timer:
    """Times callables on one device, the same way for the candidate and the reference."""

    def __init__(self, device: str) -> None:
        self.device = device
        if device == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
            size = max(2 * int(l2), 256 << 20)
        else:
            size = min(2 * _cpu_cache_bytes(), 256 << 20)
        self._flush_buffer = torch.ones(size // 4, dtype=torch.float32, device=device)
        self._sink = torch.empty((), dtype=torch.float32, device=device)
        self._leads: dict[int, _Lead] = {}
        """Each callable's lead, by ``id`` (the entry keeps the callable alive, so no id is reused)."""
        self._cycles_per_ms: float | None = None

    def flush(self) -> None:
        """cuda: read the buffer (a reduction on the current stream, queued like any kernel), which
        leaves the L2 cache holding clean lines of it: a timed call's misses then cost the same
        wherever this process's buffers happen to lie. Writing it instead left the cache full of
        dirty lines whose write-backs the call paid for, by an amount that moved with the buffer's
        address (a launch-bound module read up to 4% apart in two timers of one process).
        cpu: write it (the host's caches are write-allocate)."""
        if self.device == "cuda":
            torch.sum(self._flush_buffer, dim=0, out=self._sink)
        else:
            self._flush_buffer.fill_(1.0)

    def sync(self) -> None:
        if self.device == "cuda":
            _cuda_sync()

    def time(self, fn: Callable, args: Sequence, *, warmup: int, runs: int) -> TimingStats:
        """The headline time: the call's GPU time, queued ahead (cuda), or wall time (cpu), median of ``runs``."""
        return self.runs(fn, args, warmup=warmup, runs=runs).stream

    def runs(self, fn: Callable, args: Sequence, *, warmup: int, runs: int) -> Runs:
        """Each run timed on the stream and, on cuda, also up to the end of a device-wide sync."""
        out = Runs([], [])
        with torch.no_grad():
            for _ in range(warmup):
                fn(*args)
            self.sync()
            for _ in range(runs):
                out.add(self.one(fn, args))
        return out

    def rounds(self, fns: Sequence[Callable], placements: Placements, *, warmup: int, rounds: int) -> list[Runs]:
        """``fns`` timed head to head: each warmed up, then ``rounds`` rounds that time each once, in
        order, on the same inputs (how a turn times its candidate and the reference, and how a
        confirmation times its kernels: whatever drifts between rounds drifts for all of them).
        Round ``r`` is at placement ``r`` (``placements.Placements``: its own copy of the set and,
        on cuda, its own memory for what the calls allocate), so that the medians do not ride on
        where one process's buffers happen to lie."""
        out = [Runs([], []) for _ in fns]
        with torch.no_grad():
            with placements.at(0) as args:
                for fn in fns:
                    for _ in range(warmup):
                        fn(*args)
            for args in placements.others():
                for fn in fns:
                    fn(*args)
            self.sync()
            for r in range(rounds):
                with placements.at(r) as args:
                    for fn, runs in zip(fns, out):
                        runs.add(self.one(fn, args))
        return out

    def one(self, fn: Callable, args: Sequence) -> Run:
        """One cold call, times in ms (cpu: wall time, twice). The caller warms up and turns autograd
        off. cuda: runs in which the GPU reached the start event before the whole call was queued
        are thrown away and the lead doubled, up to ``LEAD_MAX_MS``."""
        if self.device != "cuda":
            self.flush()
            begin = _perf_counter()
            fn(*args)
            wall = (_perf_counter() - begin) * 1e3
            return Run(wall, wall)
        lead = self._lead(fn, args)
        if lead.waits:
            return self._queued(fn, args, lead.first_ms)
        for _ in range(LEAD_TRIES):
            run = self._queued(fn, args, lead.ms)
            if run.ahead:
                return run
            if lead.ms >= LEAD_MAX_MS:
                # It makes the host wait on the GPU inside the call (it synchronises): no lead gets
                # it queued whole, and how long the lead is does not change its time.
                lead.waits = True
                return run
            lead.ms = min(2 * lead.ms, LEAD_MAX_MS)
        return run

    def _lead(self, fn: Callable, args: Sequence) -> _Lead:
        key = id(fn)
        lead = self._leads.get(key)
        if lead is None:
            first = self._first_lead(fn, args)
            lead = self._leads[key] = _Lead(fn, first, first)
        return lead

    def _queued(self, fn: Callable, args: Sequence, lead_ms: float) -> Run:
        start, end, after = _event(), _event(), _event()
        stream = _current_stream()
        self.flush()
        self.spin_for(lead_ms)
        _event_record(start, stream)
        fn(*args)
        _event_record(end, stream)
        ahead = not _event_query(start)
        # Outside the stream time: waits for every stream, so no run leaves work for the next.
        _cuda_sync()
        _event_record(after, stream)
        _event_wait(after)
        return Run(float(_event_elapsed(start, end)), float(_event_elapsed(start, after)), ahead)

    def _first_lead(self, fn: Callable, args: Sequence) -> float:
        """Twice what the host takes to queue one call (with the device idle), at least ``LEAD_MIN_MS``."""
        _cuda_sync()
        begin = _perf_counter()
        fn(*args)
        queued_ms = (_perf_counter() - begin) * 1e3
        _cuda_sync()
        return min(max(LEAD_MIN_MS, 2 * queued_ms), LEAD_MAX_MS)

    def spin_for(self, ms: float) -> None:
        """Keep the stream busy for about ``ms`` (a spin kernel of that many of the GPU's cycles)."""
        if self._cycles_per_ms is None:
            self._cycles_per_ms = self._spin_rate()
        _spin(max(1, int(ms * self._cycles_per_ms)))

    def _spin_rate(self) -> float:
        """The spin kernel's cycles per millisecond on this GPU, measured once per timer."""
        stream = _current_stream()
        cycles = 1_000_000
        rates = []
        for _ in range(3):
            start, end = _event(), _event()
            _cuda_sync()
            _event_record(start, stream)
            _spin(cycles)
            _event_record(end, stream)
            _event_wait(end)
            rates.append(cycles / max(float(_event_elapsed(start, end)), 1e-6))
        return _median(rates)

    def launched(self, fn: Callable, args: Sequence, *, runs: int = LAUNCHED_RUNS) -> TimingStats | None:
        """The call timed with the GPU idle at the start event, after a flush: its launches are in
        the time (the way KernelBench times, and the way an eager model pays). None on cpu, where
        the headline is already the host's time. The caller warms up and turns autograd off."""
        times = self.launched_ms(fn, args, runs=runs)
        return stats(times) if times else None

    def launched_ms(self, fn: Callable, args: Sequence, *, runs: int = LAUNCHED_RUNS) -> list[float]:
        """``launched``'s times, run by run (empty on cpu)."""
        if self.device != "cuda":
            return []
        stream = _current_stream()
        times = []
        with torch.no_grad():
            for _ in range(runs):
                start, end = _event(), _event()
                self.flush()
                _cuda_sync()
                _event_record(start, stream)
                fn(*args)
                _event_record(end, stream)
                _cuda_sync()
                times.append(float(_event_elapsed(start, end)))
        return times

    def sync_overhead_ms(self, runs: int) -> float:
        """What a device-wide sync before the end mark adds on an empty call (0 on cpu)."""
        if self.device != "cuda":
            return 0.0
        return self.runs(_nothing, (), warmup=2, runs=runs).after_ms

    def flop_rate_per_ms(self, dtype: torch.dtype) -> float | None:
        """The device's FLOP rate for a matmul in ``dtype`` (FLOPs per ms), for the roofline: the
        best of a few square products large enough to keep every unit busy (with the worker's TF32
        setting); on cpu the better of every core and the worker's own threads (a shared host's cores
        can be slower together than one alone). None where ``dtype`` has no matmul here or it does
        not fit."""
        threads = torch.get_num_threads()
        n = (8192 if dtype.itemsize <= 2 else 4096) if self.device == "cuda" else 1024
        counts = sorted({os.cpu_count() or 1, threads}) if self.device == "cpu" else [threads]
        best = 0.0
        try:
            a = torch.randn(n, n, device=self.device).to(dtype)
            b, c = torch.randn(n, n, device=self.device).to(dtype), torch.empty(n, n, device=self.device, dtype=dtype)
            for count in counts:
                torch.set_num_threads(count)
                ms = self.time(lambda: torch.mm(a, b, out=c), (), warmup=2, runs=5 if self.device == "cpu" else 10).min_ms
                best = max(best, 2 * n ** 3 / max(ms, 1e-6))
        except (RuntimeError, TypeError, MemoryError):  # no kernel for the dtype, or no room for it
            return None
        finally:
            torch.set_num_threads(threads)
        return best or None

    def bandwidth_bytes_per_ms(self) -> float:
        """Measured memory bandwidth (a copy: bytes read + bytes written), for the runtime floor.

        On cpu the copy may use every core: a candidate's own threads are not bound by the
        worker's thread setting, and the floor must stay a lower bound."""
        threads = torch.get_num_threads()
        if self.device == "cpu":
            n = max(4 * _cpu_cache_bytes(), 64 << 20)
            torch.set_num_threads(os.cpu_count() or 1)
        else:
            n = 256 << 20
        try:
            src = torch.empty(n // 4, dtype=torch.float32, device=self.device).fill_(1.0)
            dst = torch.empty_like(src)
            result = self.time(lambda: dst.copy_(src), (), warmup=1 if self.device == "cpu" else 2,
                               runs=5 if self.device == "cpu" else 10)
        finally:
            torch.set_num_threads(threads)
        return 2 * n / max(result.min_ms, 1e-6)

