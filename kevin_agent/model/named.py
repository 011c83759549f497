"""The groups a person names with ``kevin-opt optimize --module PATH``: the plan, in the order named.

A PATH is a module's path as ``extract --module`` takes it (``layers.0``, ``layers.0.self_attn``) or a
group's name as ``profile`` prints it (``layers.*``, ``layers.*.norm x3``: the path part is read). Each
names the group the profile put that module in, all its members. What no plan can hold is refused
here, after the profile (which alone knows the groups) and before anything runs: a path that is no
module the forward calls, two names whose groups are one or nest (one kernel would replace the
other's module, or never run), and a group that is one library call (the vendor's kernel is what a
kernel at best matches). A group only partly inside another named one keeps its members outside it:
``--module layers.0 --module norm`` on a transformers LLaMA is the decoder layers' kernel and the norm
kernel at the final norm alone (the layers' own norms are inside the layers' kernel).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from .modelfile import ModelError
from .groups import group_name
from .records import ModelProfile, ModuleGroup
from .table import LIBRARY_WORDS

_COUNT = re.compile(r"x\d+")


def _path_part(given: str) -> str:
    """``layers.*.norm x3`` -> ``layers.*.norm``; a path alone as it is."""
    parts = given.split()
    return parts[0] if len(parts) == 2 and _COUNT.fullmatch(parts[1]) else given.strip()


def _closest(profile: ModelProfile, path: str) -> str:
    """The hint for a path that is no module: the nearest module paths and group names."""
    known = [m.path for m in profile.modules if m.path]
    known += [g.name.split()[0] for g in profile.groups if g.path and "*" in g.name]
    near = difflib.get_close_matches(path, known, n=3, cutoff=0.4)
    if near:
        return f"pass one of the closest: {', '.join(near)} (kevin-opt profile lists the model's groups)"
    names = [g.name.split()[0] for g in profile.groups if g.path][:5]
    return f"pass a module's path or a group's name as kevin-opt profile lists them: {', '.join(names)}"


def _group(profile: ModelProfile, given: str) -> ModuleGroup:
    path = _path_part(given)
    if not path:
        raise ModelError("--module '': names the whole model, not one of its modules",
                         "name a module inside it, or leave --module out to let the ranking choose")
    group = profile.group_of(path) or next((g for g in profile.groups if g.path and g.name.split()[0] == path), None)
    if group is None or not group.path:
        raise ModelError(f"--module {given}: the model's forward calls no module at {path}",
                         _closest(profile, path))
    if group.library:
        words = LIBRARY_WORDS.get(group.library, group.library)
        raise ModelError(f"--module {given}: {group.name} is one {words} call, and a kernel at best matches the "
                         "vendor's", _holder(profile, path if "*" not in path else group.path))
    return group


def _holder(profile: ModelProfile, path: str) -> str:
    parent = path.rpartition(".")[0]
    if parent and profile.module(parent) is not None:
        return f"name the module holding it instead: --module {parent}"
    return "it sits in the model's own forward: name a module that does more than this one call"


def named_groups(profile: ModelProfile, given: Sequence[str]) -> list[ModuleGroup]:
    """The group of each named module, in the order named (``ModelError``, exit 2, where one cannot
    be in the plan). ``profile`` has its groups (``ranking.groups_of``)."""
    chosen: list[tuple[str, ModuleGroup]] = []
    for name in given:
        group = _group(profile, name)
        for earlier, other in chosen:
            if other.name == group.name:
                raise ModelError(f"--module {earlier} and --module {name} are one group, {group.name}: its one "
                                 "kernel goes into every member", "name it once")
            inside = all(_within(a, other.members) for a in group.members)
            if inside or all(_within(b, group.members) for b in other.members) or \
                    _within(_path_part(name), other.members) or _within(_path_part(earlier), group.members):
                (inner, part), (outer, whole) = ((group, name), (other, earlier)) if inside else \
                    ((other, earlier), (group, name))
                raise ModelError(f"--module {earlier} and --module {name} nest: {inner.name} is inside "
                                 f"{outer.name}, whose kernel would replace it too",
                                 f"name one of them: --module {whole} for the whole, or --module {part} for "
                                 "the part")
        chosen.append((name, group))
    groups = [g for _, g in chosen]
    return [_narrowed(g, [m for m in g.members if not any(_within(m, o.members) for o in groups if o is not g)])
            for g in groups]


def _within(path: str, members: list[str]) -> bool:
    return any(path.startswith(m + ".") for m in members)


def _narrowed(group: ModuleGroup, kept: list[str]) -> ModuleGroup:
    """``group`` with only the members ``kept`` (its members being alike, each its equal part of the
    times, shares and calls)."""
    if len(kept) == len(group.members):
        return group
    part = len(kept) / len(group.members)
    share = group.share * part
    return group.model_copy(update={
        "name": group_name(kept), "members": kept, "calls": group.calls * part,
        "signatures": [s.model_copy(update={"calls": max(1, round(s.calls * part))}) for s in group.signatures],
        "time_ms": group.time_ms * part, "share": share, "amdahl": 1.0 / max(1e-9, 1.0 - share),
        "library_ms": group.library_ms * part, "floor_ms": group.floor_ms * part, "saving": group.saving * part,
        "own_saving": group.own_saving * part})
