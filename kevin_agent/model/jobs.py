"""The model's kind of worker (``ModelWorker``) and its messages: a ``ModelJob`` in, a ``ModelReply``
out, and between them the ``Note``s that say what it is doing (``workers.messages``). Kept free of
torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .. import workers
from .records import ModelProfile

ErrorKind = Literal["", "model", "module", "capture", "fit", "environment", "kernel"]


class ModelJob(workers.Job):
    """A model worker's job; its ``settings`` (device, seed, threads, warm-up and timed runs,
    tolerance) as an evaluation has them."""

    KIND = "model-job"
    mode: Literal["profile", "extract", "e2e"]
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


class ModelReply(workers.Reply):
    KIND = "model-reply"
    error_kind: ErrorKind = ""
    """model: the model file cannot be built or run; module: no such module; capture: it cannot
    be captured; fit: the model does not fit the device; kernel: the kernel cannot be installed."""
    paths: list[str] = Field(default_factory=list)
    """module: the module paths the model has."""
    profile: ModelProfile | None = None
    tasks: list[CapturedTask] = Field(default_factory=list)
    e2e: E2ERun | None = None


class ModelWorker(workers.WorkerProcess):
    """A model worker: ``model.worker.main`` with a ``ModelJob``, answering a ``ModelReply``. The
    person's model runs only in there: the tool's own process never imports it or touches the device."""

    ENTRY = "kevin_agent.model.worker.main"
    JOB = ModelJob
    REPLY = ModelReply
    PREFIX = "kevin-model-"
