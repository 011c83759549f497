"""What the parent and a worker process exchange: a job file in, a reply file out.

Kept free of torch so the parent can use it without importing torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..config import EvalSettings
from ..results import EvalResult
from ..task import TaskProbe


class Job(BaseModel):
    mode: Literal["probe", "compile", "run"]
    settings: EvalSettings
    """The run's evaluation settings, resolved for the device, as the evaluator has them."""
    task_path: str = ""
    class_name: str = "Model"
    candidate_path: str = ""
    reply_path: str
    progress_path: str
    """The worker appends one stage name per line as it moves on."""


class WorkerReply(BaseModel):
    ok: bool
    error_kind: Literal["", "task", "environment", "compile", "runtime"] = ""
    error: str = ""
    eval: EvalResult | None = None
    """Run mode: the result as far as the worker knows it (no compile fields)."""
    probe: TaskProbe | None = None
    device_name: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
