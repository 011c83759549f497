"""Placements: the timing's inputs, and everything a timed call allocates, at several addresses.

A call that takes a few microseconds reads a different time depending on where its buffers lie in
the GPU's memory: on the H200 one fused 2 MiB kernel read 4.5 us in one placement and 4.9-5.2 us in
another of the same process (docs/gpu-runs.md, run 19). Inside one worker the caching allocator
hands every call the same blocks, so the rounds of one worker all see one placement, their
interval is narrow, and five workers read medians up to 9% apart. Going round placements inside
every worker makes what a worker measures the average over placements instead of the luck of one.

On cuda a placement is a memory pool of its own (``torch.cuda.MemPool``: segments of its own, so
addresses of its own) holding one copy of the timing set; a round at that placement runs with the
pool as the allocator's target, so the call's outputs and temporaries come from it as well. On cpu,
and for a single placement, placements are plain copies on the default allocator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


class Placements:
    """Copies of the timing set, each at a placement of its own: ``pools[i]`` (None: the default
    allocator) holds ``copies[i]`` and what the calls at it allocate."""

    def __init__(self, copies: list[list], pools: list | None = None) -> None:
        self.copies = copies
        self._pools = pools if pools is not None else [None] * len(copies)

    @classmethod
    def drawn(cls, draw: Callable[[], list], count: int, device: str) -> Placements:
        """``count`` sets from ``draw``, each drawn into its own pool (cuda, more than one)."""
        pooled = device == "cuda" and count > 1 and hasattr(torch.cuda, "MemPool")
        pools = [torch.cuda.MemPool() if pooled else None for _ in range(max(1, count))]
        copies = []
        for pool in pools:
            with _using(pool):
                copies.append(draw())
        return cls(copies, pools)

    def __len__(self) -> int:
        return len(self.copies)

    @property
    def first(self) -> list:
        """The copy that the warm-up, the launched column and the re-check use."""
        return self.copies[0]

    @contextlib.contextmanager
    def at(self, index: int) -> Iterator[list]:
        """Placement ``index`` (modulo their number): its copy, with what is allocated inside the
        block coming from its pool."""
        i = index % len(self.copies)
        with _using(self._pools[i]):
            yield self.copies[i]

    def others(self) -> Iterator[list]:
        """Each placement after the first in turn, as ``at`` gives it: for the one call there before
        the timed rounds (a call's first time at a placement allocates its outputs there, in memory
        touched for the first time, and read up to 2% slower through the first turn of the rounds)."""
        for i in range(1, len(self.copies)):
            with self.at(i) as copy:
                yield copy

    def close(self) -> None:
        """Gives the copies and the pools back (a pool's segments are freed once it is unused)."""
        self.copies.clear()
        self._pools.clear()


@contextlib.contextmanager
def _using(pool) -> Iterator[None]:
    if pool is None:
        yield
        return
    with torch.cuda.use_mem_pool(pool):
        yield
