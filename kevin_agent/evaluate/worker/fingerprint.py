"""Small stand-ins for large tensors, made where the tensors are (inside a worker).

``digest`` is a 64-bit fingerprint of a tensor's bytes: a weighted sum of its 8-byte words with
pseudo-random odd weights, modulo 2**64, computed in chunks with integer arithmetic, so it is the
same on every device and costs a few passes over the tensor instead of a copy of it. It says
whether an input was left unchanged and whether a recomputed answer is the one recorded.
``sample`` keeps a fixed subset of a tensor's values where the tensor is (all of them for a small
one): enough to see that an output stayed the same while the reference's changed.
"""

from __future__ import annotations

import hashlib

import torch

CHUNK_WORDS = 1 << 22
"""8-byte words summed per step: 32 MiB of int64 temporaries."""
SAMPLE = 1 << 16
"""Values kept per output by ``sample``; an output with no more than this many is kept whole."""

_MASK = (1 << 64) - 1
_weights: dict[torch.device, torch.Tensor] = {}


def leaves(value, path: str = "output") -> list[tuple[str, object]]:
    """Every value in nested lists and tuples, with its path (``output[1][0]``)."""
    if isinstance(value, (tuple, list)):
        out = []
        for i, item in enumerate(value):
            out.extend(leaves(item, f"{path}[{i}]"))
        return out
    return [(path, value)]


def _signed(x: int) -> int:
    x &= _MASK
    return x - (1 << 64) if x >> 63 else x


def _mix(x: int) -> int:
    """splitmix64's finaliser: a well-spread odd 64-bit number for each position or chunk."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) | 1


def _chunk_weights(device: torch.device, n: int) -> torch.Tensor:
    """The first ``n`` weights of a chunk (a small tensor needs no 32 MiB of them)."""
    w = _weights.get(device)
    if w is None or w.numel() < n:
        # Odd weights from an LCG over the positions of one chunk; each chunk scales them by its own odd factor.
        idx = torch.arange(n, dtype=torch.int64, device=device)
        w = (idx * _signed(0x5851F42D4C957F2D) + _signed(0x14057B7EF767814F)) | 1
        _weights[device] = w
    return w


def prepare(device: str) -> None:
    """Make this device's chunk weights now. A worker calls it while getting ready, when nothing
    else is allocated: made later, the 32 MiB could be carved out of a multi-gigabyte free block
    and pin it, so that the next allocation of that size needs a block of its own."""
    where = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    _chunk_weights(where, CHUNK_WORDS)  # keyed as a tensor's own .device will be


def _words_sum(t: torch.Tensor) -> int:
    """The weighted sum of ``t``'s bytes as 8-byte words (the tail zero-padded), mod 2**64."""
    flat = t.detach()
    if not flat.is_contiguous() or flat.storage_offset() * flat.element_size() % 8:
        flat = flat.contiguous() if not flat.is_contiguous() else flat.clone()
    raw = flat.reshape(-1).view(torch.uint8)
    whole = raw.numel() // 8
    words = raw[: whole * 8].view(torch.int64)
    tail = raw[whole * 8:]
    w = _chunk_weights(raw.device, min(whole, CHUNK_WORDS))
    total = torch.zeros((), dtype=torch.int64, device=raw.device)
    for k, start in enumerate(range(0, whole, CHUNK_WORDS)):
        part = words[start:start + CHUNK_WORDS]
        total += (part * w[: part.numel()]).sum() * _signed(_mix(k))
    value = int(total.item()) & _MASK
    for i, byte in enumerate(tail.tolist()):
        value = (value + _mix(whole + i) * byte) & _MASK
    return value


def digest(value) -> str:
    """Fingerprint of one value: a tensor's dtype, shape and bytes, or anything else's repr."""
    h = hashlib.sha256()
    for _, v in leaves(value):
        if isinstance(v, torch.Tensor):
            h.update(f"{v.dtype}{tuple(v.shape)}".encode())
            if v.numel():
                h.update(_words_sum(v).to_bytes(8, "little"))
        else:
            h.update(repr(v).encode())
    return h.hexdigest()[:32]


def digests(values) -> list[str]:
    """One fingerprint per value of a list (per input of a set)."""
    return [digest(v) for v in values]


_sample_index: dict[tuple[int, torch.device], torch.Tensor] = {}


def _positions(numel: int, device: torch.device) -> torch.Tensor:
    """SAMPLE fixed flat positions for a tensor of ``numel`` elements, on ``device`` (made once)."""
    key = (numel, device)
    idx = _sample_index.get(key)
    if idx is None:
        gen = torch.Generator().manual_seed(numel)
        idx = _sample_index[key] = torch.randint(numel, (SAMPLE,), generator=gen).to(device)
    return idx


def sample(value) -> list:
    """A fixed subset of every output's values (non-tensors as they are), kept where the output
    is: comparing two samples on the device costs a few launches, where moving them to the host
    waited for the device and then ran host operators on a many-threaded pool."""
    out = []
    for _, v in leaves(value):
        if not isinstance(v, torch.Tensor) or v.numel() <= SAMPLE:
            out.append(v.detach().clone() if isinstance(v, torch.Tensor) else v)
            continue
        # take() reads the tensor as if it were flat in row-major order, whatever its strides.
        out.append(torch.take(v.detach(), _positions(v.numel(), v.device)))
    return out
