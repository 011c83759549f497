"""Evaluation settings, resolved from the run configuration once the device is known."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..config import RunConfig


def default_cache_dir() -> Path:
    """``$KEVIN_CACHE_DIR`` or ``~/.cache/kevin-opt/builds``."""
    env = os.environ.get("KEVIN_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kevin-opt" / "builds"


class EvalSettings(BaseModel):
    """How candidates are compiled, checked and timed on one device."""

    device: Literal["cpu", "cuda"]
    correctness_trials: int = Field(5, ge=1)
    """Correctness trials, each with a fresh seed; the input distribution alternates."""
    atol: float | None = None
    """Absolute tolerance; None means the per-dtype default (see ``correctness``)."""
    rtol: float | None = None
    """Relative tolerance; None means the per-dtype default."""
    warmup_runs: int = Field(3, ge=0)
    """Untimed runs before timing."""
    timed_runs: int = Field(20, ge=1)
    """Timed runs; the median is reported."""
    compare_compile: bool = False
    """Also time ``torch.compile`` of the reference."""
    compile_timeout_s: float = Field(600.0, gt=0)
    """Wall-clock limit for building one candidate."""
    run_timeout_s: float = Field(300.0, gt=0)
    """Wall-clock limit for checking and timing one candidate (and for probing the task)."""
    parallel_compiles: int = Field(4, ge=1)
    """Candidates of one call compiled at once."""
    cache_dir: Path = Field(default_factory=default_cache_dir)
    """Build cache root: one folder per source and toolchain (``TORCH_EXTENSIONS_DIR``)."""
    cpu_threads: int | None = Field(1, ge=1)
    """cpu device: intra-op threads for the candidate and the reference alike (None: torch's
    default). One thread keeps timings stable on shared machines and compares like with like."""
    op_audit: bool = True
    """Run the candidate once under a dispatch mode and reject it (check_failed) if it calls a
    PyTorch compute operator, from Python or from its C++ code: the run-time side of the
    no-torch-compute rule. Off only for tests whose candidates are plain PyTorch on purpose."""
    seed: int = 0
    """Base seed: trial ``i`` uses ``seed + i``; models are built under ``seed``."""

    @classmethod
    def from_config(cls, cfg: RunConfig, device: Literal["cpu", "cuda"]) -> EvalSettings:
        resolved = cfg.model_copy(update={"device": device}).resolved_device_defaults()
        return cls(
            device=device,
            correctness_trials=cfg.correctness_trials,
            atol=cfg.atol,
            rtol=cfg.rtol,
            warmup_runs=resolved["warmup_runs"],
            timed_runs=resolved["timed_runs"],
            compare_compile=resolved["compare_compile"],
            compile_timeout_s=cfg.compile_timeout_s,
            run_timeout_s=cfg.run_timeout_s,
            parallel_compiles=cfg.parallel_compiles,
        )
