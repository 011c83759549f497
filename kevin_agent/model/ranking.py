"""Which module of a model a kernel should be written for: the ranking of a profile.

For each module, per forward: its share of the forward; Amdahl's bound, the whole model's
speedup if the module took no time at all, ``1 / (1 - share)``; its floor, the least time its
inputs and outputs take to move at the measured bandwidth (``evaluate/plausibility.py``, the
floor the evaluator holds a kernel to); and its headroom, the part of its time a kernel could
remove: ``1 - (floor + library time) / time``, where the library time is that of the vendor
GEMMs and convolutions inside it, which a kernel at best matches. ``saving = share x headroom``
is the part of the whole forward a kernel for the module could save.

A module's saving includes what kernels for the modules it calls could save themselves, so a
block would always outrank the norm inside it. The ranking's key is therefore the ``own_saving``:
the saving less its children's savings, which leaves what only a kernel for the whole module
saves (the ops between its children, the traffic between them). The model itself is not
ranked, and neither is a module with nothing to save (one library call, or one at its floor).
"""

from __future__ import annotations

from ..evaluate.plausibility import fraction, roofline, runtime_floor
from .records import ModelProfile, ModuleProfile

MIN_SAVING = 0.001
"""Modules that could save less than this part of the forward are not ranked."""


def _moved(module: ModuleProfile) -> int:
    """Per forward: the bytes of every call's inputs and outputs."""
    return sum(s.calls * (s.input_bytes + s.output_bytes) for s in module.signatures)


def floor_ms(module: ModuleProfile, bandwidth_gb_s: float, device: str) -> float:
    """Per forward: the bytes of every call's inputs and outputs at the bandwidth."""
    nbytes = _moved(module)
    if nbytes == 0 or bandwidth_gb_s <= 0:
        return 0.0
    return runtime_floor(nbytes, bandwidth_gb_s * 1e6, device=device).floor_ms


def roofline_fraction(module: ModuleProfile, profile: ModelProfile) -> float | None:
    """What the module reaches now: its roofline (its bytes at the measured bandwidth, its FLOPs at
    the measured FLOP rate, no headroom) over its time per forward."""
    rate = profile.flop_rate_tflop_s
    roof = roofline(_moved(module), profile.bandwidth_gb_s * 1e6, flops=module.flops or None,
                    flops_per_ms=rate * 1e9 if rate else None)
    return fraction(roof, module.time_ms)


def rank(profile: ModelProfile) -> ModelProfile:
    """The profile with every module's share, bound, floor, headroom and savings filled in, the
    model itself first, then the ranked modules best first, then the rest by time."""
    total = profile.profiled_forward_ms
    modules = {m.path: m.model_copy() for m in profile.modules}
    for m in modules.values():
        m.share = m.time_ms / total if total > 0 else 0.0
        m.amdahl = 1.0 / (1.0 - m.share) if m.path and m.share < 1.0 else None
        m.floor_ms = floor_ms(m, profile.bandwidth_gb_s, profile.device)
        m.roofline = roofline_fraction(m, profile)
        if m.time_ms > 0 and not m.library:
            m.headroom = max(0.0, 1.0 - (m.floor_ms + m.library_ms) / m.time_ms)
        m.saving = m.share * m.headroom
    for m in modules.values():
        children = sum(modules[c].saving for c in m.children if c in modules)
        m.own_saving = max(0.0, m.saving - children)
    ranked = sorted((m for m in modules.values() if m.path and m.own_saving >= MIN_SAVING),
                    key=lambda m: (-m.own_saving, m.path))
    for i, m in enumerate(ranked, start=1):
        m.rank = i
    rest = sorted((m for m in modules.values() if m.path and m.rank is None), key=lambda m: (-m.time_ms, m.path))
    root = [m for m in modules.values() if not m.path]
    return profile.model_copy(update={"modules": root + ranked + rest})


def amdahl(share: float, module_speedup: float) -> float:
    """The whole model's speedup when a module taking ``share`` of it gets ``module_speedup`` faster."""
    return 1.0 / ((1.0 - share) + share / module_speedup)
