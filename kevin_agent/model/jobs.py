"""The model's kind of worker (``ModelWorker``) and its messages: a ``ModelJob`` in, a ``ModelReply``
out, and between them the ``Note``s that say what it is doing (``workers.messages``). Kept free of
torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .. import workers
from .records import ModelProfile

ErrorKind = Literal["", "model", "module", "capture", "fit", "environment", "kernel", "internal"]


class E2EKernel(BaseModel):
    """e2e: one delivered kernel module to put into the model."""

    path: str
    stem: str
    """The name the model file imports it by."""
    members: list[str]
    """The modules it goes into."""
    build_dir: str
    """The extensions folder holding its build (``TORCH_EXTENSIONS_DIR`` while it is imported)."""


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
    kernels: list[E2EKernel] = Field(default_factory=list)
    """e2e: the kernel modules (taken out where the model file installs them itself, without)."""
    with_kernels: bool = False
    """e2e: the model with every kernel in ``kernels`` (else without any of them)."""
    compiled: bool = False
    """e2e with the kernels: also time the model under torch.compile, without them and with them."""
    outputs_path: str = ""
    """e2e: where the model's outputs are written (without the kernels) or read to compare (with them)."""


class CapturedTask(BaseModel):
    """extract: one module's task file, or why there is none."""

    module: str
    source: str = ""
    """The task file's text."""
    members: list[str] = Field(default_factory=list)
    """The group the task is for, each member checked against it (``module`` among them)."""
    not_members: dict[str, str] = Field(default_factory=dict)
    """Instances that look the same as the group but that the task does not reproduce, and why:
    they keep their original forward."""
    error: str = ""
    """Why no strategy captured it, naming the construct that stopped each."""


class E2EKernelRun(BaseModel):
    """e2e: what one kernel of several did in a worker that had them all installed."""

    kernel_calls: float = 0.0
    """Per forward, over all the modules it is installed at."""
    fallback_calls: float = 0.0
    """Per forward, calls at those modules that ran the original forward."""
    member_calls: dict[str, list[float]] = Field(default_factory=dict)
    """Per forward, at each module it is installed at (its path): [kernel calls, original-forward calls]."""
    alone_match: bool = True
    """The model's outputs with this kernel alone match those without any."""
    alone_mismatch: str = ""
    without_match: bool = True
    """The outputs with every other kernel but not this one match."""
    contribution: float | None = None
    """The median over rounds of the forward with every kernel but this one over the forward with
    all of them (above 1: it makes the model faster). None where it is the only kernel."""
    ratios: list[float] = Field(default_factory=list)
    """That ratio round by round (the parent pools them over workers)."""


class E2ERun(BaseModel):
    """e2e: one worker's forward of the whole model."""

    forward_ms: float
    """Median forward (with the kernels, where they are installed)."""
    plain_ms: float | None = None
    """With kernels: the median forward without any, timed in the same rounds."""
    speedup: float | None = None
    """With kernels: the median over rounds of the forward without them over the forward with them."""
    ratios: list[float] = Field(default_factory=list)
    """That ratio round by round (the parent pools them over workers for the speedup's interval)."""
    outputs_match: bool = True
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch: str = ""
    rounding: str = ""
    """Where the outputs differ beyond the tolerance but are as close to the model's in float32 as
    its own low-precision outputs are: that, in words (and they count as matching)."""
    kernel_calls: float = 0.0
    """Per forward, all kernels together."""
    fallback_calls: float = 0.0
    kernels: list[E2EKernelRun] = Field(default_factory=list)
    """Per kernel, in the job's order."""
    compiled_ms: float | None = None
    """compiled: the median forward under torch.compile without the kernels, timed in the same rounds."""
    compiled_kernel_ms: float | None = None
    """compiled: with every kernel."""
    compiled_speedup: float | None = None
    """compiled: the median over rounds of the compiled forward without the kernels over with them."""
    eager_over_compiled: float | None = None
    """compiled: the median over rounds of the compiled forward without the kernels over the eager
    one with them (at least 1: the kernels in eager are as fast as Inductor without them)."""
    compiled_match: bool = True
    """compiled: its outputs with the kernels match its own without them."""
    compiled_kernel_calls: float | None = None
    """compiled: calls per forward that ran a kernel in the compiled graph (the others' arguments, as
    the model passes them while traced, are not ones their kernels were verified at)."""
    compiled_mismatch: str = ""
    compile_error: str = ""
    """compiled: why the model does not compile (then it is timed in eager alone)."""


class ModelReply(workers.Reply):
    KIND = "model-reply"
    error_kind: ErrorKind = ""
    """model: the model file cannot be built or run; module: no such module; capture: it cannot
    be captured; fit: the model does not fit the device; kernel: the kernel cannot be installed;
    internal: kevin-opt's own machinery failed (not the person's file)."""
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
