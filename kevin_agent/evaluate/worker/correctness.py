"""Correctness of a candidate against the reference, inside a worker process.

Per trial ``i`` (seed ``seed + i``): the task's ``get_inputs()`` runs under
``torch.manual_seed(seed + i)``; odd trials rescale every floating input by a positive factor
drawn from the seed (between 1/4 and 4, so signs and domains such as "positive only" hold).
The candidate runs first, on its own copy of the inputs, with freed and uninitialised memory
poisoned (NaN for floats, the dtype's max for integers); the reference's answer to the same
inputs comes after it, and the two are compared; then the candidate runs again on a fresh copy
and must agree with the reference again. An output that shares storage with an input, an input
modified in place, an output that stays the same when the reference's changes (a cached or
constant answer) all fail the trial. The device holds one copy of the inputs, one output and
the answer at a time, and comparisons go a piece at a time, so a trial needs little more than
the task itself (``memory``).

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

from .fingerprint import digests, leaves, sample
from ..memory import fit_poison
from .timing import _cuda_sync

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}
COMPARE_CHUNK = {"cpu": 1 << 22, "cuda": 1 << 23}
"""Elements compared per step, by device: the comparison's float64 temporaries stay near 200 MiB
on the host and 400 MiB on a GPU (within the harness's allowance, ``memory.HARNESS_BYTES``),
whatever the size of the output; on a GPU in steps few enough that a 6 GiB output is compared in
tens of milliseconds rather than in thousands of small launches."""
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
    rounding: str = ""
    """Where outputs differed beyond the tolerance but were as near the float32 answer as the
    reference's own (``judged``): that, in words."""

    def evidence(self) -> dict:
        """What the trials found, as ``EvalResult`` and ``Confirmed`` record it."""
        return {"trials": self.trials, "trials_passed": self.trials_passed,
                "max_abs_err": self.max_abs_err if self.compared else None,
                "max_rel_err": self.max_rel_err if self.compared else None, "rounding": self.rounding}


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


def _chunks(a: torch.Tensor, b: torch.Tensor):
    """Matching flat pieces of two tensors of one shape, at most COMPARE_CHUNK elements each, with
    the flat (row-major) index of each piece's first element; ``b``'s pieces are moved to ``a``'s
    device as they come."""
    if a.dim() == 0:
        yield a.reshape(1), b.reshape(1).to(a.device), 0
        return
    chunk = COMPARE_CHUNK.get(a.device.type, COMPARE_CHUNK["cpu"])
    if a.is_contiguous() and b.is_contiguous():
        fa, fb = a.reshape(-1), b.reshape(-1)
        for start in range(0, fa.numel(), chunk):
            yield fa[start:start + chunk], fb[start:start + chunk].to(a.device), start
        return
    row = max(a[0].numel(), 1)
    step = max(1, chunk // row)
    for i in range(0, a.shape[0], step):
        yield a[i:i + step].reshape(-1), b[i:i + step].reshape(-1).to(a.device), i * row


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes, dtypes and values (NaN equals NaN), compared a piece at a time; ``b`` may
    be on another device."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    for x, y, _ in _chunks(a, b):
        same = (x == y) | (torch.isnan(x) & torch.isnan(y)) if x.dtype.is_floating_point else x == y
        if not bool(same.all()):
            return False
    return True


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


def _modified(i: int) -> Mismatch:
    return Mismatch(f"the candidate modified input {i} in place; inputs must be left unchanged")


def check_digests_unchanged(used: Sequence, before: Sequence[str]) -> None:
    """``used`` has the fingerprints ``digests`` gave it before the candidate ran."""
    for i, (now, then) in enumerate(zip(digests(used), before)):
        if now != then:
            raise _modified(i)


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
        max_abs, idx, max_rel, bad = _errors(c.detach(), r.detach(), a, rt)
        outcome.max_abs_err = max(outcome.max_abs_err, max_abs)
        outcome.max_rel_err = max(outcome.max_rel_err, max_rel)
        if bad:
            where = tuple(int(v) for v in torch.unravel_index(torch.tensor(idx), tuple(c.shape)))
            raise Mismatch(
                f"{path}: {bad} of {c.numel()} elements differ beyond atol={a:g}, "
                f"rtol={rt:g} (max abs err {max_abs:.4g} at {where}: got "
                f"{float(c[where].double()):.6g}, expected {float(r[where].double()):.6g})"
            )


def _errors(c: torch.Tensor, r: torch.Tensor, a: float, rt: float) -> tuple[float, int, float, int]:
    """(largest absolute error, its flat index (the first where it occurs), largest relative error,
    elements beyond the tolerance), a piece at a time: memory stays bounded for any output."""
    maxes, worst, rels, bads, offsets = [], [], [], [], []
    # float32 is exact enough for outputs of 32 bits or fewer (a difference of two float32 values
    # rounds once, at 6e-8 of it, far inside any tolerance) at half the traffic of float64.
    wide = torch.float32 if c.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float64
    inf = float("inf")
    for cc, rc, start in _chunks(c, r):
        cd, rd = cc.to(wide), rc.to(wide)  # views of the outputs where no conversion is needed: read only
        # In place on the piece's own temporaries, three of the element type and four of bools: each
        # new one is an allocation (the first piece of a trial's comparison waits for cudaMalloc)
        # and a pass over memory.
        diff = torch.sub(cd, rd).abs_()
        # No error where NaN meets NaN or the values are equal (equal infinities, whose difference
        # is NaN; equal finite values have none anyway).
        same = torch.eq(cd, rd)
        both_nan = torch.isnan(cd)
        both_nan &= torch.isnan(rd)
        same |= both_nan
        diff.masked_fill_(same, 0).nan_to_num_(nan=inf, posinf=inf)
        ref_abs = rd.abs()
        tol = ref_abs.nan_to_num(0.0).mul_(rt).add_(a)  # a + rt * |ref|: a NaN reference allows atol
        bads.append(torch.gt(diff, tol).sum())
        denom = ref_abs.nan_to_num_(0.0, posinf=0.0, neginf=0.0).add_(a) if a > 0 else ref_abs
        rel = torch.div(diff, denom, out=tol).nan_to_num_(nan=0.0, posinf=inf)
        rels.append(rel.max())
        k = torch.argmax(diff)
        # A copy, not diff[k]: that is a view, and would keep every piece's diff alive (a whole
        # output's worth of them by the last piece).
        maxes.append(diff.take(k))
        worst.append(k)
        offsets.append(start)
    # One transfer to the host for the four numbers (each its own would wait for the device four
    # times, and on a GPU shared with other checks every wait can cost a time slice).
    stacked = torch.stack(maxes).double()
    best = torch.argmax(stacked)  # the first piece holding the largest error
    summary = torch.stack([best.double(), stacked[best], torch.stack(worst).double()[best],
                           torch.stack(rels).double().max(), torch.stack(bads).double().sum()]).tolist()
    piece, largest, at, rel, bad = summary
    return largest, offsets[int(piece)] + int(at), rel, int(bad)


@contextlib.contextmanager
def poisoned_memory(device: str):
    """Fill new allocations with NaN / max-int while the block runs."""
    det, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    # The switch itself, not torch.use_deterministic_algorithms: that also sets inductor's
    # config, whose import pulls in torch._dynamo (seconds in a worker that compiles nothing).
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch._C._set_deterministic_algorithms(det, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def release_cached(device: str) -> None:
    """Give the caching allocator's unused blocks back to the device. At the start of each trial:
    large blocks split by small requests (a comparison's pieces) would otherwise stay reserved beside
    new ones, and the reservation would grow from trial to trial; memory given back is poisoned
    again before the candidate can be handed any of it (``poison_free_blocks``)."""
    if device == "cuda":
        torch.cuda.empty_cache()


def poison_free_blocks(device: str, nbytes: int, unit: int = 0) -> None:
    """Leave NaN in the caching allocator's free blocks, where a never-written output would land.

    ``fill_uninitialized_memory`` covers ``torch.empty`` and its kin, from Python and C++; a
    kernel that takes memory from the allocator another way (``raw_alloc``, ``from_blob`` on a
    pointer it kept) would still see old values. So every free block the allocator holds is
    taken once, largest first (best fit hands out the block of that size), filled and given
    back; then, where those blocks come to less than ``nbytes``, one block of the difference (at
    most half of what the device still has free, in whole ``unit``s then: ``memory.fit_poison``)
    covers memory the allocator has not handed out yet. The blocks taken are the allocator's own
    already; only the last one can grow what the process holds, and it is given back to be reused
    by the trial's own allocations: so poisoning never makes the process hold more than ``nbytes``
    beyond what it holds live."""
    if device != "cuda":
        return
    sizes = []
    for segment in torch.cuda.memory_snapshot():
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive" and block.get("size", 0) >= 512:
                sizes.append(int(block["size"]))
    held, cached = [], 0
    for size in sorted(sizes, reverse=True)[:4096]:
        held.append(torch.empty(size // 4, dtype=torch.float32, device="cuda").fill_(float("nan")))
        cached += size
    # Within half of what the device has free, in whole ``unit``s (the outputs' size) where that binds.
    fresh = fit_poison(nbytes - cached, torch.cuda.mem_get_info()[0] // 2, unit) if nbytes > cached else 0
    if fresh >= 512:
        held.append(torch.empty(fresh // 4, dtype=torch.float32, device="cuda").fill_(float("nan")))
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


ROUNDING_MAX = 2.0
"""How much larger than the reference's own largest error against float32 the largest may be."""
ROUNDING_MEAN = 1.5
"""How much larger than the reference's own mean error against float32 the mean may be."""
LOW_PRECISION = (torch.bfloat16, torch.float16)


def rounding_verdict(mine: list[tuple[str, object]], want: list[tuple[str, object]],
                     truth: list[tuple[str, object]]) -> tuple[bool, str]:
    """Where outputs (``mine``, as leaves) differ from the reference's (``want``) beyond the tolerance:
    whether every floating leaf is about as close to the reference's outputs in float32 (``truth``) as
    the reference's own are (its largest error at most ``ROUNDING_MAX`` times theirs, its mean at most
    ``ROUNDING_MEAN`` times), and the leaf furthest off in words, either way. Low-precision work
    rounds differently in any other order of operations; this asks which of the two is nearer the exact
    answer, not whether they agree bit for bit."""
    if [p for p, _ in mine] != [p for p, _ in want] or [p for p, _ in want] != [p for p, _ in truth]:
        return False, "the outputs in float32 have other leaves"
    worst = None
    for (path, a), (_, b), (_, t) in zip(mine, want, truth):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(t, torch.Tensor)):
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
                return False, f"{path} differs"
            continue
        if not a.is_floating_point() or a.shape != b.shape or b.shape != t.shape:
            if not torch.equal(a, b):
                return False, f"{path} differs"
            continue
        t = t.to(a.device, torch.float32)
        ours = (a.float() - t).abs()
        theirs = (b.float() - t).abs()
        tiny = torch.finfo(b.dtype).eps * float(t.abs().mean()) if t.numel() else 0.0
        ratio = float(ours.mean()) / max(float(theirs.mean()), 1e-30)
        words = (f"against the reference in float32, {path}'s mean error is {ratio:.2f}x the reference's own and its "
                 f"largest {float(ours.max()):.3g} against {float(theirs.max()):.3g}")
        if not (torch.isfinite(ours).all() and float(ours.max()) <= ROUNDING_MAX * float(theirs.max()) + tiny
                and float(ours.mean()) <= ROUNDING_MEAN * float(theirs.mean()) + tiny):
            return False, words
        if worst is None or ratio > worst[0]:
            worst = (ratio, words)
    if worst is None:
        return False, "no floating output to compare"
    return True, worst[1]


def judged(got, expected, inputs, truth: Callable[[Sequence], object] | None, atol: float | None,
           rtol: float | None, outcome: Outcome, preset: str = "strict") -> None:
    """``compare``, and where a low-precision output differs beyond the tolerance, the second opinion
    of ``truth`` (the reference in float32 on these inputs; None: none to ask): outputs nearer the
    exact answer than the tolerance allows for are as right as the reference's own rounding
    (``outcome.rounding`` says so); others raise ``Mismatch`` with both distances."""
    try:
        compare(got, expected, atol, rtol, outcome, preset)
    except Mismatch as exc:
        low = [v for _, v in leaves(expected) if isinstance(v, torch.Tensor) and v.dtype in LOW_PRECISION]
        answer = truth(inputs) if truth is not None and low else None
        if answer is None:
            raise
        ok, words = rounding_verdict(leaves(got), leaves(expected), leaves(answer))
        if not ok:
            raise Mismatch(f"{exc}; {words}") from None
        outcome.rounding = (f"beyond the tolerance, but within the reference's own "
                            f"{str(low[0].dtype).removeprefix('torch.')} rounding: {words}")


def run_trial(candidate: Callable, reference: Callable, draw: Callable[[], list], before: Sequence[str], *,
              device: str, atol: float | None, rtol: float | None, outcome: Outcome, poison_bytes: int,
              preset: str = "strict", poison_unit: int = 0, truth: Callable[[Sequence], object] | None = None):
    """One trial: returns samples of (candidate output, reference output); raises Mismatch.

    ``draw()`` gives a fresh copy of the set on the device each time it is called, whose inputs
    have the fingerprints ``before``. The candidate runs on a copy of its own, then the reference
    on the same copy (once it is known unchanged); the two are compared and freed, and freed
    memory is poisoned again before the candidate runs a second time on a fresh copy. Each run's
    inputs are drawn before the memory is poisoned, so the poisoned memory is all there for the
    candidate's output. So the device holds one copy of the inputs, the candidate's output and the
    reference's answer at a time."""
    release_cached(device)
    mine = draw()
    poison_free_blocks(device, poison_bytes, poison_unit)
    with poisoned_memory(device), torch.no_grad():
        first = candidate(*mine)
        sync(device)
        check_plain_tensors(first)
        check_digests_unchanged(mine, before)
        check_no_alias(first, mine)
        expected = reference(*mine)
        sync(device)
    judged(first, expected, mine, truth, atol, rtol, outcome, preset)
    kept = sample(first), sample(expected)
    del first, expected, mine
    mine = draw()
    poison_free_blocks(device, 0)  # the answer just freed is not there for the second run to find
    with poisoned_memory(device), torch.no_grad():
        again = candidate(*mine)
        sync(device)
        check_plain_tensors(again)
        check_digests_unchanged(mine, before)
        expected = reference(*mine)
        sync(device)
    try:
        judged(again, expected, mine, truth, atol, rtol, outcome, preset)
    except Mismatch as exc:
        raise Mismatch(f"a second run on the same inputs gave a different answer: {exc}") from None
    return kept
