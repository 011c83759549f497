"""What Nsight Compute found about one turn's kernel: a short record of each kernel it profiled.

``kevin-opt show RUN --turn N --ncu`` (and ``n`` in the TUI) runs ``ncu`` around the turn's kernel
and keeps its full report (``.ncu-rep``, for Nsight Compute's own viewer) and this record
(``.json``) in the run directory's ``ncu/`` folder.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .records import Record


class Stall(BaseModel):
    """One reason warps waited instead of issuing an instruction."""

    reason: str
    """``long_scoreboard`` (waiting on global memory), ``barrier``, ``math_pipe_throttle``, ..."""
    value: float
    """Cycles per issued instruction spent stalled for it (or samples, where sampled)."""


class NcuKernel(BaseModel):
    """One kernel as Nsight Compute measured it (its first profiled launch; None: not collected)."""

    name: str
    launches: int = 1
    """Launches of it that were profiled."""
    duration_us: float | None = None
    dram_pct: float | None = None
    """DRAM throughput, % of its peak."""
    sm_pct: float | None = None
    """SM (compute) throughput, % of its peak."""
    occupancy_pct: float | None = None
    """Achieved occupancy: active warps, % of the most an SM holds."""
    registers_per_thread: int | None = None
    shared_static_bytes: int | None = None
    """Static shared memory per block."""
    shared_dynamic_bytes: int | None = None
    """Dynamic shared memory per block."""
    block_size: str = ""
    grid_size: str = ""
    stalls: list[Stall] = Field(default_factory=list)
    """The top warp-stall reasons, largest first."""


class NcuProfile(Record):
    """``ncu/t<T>-turn<N>.json`` in the run directory."""

    kind: Literal["ncu"] = "ncu"
    run_id: str
    trajectory: int
    turn: int
    device_name: str = ""
    report_path: str
    """The full report, relative to the run directory (open it with ``ncu-ui``)."""
    kernels: list[NcuKernel]
