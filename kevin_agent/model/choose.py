"""Which groups of a profiled model get a kernel: the plan ``kevin-opt optimize`` carries out.

Groups (``groups``) in the order of what a kernel for each could save (the profile's ``saves``),
up to ``modules`` of them, while a group could save at least ``min_saving`` of the forward.
Groups that are one library GEMM, convolution, attention or RNN call are skipped (the vendor's
kernel is what a kernel at best matches), and so is a group inside one already chosen or holding
one (its kernel would replace the other's module, or never run).

Groups a person names (``named_modules``, ``optimize --module``) are the plan instead, exactly and in
the order named (``named``): the ranking, ``modules`` and ``min_saving`` do not apply to them.

``DEFAULT_MIN_SAVING`` is 2% of the forward: about what a whole model's measured speedup moves
when nothing changed. ``benchmarks/model_noise.py`` installs a module's own code as its "kernel"
and measures the whole model with and without it: on a busy shared 2-core CPU (the example stack,
ten measurements) it read a median of 0.973x (2.7% off, the guard's own cost included), and
repeated timings on a GPU agree within about 0.4-2% (the spread of five confirmations on the H200).
A group that could save less, even with a kernel that took no time at all, would buy a change that
its own measurement cannot tell from noise, for a run's worth of compute. On a busy CPU a higher
``min_saving`` is the safer choice.
"""

from __future__ import annotations

from collections.abc import Sequence

from .named import named_groups
from .ranking import groups_of
from .records import KernelPlan, ModelProfile, ModuleGroup, SkippedGroup
from .table import LIBRARY_WORDS

DEFAULT_MODULES = 4
DEFAULT_MIN_SAVING = 0.02
TYPICAL_SPEEDUP = 2.0
"""A kernel that halves its module's time: the plan's second, more modest prediction."""


def _nested(a: str, b: str) -> bool:
    return a.startswith(b + ".") or b.startswith(a + ".")


def choose(profile: ModelProfile, *, modules: int = DEFAULT_MODULES, min_saving: float = DEFAULT_MIN_SAVING,
           named_modules: Sequence[str] = ()) -> KernelPlan:
    """The groups worth a kernel, best first, and why the others near them are not; or, where
    ``named_modules`` are given, their groups in that order (``ModelError`` where one cannot be)."""
    profile = groups_of(profile)
    if named_modules:
        return _plan(named_groups(profile, named_modules), modules=modules, min_saving=min_saving,
                     named_modules=list(named_modules))
    chosen: list[ModuleGroup] = []
    skipped: list[SkippedGroup] = []
    below = 0
    candidates = sorted((g for g in profile.groups if g.path), key=lambda g: (-g.own_saving, g.name))
    for g in candidates:
        if g.library:
            if g.share >= min_saving:
                skipped.append(SkippedGroup(name=g.name, why=f"{LIBRARY_WORDS.get(g.library, g.library)}: a "
                                                             "kernel at best matches the vendor's"))
            continue
        if g.own_saving < min_saving:
            below += 1
            continue
        holds = next((c for c in chosen if any(_nested(a, b) for a in g.members for b in c.members)), None)
        if holds is not None:
            inside = any(a.startswith(b + ".") for a in g.members for b in holds.members)
            skipped.append(SkippedGroup(name=g.name, why=f"{'inside' if inside else 'holds'} {holds.name}, "
                                                         "chosen before it"))
            continue
        if len(chosen) >= modules:
            skipped.append(SkippedGroup(name=g.name, why=f"past the {modules} groups asked for"))
            continue
        chosen.append(g)
    return _plan(chosen, skipped=skipped, below=below, modules=modules, min_saving=min_saving)


def _plan(chosen: list[ModuleGroup], **fields) -> KernelPlan:
    """The plan of ``chosen``, with Amdahl's predictions for the whole model."""
    at_floor = 1.0 / max(1e-9, 1.0 - sum(g.saving for g in chosen))
    typical = [min(TYPICAL_SPEEDUP, 1.0 / max(1e-9, 1.0 - g.headroom)) for g in chosen]
    at_typical = 1.0 / max(1e-9, 1.0 - sum(g.share for g in chosen)
                           + sum(g.share / s for g, s in zip(chosen, typical)))
    return KernelPlan(chosen=chosen, at_floor=at_floor, at_typical=at_typical, typical=TYPICAL_SPEEDUP, **fields)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def plan_lines(plan: KernelPlan) -> list[str]:
    """The plan in words, as it is printed before the first run."""
    if not plan.chosen:
        lines = [f"nothing worth a kernel: no group could save {_pct(plan.min_saving)} of the forward "
                 "(library calls are left to the vendor's kernels)"]
        return lines + [f"  {s.name}: {s.why}" for s in plan.skipped]
    count = f"{len(plan.chosen)} group{'s' if len(plan.chosen) != 1 else ''}"
    if plan.named_modules:
        lines = [f"named with --module ({count}, in the order named; the ranking, --modules and --min-saving do "
                 "not apply):"]
    else:
        lines = [f"worth a kernel ({count}, each could save at least {_pct(plan.min_saving)} of the forward):"]
    for i, g in enumerate(plan.chosen, start=1):
        members = f", {len(g.members)} modules, one kernel at each" if len(g.members) > 1 else ""
        lines.append(f"  {i}. {g.name} ({g.class_name}{members}): {_pct(g.share)} of the forward, a kernel "
                     f"could save {_pct(g.own_saving)}")
    lines.append(f"the whole model: {plan.at_floor:.2f}x if every kernel reached its floor, {plan.at_typical:.2f}x "
                 f"if each made its modules {plan.typical:g}x faster")
    lines += [f"skipped {s.name}: {s.why}" for s in plan.skipped]
    if plan.below:
        lines.append(f"{plan.below} more group{'s' if plan.below != 1 else ''} could save less than "
                     f"{_pct(plan.min_saving)} each")
    return lines
