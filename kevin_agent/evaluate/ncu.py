"""What the parent and the Nsight Compute target share: the target's job and the NVTX range it
profiles. Torch-free, so the tool's process can write the job (``parent/nsight.py``) that the
target (``worker/ncu_target.py``) reads under ``ncu``."""

from __future__ import annotations

from pydantic import BaseModel

from ..config import EvalSettings

RANGE = "kevin-candidate"
"""The NVTX range around the profiled calls."""


class NcuJob(BaseModel):
    """What the target runs: the task, the candidate (built), how many calls to profile."""

    settings: EvalSettings
    task_path: str
    class_name: str = "Model"
    candidate_path: str
    calls: int = 1
