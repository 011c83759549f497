"""Whether a measured time is physically possible: the floor set by the bytes a kernel must move.

A kernel must read each of its inputs and write each of its outputs at least once, so one call
takes at least

    bytes floor = (bytes of the inputs + bytes of the outputs) / (headroom x bandwidth)

where the bandwidth is measured in the worker (or given: ``bandwidth_gb_s``): the best of several copies of a buffer far larger
than the last-level cache, counted as bytes read plus bytes written. The headroom
(``BANDWIDTH_HEADROOM``, per device) allows for what the measurement misses: on cuda, where the
worker has the GPU to itself, a kernel that only reads goes somewhat faster than a copy (1.25);
on cpu the copy also pays for write-allocate traffic and the host is shared, so the bandwidth
measured in one moment can be a fraction of what another moment offers (4). Where the arithmetic a kernel cannot avoid
(``flops``) and the device's FLOP rate are both known, the floor is the larger of the bytes floor
and ``flops / (FLOP_HEADROOM x FLOP rate)``.

The rule: a kernel whose median time is below its floor is *implausible*: ``EvalResult.implausible``
is set and a flag gives the numbers. Such a result is a measuring error or a trick; it is never
committed unasked and never ends a run by reaching ``--target-speedup``. The speedup over the
reference plays no part: a kernel that replaces a Python loop over rows can honestly be a hundred
times faster, and is reported as it is.

What is not counted, so that the floor stays a true lower bound: parameters and buffers (a kernel
may fold constant weights once, at construction), and the reference's own FLOP count (two linear
layers fold into one, a sum over a matmul's outputs into a matrix-vector product, so the reference's
arithmetic is no floor for the candidate's). The worker therefore passes bytes only.

The **roofline** (``roofline``, ``reached``) is the same floor for people: no headroom, and the
reference's FLOPs counted (``torch.utils.flop_counter``) at the FLOP rate measured for the task's
dtype, so that a matmul is held to the arithmetic it does. A time's fraction of it says how much
of the device's speed a kernel (or PyTorch) reaches; it flags nothing and ends a run only where
``--stop-at-roofline`` asks.
"""

from __future__ import annotations

from ..results import Roofline, RuntimeFloor

BANDWIDTH_HEADROOM = {"cuda": 1.25, "cpu": 4.0}
"""Per device: how much faster than the measured copy bandwidth a kernel may stream its bytes."""
FLOP_HEADROOM = 1.25
"""How much faster than the given FLOP rate a kernel may compute."""


def bandwidth(measured_bytes_per_ms: float, given_gb_s: float | None) -> float:
    """The bandwidth the floor is computed with, in bytes per ms: the one given in the settings
    (``bandwidth_gb_s``), else the one the reference worker measured."""
    return given_gb_s * 1e6 if given_gb_s is not None else measured_bytes_per_ms


def runtime_floor(nbytes: int, bandwidth_bytes_per_ms: float, *, device: str = "cuda", bandwidth_source: str = "measured",
                  flops: float | None = None, flops_per_ms: float | None = None) -> RuntimeFloor:
    """The least time one call can take, in ms, from the bytes it must move (and its FLOPs)."""
    floor_ms = nbytes / (BANDWIDTH_HEADROOM[device] * bandwidth_bytes_per_ms)
    if flops and flops_per_ms:
        floor_ms = max(floor_ms, flops / (FLOP_HEADROOM * flops_per_ms))
    return RuntimeFloor(bytes=int(nbytes), bandwidth_gb_s=bandwidth_bytes_per_ms / 1e6,
                        bandwidth_source=bandwidth_source, flops=flops,
                        flop_rate_tflop_s=flops_per_ms / 1e9 if flops_per_ms else None, floor_ms=floor_ms)


def implausibility(runtime_ms: float, floor: RuntimeFloor) -> str | None:
    """The flag for a median time below the floor, or None when physics allows it."""
    if runtime_ms >= floor.floor_ms:
        return None
    work = f"{floor.bytes} bytes of inputs and outputs at {floor.bandwidth_gb_s:.0f} GB/s {floor.bandwidth_source}"
    if floor.flops and floor.flop_rate_tflop_s:
        work += f", {floor.flops:.3g} FLOPs at {floor.flop_rate_tflop_s:.1f} TFLOP/s"
    return (f"implausible runtime {runtime_ms:.4g} ms: below the physical floor of {floor.floor_ms:.4g} ms "
            f"({work}); a measuring error or a trick: verify the kernel by hand")


def roofline(nbytes: int, bandwidth_bytes_per_ms: float, *, bandwidth_source: str = "measured",
             flops: float | None = None, flops_per_ms: float | None = None, dtype: str = "") -> Roofline:
    """The least one call can take at the device's measured speeds, without headroom, and which of
    its bytes and its FLOPs sets it (fractions not filled in: ``reached``)."""
    memory_ms = nbytes / bandwidth_bytes_per_ms if bandwidth_bytes_per_ms > 0 else 0.0
    compute_ms = flops / flops_per_ms if flops and flops_per_ms else 0.0
    return Roofline(bytes=int(nbytes), bandwidth_gb_s=bandwidth_bytes_per_ms / 1e6, bandwidth_source=bandwidth_source,
                    flops=flops, flop_rate_tflop_s=flops_per_ms / 1e9 if flops_per_ms else None, dtype=dtype,
                    floor_ms=max(memory_ms, compute_ms), bound="compute" if compute_ms > memory_ms else "memory")


def fraction(roof: Roofline, median_ms: float | None) -> float | None:
    """The roofline's floor over a median time (None without a time or a floor)."""
    if median_ms is None or median_ms <= 0 or roof.floor_ms <= 0:
        return None
    return roof.floor_ms / median_ms


def reached(roof: Roofline, kernel_ms: float | None, reference_ms: float | None = None,
            compiled_ms: float | None = None) -> Roofline:
    """``roof`` with the fractions of the kernel's, the eager reference's and ``torch.compile``'s medians."""
    return roof.model_copy(update={"fraction": fraction(roof, kernel_ms),
                                   "reference_fraction": fraction(roof, reference_ms),
                                   "compiled_fraction": fraction(roof, compiled_ms)})
