"""A model's outputs of any structure as their leaves: each tensor or plain value with its path
(``output.last_hidden_state``, ``output.past_key_values.layers[0].keys``, ``output[1]``).

Outputs go from one worker to the next as their tensors plus the leaves' paths and plain values
as text, so that reading them back never imports, let alone unpickles, the person's classes (a
transformers ``ModelOutput``, a cache object, a dataclass of their own). Two outputs are compared
leaf by leaf: the same paths, every tensor within tolerance, every plain value the same.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import torch

from ...evaluate.worker import Mismatch, Outcome, compare
from ...evaluate.worker import rounding_verdict as leaf_rounding_verdict  # on leaves; this module's on outputs

PLAIN = (bool, int, float, str, bytes, type(None), torch.dtype, torch.device)
MAX_DEPTH = 12


def _key(path: str, key) -> str:
    return f"{path}.{key}" if isinstance(key, str) and key.isidentifier() else f"{path}[{key!r}]"


def _plain_text(value) -> str:
    if isinstance(value, PLAIN):
        return repr(value)
    if isinstance(value, type):
        return f"<class {value.__qualname__}>"
    return f"<{type(value).__name__}>"


def _fields(value) -> list[tuple[str, object]] | None:
    """An object's parts to walk into: a mapping's items, a dataclass's fields, another object's
    public attributes; None for a leaf."""
    if isinstance(value, Mapping):
        return list(value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, (PLAIN, type, torch.nn.Module)) or callable(value):
        return None
    attrs = getattr(value, "__dict__", None)
    if attrs is None or type(value).__module__ == "builtins":
        return None
    return [(k, v) for k, v in attrs.items() if not k.startswith("_")]


def flatten(value, path: str = "output") -> list[tuple[str, object]]:
    """Every leaf under ``value`` with its path: tensors as they are, anything else as its text."""
    out: list[tuple[str, object]] = []
    seen: set[int] = set()

    def walk(v, p: str, depth: int) -> None:
        if isinstance(v, torch.Tensor):
            out.append((p, v))
            return
        if isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                walk(item, f"{p}[{i}]", depth + 1)
            return
        parts = _fields(v) if depth < MAX_DEPTH and id(v) not in seen else None
        if parts is None:
            out.append((p, _plain_text(v)))
            return
        seen.add(id(v))
        for k, item in parts:
            walk(item, _key(p, k), depth + 1)

    walk(value, path, 0)
    return out


def save(value, path: str) -> None:
    """``value``'s leaves into ``path``: a plain dict of tensors and text that
    ``torch.load(weights_only=True)`` reads back."""
    leaves = flatten(value)
    tensors = [v.detach() for _, v in leaves if isinstance(v, torch.Tensor)]
    structure = [[p, None if isinstance(v, torch.Tensor) else v] for p, v in leaves]
    torch.save({"tensors": tensors, "structure": json.dumps(structure)}, path)


def load(path: str) -> list[tuple[str, object]]:
    """The leaves ``save`` wrote, in order."""
    saved = torch.load(path, weights_only=True)
    tensors = iter(saved["tensors"])
    return [(p, next(tensors) if text is None else text) for p, text in json.loads(saved["structure"])]


def same_leaves(got, want: list[tuple[str, object]], atol: float | None, rtol: float | None, outcome: Outcome,
                preset: str = "strict") -> None:
    """Raise ``Mismatch`` unless ``got``'s leaves are ``want``'s (the same paths, each tensor within
    tolerance, each plain value the same); record the largest errors in ``outcome``."""
    mine = flatten(got)
    paths, theirs = [p for p, _ in mine], [p for p, _ in want]
    if paths != theirs:
        extra = [p for p in paths if p not in theirs]
        missing = [p for p in theirs if p not in paths]
        detail = (f"{missing[0]} is missing" if missing else f"{extra[0]} is new" if extra
                  else "its parts come in another order")
        raise Mismatch(f"the outputs have another structure: {detail} ({len(paths)} leaves, the model's "
                       f"{len(theirs)})")
    for (path, a), (_, b) in zip(mine, want):
        if isinstance(b, torch.Tensor):
            try:
                compare(a, b, atol, rtol, outcome, preset)
            except Mismatch as exc:
                raise Mismatch(str(exc).replace("output", path, 1)) from None
        elif isinstance(a, torch.Tensor) or a != b:
            raise Mismatch(f"{path} is {'a tensor' if isinstance(a, torch.Tensor) else a}, expected {b}")


def within_rounding(got, want: list[tuple[str, object]], truth: list[tuple[str, object]]) -> str:
    """Where ``got`` differs from the model's outputs ``want`` beyond the tolerance: whether every
    floating leaf is nonetheless about as close to the float32 outputs ``truth`` as ``want`` is (its
    largest error at most ``ROUNDING_MAX`` times the model's own, its mean error at most
    ``ROUNDING_MEAN`` times), said in words; empty where it is not (``rounding_verdict`` says why)."""
    ok, words = rounding_verdict(got, want, truth)
    return words if ok else ""


def rounding_verdict(got, want: list[tuple[str, object]], truth: list[tuple[str, object]]) -> tuple[bool, str]:
    """``within_rounding``'s answer and its words either way: the leaf furthest from float32
    against the model's own distance (``correctness.rounding_verdict``, on the outputs' leaves)."""
    ok, words = leaf_rounding_verdict(flatten(got), want, truth)
    return ok, (f"beyond the tolerance, but within the model's own {want_dtype(want)} rounding: {words}" if ok
                else words)


def want_dtype(want: list[tuple[str, object]]) -> str:
    """The floating dtype of the model's outputs, as a word (bfloat16, float16)."""
    for _, v in want:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return str(v.dtype).replace("torch.", "")
    return "low-precision"
