"""Correctness of a candidate against the reference, inside a worker process.

Per trial ``i`` (seed ``seed + i``): the task's ``get_inputs()`` runs under
``torch.manual_seed(seed + i)``; odd trials rescale every floating input by a positive factor
drawn from the seed (between 1/4 and 4, so signs and domains such as "positive only" hold).
The candidate runs first, on its own clone of the inputs, with freed and uninitialised memory
poisoned (NaN for floats, the dtype's max for integers), then again on a second clone (it
must agree with itself), then the reference on a third clone. An output that shares storage
with an input, an input modified in place, an output that stays the same when the
reference's changes (a cached or constant answer) all fail the trial.

Tolerances, per output dtype and preset (an element passes when
``|cand - ref| <= atol + rtol * |ref|``; NaN matches NaN, equal infinities match):

=========  ================  ====================
dtype      strict (default)  kernelbench
=========  ================  ====================
float64    1e-7              1e-2
float32    1e-4              1e-2
float16    1e-2              1e-2
bfloat16   2e-2              2e-2
integer    exact             exact
bool       exact             exact
=========  ================  ====================

(atol and rtol alike.) ``kernelbench`` is the harness Kevin was trained against (atol = rtol =
1e-2; bfloat16 keeps its looser strict value). ``--atol`` / ``--rtol`` override either preset
for every floating dtype. The reported relative error is ``max |cand - ref| / (|ref| + atol)``,
so elements near zero do not blow it up. The reference's TF32 use is an explicit setting
(``reference_tf32``, off by default: the reference is a full-precision ground truth), applied by
``set_reference_tf32`` for the whole worker, checks and timing alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .timing import _cuda_sync

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}
PRESETS: dict[str, dict[torch.dtype, tuple[float, float]]] = {
    "strict": TOLERANCES,
    "kernelbench": {dtype: (max(a, 1e-2), max(r, 1e-2)) for dtype, (a, r) in TOLERANCES.items()},
}


class Mismatch(Exception):
    """The candidate's answer is wrong; the message says how."""


@dataclass
class Outcome:
    trials: int = 0
    trials_passed: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    atol: float | None = None
    rtol: float | None = None
    compared: bool = False
    """Whether any values were compared (the errors mean nothing before that)."""


def tolerance(dtype: torch.dtype, atol: float | None, rtol: float | None,
              preset: str = "strict") -> tuple[float, float]:
    if not dtype.is_floating_point and not dtype.is_complex:
        return 0.0, 0.0
    table = PRESETS[preset]
    a, r = table.get(dtype, table[torch.float32])
    return (a if atol is None else atol), (r if rtol is None else rtol)


def set_reference_tf32(enabled: bool) -> None:
    """TF32 for PyTorch's matmuls and convolutions in this process: the reference's, in effect."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def leaves(value, path: str = "output") -> list[tuple[str, object]]:
    if isinstance(value, (tuple, list)):
        out = []
        for i, item in enumerate(value):
            out.extend(leaves(item, f"{path}[{i}]"))
        return out
    return [(path, value)]


def clone_all(values: Sequence) -> list:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def check_no_alias(outputs, inputs: Sequence) -> None:
    spans = [(i, _storage_span(x)) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    for path, out in leaves(outputs):
        if not isinstance(out, torch.Tensor) or out.untyped_storage().nbytes() == 0:
            continue
        lo, hi = _storage_span(out)
        for i, (ilo, ihi) in spans:
            if lo < ihi and ilo < hi:
                raise Mismatch(f"{path} shares memory with input {i}: return a new tensor your "
                               "kernel wrote, not an input or a view of one")


def check_inputs_unchanged(used: Sequence, pristine: Sequence) -> None:
    for i, (u, p) in enumerate(zip(used, pristine)):
        if isinstance(u, torch.Tensor) and not same_values(u, p):
            raise Mismatch(f"the candidate modified input {i} in place; inputs must be left unchanged")


def compare(cand, ref, atol: float | None, rtol: float | None, outcome: Outcome, preset: str = "strict") -> None:
    """Raise ``Mismatch`` unless ``cand`` matches ``ref``; record the largest errors."""
    c_leaves, r_leaves = leaves(cand), leaves(ref)
    if len(c_leaves) != len(r_leaves):
        raise Mismatch(f"returned {len(c_leaves)} outputs, the reference returns {len(r_leaves)}")
    for (_, c), (path, r) in zip(c_leaves, r_leaves):
        if not isinstance(r, torch.Tensor):
            if c != r:
                raise Mismatch(f"{path} is {c!r}, expected {r!r}")
            continue
        if not isinstance(c, torch.Tensor):
            raise Mismatch(f"{path} is a {type(c).__name__}, expected a tensor")
        if c.shape != r.shape:
            raise Mismatch(f"{path} has shape {tuple(c.shape)}, expected {tuple(r.shape)}")
        if c.dtype != r.dtype:
            raise Mismatch(f"{path} has dtype {c.dtype}, expected {r.dtype}")
        if c.device.type != r.device.type:
            raise Mismatch(f"{path} is on {c.device.type}, expected {r.device.type}")
        a, rt = tolerance(r.dtype, atol, rtol, preset)
        outcome.atol, outcome.rtol = a, rt
        outcome.compared = True
        if c.numel() == 0:
            continue
        cd, rd = c.detach().double(), r.detach().double()
        diff = (cd - rd).abs()
        both_nan = torch.isnan(cd) & torch.isnan(rd)
        same_inf = torch.isinf(rd) & (cd == rd)
        diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
        diff = torch.nan_to_num(diff, nan=float("inf"), posinf=float("inf"))
        bad = diff > a + rt * rd.abs().nan_to_num(0.0)
        outcome.max_abs_err = max(outcome.max_abs_err, float(diff.max()))
        rel = diff / (rd.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0) + a) if a > 0 else diff / rd.abs()
        outcome.max_rel_err = max(outcome.max_rel_err, float(rel.nan_to_num(nan=0.0, posinf=float("inf")).max()))
        if bool(bad.any()):
            idx = int(torch.argmax(diff.flatten()))
            where = tuple(int(v) for v in torch.unravel_index(torch.tensor(idx), tuple(c.shape)))
            raise Mismatch(
                f"{path}: {int(bad.sum())} of {c.numel()} elements differ beyond atol={a:g}, "
                f"rtol={rt:g} (max abs err {float(diff.max()):.4g} at {where}: got "
                f"{float(cd.flatten()[idx]):.6g}, expected {float(rd.flatten()[idx]):.6g})"
            )


@contextlib.contextmanager
def poisoned_memory(device: str):
    """Fill new allocations with NaN / max-int while the block runs."""
    det, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def poison_free_blocks(device: str, nbytes: int) -> None:
    """Leave NaN in the caching allocator's free blocks, where a never-written output would land.

    ``fill_uninitialized_memory`` covers ``torch.empty`` and its kin, from Python and C++; a
    kernel that takes memory from the allocator another way (``raw_alloc``, ``from_blob`` on a
    pointer it kept) would still see old values. So every free block the allocator holds is
    taken once, largest first (best fit hands out the block of that size), filled and given
    back, and one large block covers memory the allocator has not handed out yet."""
    if device != "cuda":
        return
    sizes = []
    for segment in torch.cuda.memory_snapshot():
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive" and block.get("size", 0) >= 512:
                sizes.append(int(block["size"]))
    held = []
    for size in sorted(sizes, reverse=True)[:4096]:
        held.append(torch.empty(size // 4, dtype=torch.float32, device="cuda").fill_(float("nan")))
    held.append(torch.empty(max(nbytes, 64 << 20) // 4, dtype=torch.float32, device="cuda").fill_(float("nan")))
    _cuda_sync()
    del held


def check_plain_tensors(outputs) -> None:
    """Outputs must be plain tensors: a subclass can defer or fake the work at comparison time."""
    for path, out in leaves(outputs):
        if isinstance(out, torch.Tensor) and type(out) is not torch.Tensor:
            raise Mismatch(f"{path} is a {type(out).__name__}, a torch.Tensor subclass; return plain "
                           "tensors that your kernel wrote")


def sync(device: str) -> None:
    if device == "cuda":
        _cuda_sync()


def nbytes_of(values) -> int:
    return sum(v.numel() * v.element_size() for _, v in leaves(list(values)) if isinstance(v, torch.Tensor))


def run_trial(candidate: Callable, reference: Callable, inputs: Sequence, *, device: str,
              atol: float | None, rtol: float | None, outcome: Outcome, poison_bytes: int,
              preset: str = "strict"):
    """One trial on ``inputs``: returns (candidate output, reference output); raises Mismatch."""
    pristine = clone_all(inputs)
    with poisoned_memory(device), torch.no_grad():
        poison_free_blocks(device, poison_bytes)
        mine = clone_all(inputs)
        first = candidate(*mine)
        sync(device)
        check_plain_tensors(first)
        check_inputs_unchanged(mine, pristine)
        check_no_alias(first, mine)
        first_copy = [v.clone() if isinstance(v, torch.Tensor) else v for _, v in leaves(first)]
        again = candidate(*clone_all(inputs))
        sync(device)
        check_plain_tensors(again)
        expected = reference(*clone_all(inputs))
        sync(device)
    compare(first_copy, expected, atol, rtol, outcome, preset)
    try:
        compare(again, expected, atol, rtol, outcome, preset)
    except Mismatch as exc:
        raise Mismatch(f"a second run on the same inputs gave a different answer: {exc}") from None
    return first_copy, expected
