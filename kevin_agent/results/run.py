"""``run.json``: what a run was, rewritten as its state changes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .confirmation import BestKernel, Confirmation
from .device import DeviceFacts
from .versioned import RUN_SCHEMA, Versioned, schema_field


class TaskRef(BaseModel):
    path: str
    name: str
    class_name: str
    digest: str


class RunInfo(Versioned):
    """``run.json``: what a run was, rewritten as its state changes."""

    schema_: int = schema_field(RUN_SCHEMA)
    run_id: str
    created_at: str
    updated_at: str = ""
    status: str = "running"
    """running | completed | target_reached | roofline_reached | stopped | interrupted | failed"""
    task: TaskRef
    device: str
    device_name: str = ""
    device_facts: DeviceFacts | None = None
    """What the GPU's driver says about it (NVML), and so the peaks it implies (None off NVIDIA GPUs)."""
    backend: str
    model: str
    turns: int
    trajectories: int
    config: dict = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    """python, torch, cuda, driver, kevin-opt, compiler."""
    best: BestKernel | None = None
    confirmation: Confirmation | None = None
    """The last confirmation of the run's best kernels (None: never confirmed)."""
    commit: str | None = None
    """Sha of the commit the tool made for this run, if any."""
    delivery: str | None = None
    """What delivering the best kernel did, in words ("committed 3d405aa17a on main",
    "written, not committed (--no-commit)", "not written (declined)", ...)."""

    @property
    def language(self) -> str:
        """The kernels' language, cuda or triton: a run recorded before there was a choice wrote CUDA."""
        return self.config.get("language") or "cuda"
