"""The shapes a delivered kernel is admitted at: the profiled one, and the family around it.

A real model is called at many batch sizes and sequence lengths. Before a kernel for an
extracted task is delivered, it is run against the reference at a family of shapes: the
verified signature with every leading dimension (each tensor's dimensions but its last, the
tensors inside a tuple argument too) turned into a symbol and tried at 1, at a small odd size and
at a larger one. A kernel that passes them all is admitted at the family (``float32[n0,256]``:
same rank, dtype, device and fixed dimensions, any size where a symbol stands); where that fails
and a dimension of 1 is among them (a batch of one, which a graph written by ``torch.export``
holds fixed), the family with those held at 1 is tried; one that fails both (it hard-codes its
sizes) is admitted at the shapes it passed alone.

Kept free of torch: the check runs in a worker (``worker/family.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from pydantic import BaseModel, Field

from ..config import EvalSettings
from ..workers import scrubbed_env

_TENSOR = re.compile(r"^(\w+)\[([\d,]*)\]$")
SMALL_ODD = 7


def _split(key: str) -> list[str]:
    # guard.py's split_signature, which cannot be imported here: it needs torch
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(key):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0 and key[i + 1:i + 2] == " ":  # strides join with "," alone
            parts.append(key[start:i].strip())
            start = i + 1
    if key.strip():
        parts.append(key[start:].strip())
    return parts


class Trial(BaseModel):
    key: str
    shapes: list[list[int]]
    """Each tensor argument's shape, in order."""


class Family(BaseModel):
    """A verified signature's family: its key with symbols, and the shapes it is tried at."""

    signature: str
    key: str
    sizes: dict[str, int]
    """Each symbol's size in the verified signature."""
    trials: list[Trial]


def _slots(parts: list[str]) -> list[tuple[int, int | None, re.Match]] | None:
    """Each tensor of a signature as (argument, item inside its tuple or list, its match), in the order
    the guard hands them to the kernel; None where the guard compares an argument as text (a strided
    tensor, a dict, a tuple inside a tuple)."""
    slots = []
    for i, part in enumerate(parts):
        if "@" in part or part.startswith(("{", "<")):
            return None
        if part.startswith(("(", "[")):
            for j, item in enumerate(_split(part[1:-1].strip().rstrip(","))):
                if item.startswith(("(", "[", "{", "<")):
                    return None
                if match := _TENSOR.match(item):
                    slots.append((i, j, match))
        elif match := _TENSOR.match(part):
            slots.append((i, None, match))
    return slots


def family_of(signature: str, *, ones_fixed: bool = False) -> Family | None:
    """The family around a verified signature; None where it has no dimension to vary (or arguments
    the guard compares as text: strided tensors, dicts, nested sequences). The tensors inside a tuple
    or list argument (transformers' ``position_embeddings``) vary with the others. ``ones_fixed``:
    leading dimensions of size 1 stay 1 (a graph ``torch.export`` wrote for a batch of one holds it)."""
    parts = _split(signature)
    slots = _slots(parts)
    if slots is None:
        return None
    shapes = {k: [int(d) for d in m[2].split(",") if d] for k, (_, _, m) in enumerate(slots)}
    symbols: dict[int, str] = {}
    owners: dict[int, set[int]] = {}
    for k, shape in shapes.items():
        for size in shape[:-1] if len(shape) > 1 else []:
            if ones_fixed and size == 1:
                continue
            symbols.setdefault(size, f"n{len(symbols)}")
            owners.setdefault(size, set()).add(k)
    if not symbols:
        return None

    def named(k: int) -> list:
        # a last dimension (a vector's only one) is fixed, unless it is another argument's leading
        # dimension: a mask [batch, seq] beside activations [batch, seq, dim]
        shape = shapes[k]
        last = shape[-1]
        last_named = symbols[last] if last in symbols and owners[last] - {k} else last
        return [symbols.get(s, s) for s in shape[:-1]] + [last_named]

    def key_with(sizes: dict[str, int] | None) -> tuple[str, list[list[int]]]:
        texts: dict[tuple[int, int | None], str] = {}
        all_shapes = []
        for k, (i, j, match) in enumerate(slots):
            dims = [sizes[d] if sizes is not None and isinstance(d, str) else d for d in named(k)]
            all_shapes.append(dims)
            texts[(i, j)] = f"{match[1]}[{','.join(str(d) for d in dims)}]"
        out = []
        for i, part in enumerate(parts):
            if (i, None) in texts:
                out.append(texts[(i, None)])
            elif part.startswith(("(", "[")):
                inner = part[1:-1].strip()
                items = [texts.get((i, j), item) for j, item in enumerate(_split(inner.rstrip(",")))]
                out.append(part[0] + ", ".join(items) + ("," if inner.endswith(",") else "") + part[-1])
            else:
                out.append(part)
        return ", ".join(out), all_shapes

    key, _ = key_with(None)
    original = {name: size for size, name in symbols.items()}
    trials = []
    for pick in (lambda s: 1, lambda s: SMALL_ODD if s != SMALL_ODD else SMALL_ODD - 2, lambda s: s + s // 2 + 1):
        sizes = {name: pick(size) for name, size in original.items()}
        trial_key, trial_shapes = key_with(sizes)
        trials.append(Trial(key=trial_key, shapes=trial_shapes))
    return Family(signature=signature, key=key, sizes=original, trials=trials)


def _families(signature: str) -> list[Family]:
    """The families to try, widest first: every leading dimension free, then (where a dimension of 1
    is among them) those of 1 held, which a graph exported at a batch of one still passes."""
    wide = family_of(signature)
    if wide is None:
        return []
    narrow = family_of(signature, ones_fixed=True)
    return [wide] + ([narrow] if narrow is not None and narrow.key != wide.key else [])


class FamilyCheck(BaseModel):
    """What the family check found, per verified signature."""

    admitted: list[str] = Field(default_factory=list)
    """The signatures the guard admits: a family's key where it passed, the verified one where not."""
    passed: dict[str, list[str]] = Field(default_factory=dict)
    """A family's key: the shapes it was tried at."""
    failed: dict[str, str] = Field(default_factory=dict)
    """A verified signature whose family failed: why (the shape and what went wrong)."""
    unvaried: dict[str, str] = Field(default_factory=dict)
    """A verified signature with no family to try: why (a tuple among its arguments, ...)."""

    def describe(self) -> list[str]:
        """Sentences for the module's docstring and the report."""
        lines = []
        for key, shapes in self.passed.items():
            lines.append(f"{key}: checked against the original at {'; '.join(shapes)}, so admitted at any size where a "
                         "symbol (n0, n1, ...) stands.")
        for key, why in self.failed.items():
            lines.append(f"{key}: admitted at this shape alone; at another size {why} (the kernel may hard-code "
                         "its sizes).")
        for key, why in self.unvaried.items():
            lines.append(f"{key}: admitted at this shape alone; {why}.")
        return lines


def _unvaried(signature: str) -> str:
    """Why ``family_of`` gives ``signature`` no family."""
    parts = _split(signature)
    if any("@" in p for p in parts):
        return "the family check does not vary strided tensors"
    if _slots(parts) is None:
        return "the family check does not vary the shapes inside its dict or nested arguments"
    return "it has no leading dimension to vary"


def check_family(task_path: str, class_name: str, code: str, verified: list[str], settings: EvalSettings, *,
                 seed: int = 0, build_dir: str | None = None, env: dict[str, str] | None = None) -> FamilyCheck:
    """Run the kernel against the reference at each verified signature's family, in a worker (``env``:
    what the worker needs besides, as a Triton kernel its interpreter on the cpu device)."""
    check = FamilyCheck()
    families = {key: _families(key) for key in verified}
    wanted = [f for tried in families.values() for f in tried]
    results: dict[str, str] = {}
    if wanted:
        job = {"task_path": str(task_path), "class_name": class_name, "code": code, "device": settings.device, "seed": seed,
               "atol": settings.atol, "rtol": settings.rtol,
               "preset": settings.tolerance, "fast_build": settings.fast_build,
               "trials": list({t.key: t.model_dump() for f in wanted for t in f.trials}.values())}
        extra = {**({"TORCH_EXTENSIONS_DIR": build_dir} if build_dir else {}), **(env or {})}
        try:
            proc = subprocess.run([sys.executable, "-m", "kevin_agent.model.worker.family"], input=json.dumps(job),
                                  capture_output=True, text=True, env=scrubbed_env(extra or None),
                                  timeout=settings.run_timeout_s)
            found = [ln for ln in proc.stdout.splitlines() if ln.startswith("kevin-family: ")]
            results = json.loads(found[-1][len("kevin-family: "):]) if found else {}
            if not found:
                why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
                results = {t.key: f"the check failed ({why})" for f in wanted for t in f.trials}
        except subprocess.TimeoutExpired:
            results = {t.key: f"the check ran past {settings.run_timeout_s:g} s" for f in wanted for t in f.trials}
    for key, tried in families.items():
        if not tried:
            check.admitted.append(key)
            check.unvaried[key] = _unvaried(key)
            continue
        why = []
        for family in tried:
            wrong = [(t.key, results.get(t.key, "not checked")) for t in family.trials if results.get(t.key) != ""]
            if not wrong:
                check.admitted.append(family.key)
                check.passed[family.key] = [t.key for t in family.trials]
                break
            why.append(f"{wrong[0][0]}: {wrong[0][1]}")
        else:  # each family's first failure: what the kernel or the original cannot take
            check.admitted.append(key)
            check.failed[key] = why[0] + (f"; with the dimensions of one held, {why[1]}" if len(why) > 1 else "")
    check.admitted = list(dict.fromkeys(check.admitted))
    return check
