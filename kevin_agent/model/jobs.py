"""What the parent and a model worker exchange: a job file in, a reply file out (as the
evaluation's workers do, ``evaluate/jobs.py``). Kept free of torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..config import EvalSettings
from .records import ModelProfile

ErrorKind = Literal["", "model", "module", "capture", "fit", "environment", "kernel"]


class ModelJob(BaseModel):
    mode: Literal["profile", "extract", "e2e"]
    settings: EvalSettings
    """Device, seed, threads, warm-up and timed runs, tolerance: as an evaluation has them."""
    model_path: str
    forwards: int = 5
    """profile: forwards under the profiler."""
    modules: list[str] = Field(default_factory=list)
    """extract: the module paths to capture."""
    model_file_name: str = ""
    """extract: the model file's name as the task files should quote it."""
    kernel_path: str = ""
    """e2e: the kernel module to install (empty: the model as it is)."""
    outputs_path: str = ""
    """e2e: where the model's outputs are written (without a kernel) or read to compare (with one)."""
    reply_path: str
    progress_fd: int
    control_fd: int


class CapturedTask(BaseModel):
    """extract: one module's task file, or why there is none."""

    module: str
    source: str = ""
    """The task file's text."""
    error: str = ""
    """Why no strategy captured it, naming the construct that stopped each."""


class E2ERun(BaseModel):
    """e2e: one worker's forward of the whole model."""

    forward_ms: float
    """Median forward (with the kernel, where one is installed)."""
    plain_ms: float | None = None
    """With a kernel: the median forward without it, timed in the same rounds."""
    speedup: float | None = None
    """With a kernel: the median over rounds of the forward without it over the forward with it."""
    outputs_match: bool = True
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch: str = ""
    kernel_calls: float = 0.0
    """Per forward."""
    fallback_calls: float = 0.0


class ModelReply(BaseModel):
    ok: bool
    error_kind: ErrorKind = ""
    """model: the model file cannot be built or run; module: no such module; capture: it cannot
    be captured; fit: the model does not fit the device; kernel: the kernel cannot be installed."""
    error: str = ""
    hint: str = ""
    paths: list[str] = Field(default_factory=list)
    """module: the module paths the model has."""
    device_name: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    profile: ModelProfile | None = None
    tasks: list[CapturedTask] = Field(default_factory=list)
    e2e: E2ERun | None = None
