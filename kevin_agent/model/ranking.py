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

What is ranked are groups (``groups``): instances that compute the same thing are one kernel's
work, so a group's share, floor, library time and savings are its members' summed, and its rank
is every member's.
"""

from __future__ import annotations

from ..evaluate.plausibility import fraction, roofline, runtime_floor
from .groups import group_name, merged_signatures, partition
from .records import ModelProfile, ModuleGroup, ModuleProfile

MIN_SAVING = 0.001
"""Modules that could save less than this part of the forward are not ranked."""


def _moved(module: ModuleProfile) -> int:
    """Per forward: the bytes of every call's inputs and outputs (none for a call that returns its
    input or a view of it: it reads and writes nothing)."""
    return sum(s.calls * (s.input_bytes + s.output_bytes) for s in module.signatures if not s.aliased)


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
    if module.moves_nothing:
        return None
    roof = roofline(_moved(module), profile.bandwidth_gb_s * 1e6, flops=module.flops or None,
                    flops_per_ms=rate * 1e9 if rate else None)
    return fraction(roof, module.time_ms)


def rank(profile: ModelProfile) -> ModelProfile:
    """The profile with every module's share, bound, floor, headroom and savings filled in, and its
    groups: the model itself first, then the ranked groups best first, then the rest by time (the
    modules in the same order, each group's members together)."""
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
        m.rank = None
    for m in modules.values():
        m.own_saving = _own_saving(m, [modules[c] for c in m.children if c in modules], total)
    groups = [group_of([modules[p] for p in members]) for members in
              partition([(m.path, m.identity, [s.key for s in m.signatures]) for m in modules.values()])]
    ranked = sorted((g for g in groups if g.path and g.own_saving >= MIN_SAVING), key=lambda g: (-g.own_saving, g.name))
    for i, g in enumerate(ranked, start=1):
        g.rank = i
    rest = sorted((g for g in groups if g.path and g.rank is None), key=lambda g: (-g.time_ms, g.name))
    ordered = [g for g in groups if not g.path] + ranked + rest
    for g in ordered:
        for path in g.members:
            modules[path].rank, modules[path].group = g.rank, g.name
    return profile.model_copy(update={"modules": [modules[p] for g in ordered for p in g.members],
                                      "groups": ordered})


def _own_saving(m: ModuleProfile, children: list[ModuleProfile], total: float) -> float:
    """``saving`` less the children's savings. With ``time = self + sum(children's time)`` that is
    ``self + sum(min(child time, child floor + library)) - floor - library`` over the total, which
    is what is computed: each time is a median over forwards, and a median of sums is not the sum
    of the medians (a forward that a busy machine interrupted inside one child would otherwise give
    its parent a saving it does not have); the self time is taken forward by forward."""
    if not m.children:
        return m.saving
    if total <= 0 or m.library:
        return 0.0
    kept = sum(min(c.time_ms, c.floor_ms + c.library_ms) if not c.library else c.time_ms for c in children)
    return max(0.0, min(m.saving, (m.self_ms + kept - m.floor_ms - m.library_ms) / total))


def group_of(members: list[ModuleProfile]) -> ModuleGroup:
    """The group of ``members`` (ranked modules): their numbers summed."""
    time_ms = sum(m.time_ms for m in members)
    share = sum(m.share for m in members)
    library = members[0].library if len({m.library for m in members}) == 1 else ""
    floor = sum(m.floor_ms for m in members)
    library_ms = sum(m.library_ms for m in members)
    root = not members[0].path
    reached = [(m.roofline * m.time_ms, m.time_ms) for m in members if m.roofline is not None]
    return ModuleGroup(
        name=group_name([m.path for m in members]), members=[m.path for m in members],
        class_name=members[0].class_name, calls=sum(m.calls for m in members),
        signatures=merged_signatures([m.signatures for m in members]), time_ms=time_ms, share=share,
        amdahl=None if root else 1.0 / (1.0 - share) if share < 1.0 else None, library=library,
        library_ms=library_ms, floor_ms=floor,
        headroom=max(0.0, 1.0 - (floor + library_ms) / time_ms) if time_ms > 0 and not library else 0.0,
        saving=sum(m.saving for m in members), own_saving=sum(m.own_saving for m in members),
        roofline=sum(r for r, _ in reached) / sum(t for _, t in reached) if reached and sum(t for _, t in reached) > 0
        else None)


def groups_of(profile: ModelProfile) -> ModelProfile:
    """A profile with its groups: as it is where it has them, else ranked again (one written
    before groups were recorded: every module a group of its own)."""
    return profile if profile.groups else rank(profile)


def amdahl(share: float, module_speedup: float) -> float:
    """The whole model's speedup when a module taking ``share`` of it gets ``module_speedup`` faster."""
    return 1.0 / ((1.0 - share) + share / module_speedup)
