"""Timing inside a worker process.

Warm-up runs, then timed runs, each preceded by a write to a buffer larger than the last-level
cache (L2 on cuda), so every run starts cold. On cuda the start mark is an event on the
current stream and the end mark is recorded after ``torch.cuda.synchronize()``, a device-wide
wait, so work on any stream counts. On cpu ``time.perf_counter`` brackets the call.

The timer functions are bound when this module is imported, before any candidate code runs,
so a candidate that rebinds ``torch.cuda.synchronize`` or ``time.perf_counter`` does not
change what is measured.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..results import TimingStats

_perf_counter = time.perf_counter
_median = statistics.median
# The C functions under torch.cuda.synchronize and torch.cuda.Event: rebinding the Python
# wrappers (or the names in torch._C) after this import does not reach these references.
_c_sync = getattr(torch._C, "_cuda_synchronize", None)
_EventBase = getattr(torch._C, "_CudaEventBase", None)
_event_record = getattr(_EventBase, "record", None)
_event_elapsed = getattr(_EventBase, "elapsed_time", None)
_event_wait = getattr(_EventBase, "synchronize", None)
_current_stream = torch.cuda.current_stream


def _cuda_sync() -> None:
    """Device-wide: waits for every stream of the current device, side streams included."""
    _c_sync()


def _quantile(sorted_values: list[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stats(times_ms: Sequence[float]) -> TimingStats:
    s = sorted(times_ms)
    return TimingStats(
        median_ms=_median(s),
        mean_ms=statistics.fmean(s),
        std_ms=statistics.pstdev(s) if len(s) > 1 else 0.0,
        min_ms=s[0],
        max_ms=s[-1],
        p10_ms=_quantile(s, 0.10),
        p90_ms=_quantile(s, 0.90),
        runs=len(s),
    )


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


class Timer:
    """Times callables on one device, the same way for the candidate and the reference."""

    def __init__(self, device: str) -> None:
        self.device = device
        if device == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
            size = max(2 * int(l2), 256 << 20)
        else:
            size = min(2 * _cpu_cache_bytes(), 256 << 20)
        self._flush_buffer = torch.empty(size // 4, dtype=torch.float32, device=device)

    def flush(self) -> None:
        self._flush_buffer.fill_(1.0)

    def sync(self) -> None:
        if self.device == "cuda":
            _cuda_sync()

    def time(self, fn: Callable, args: Sequence, *, warmup: int, runs: int) -> TimingStats:
        with torch.no_grad():
            for _ in range(warmup):
                fn(*args)
            self.sync()
            times = [self._one(fn, args) for _ in range(runs)]
        return stats(times)

    def _one(self, fn: Callable, args: Sequence) -> float:
        self.flush()
        if self.device == "cuda":
            start, end = _EventBase(enable_timing=True), _EventBase(enable_timing=True)
            stream = _current_stream()
            _cuda_sync()
            _event_record(start, stream)
            fn(*args)
            _cuda_sync()
            _event_record(end, stream)
            _event_wait(end)
            return float(_event_elapsed(start, end))
        begin = _perf_counter()
        fn(*args)
        return (_perf_counter() - begin) * 1e3

    def bandwidth_bytes_per_ms(self) -> float:
        """Measured device copy bandwidth (read + write), for the plausibility flag."""
        n = 256 << 20
        src = torch.empty(n // 4, dtype=torch.float32, device=self.device).fill_(1.0)
        dst = torch.empty_like(src)
        result = self.time(lambda: dst.copy_(src), (), warmup=2, runs=10)
        return 2 * n / max(result.min_ms, 1e-6)
