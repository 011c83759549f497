"""``kevin-opt profile``: the model's forward profiled in a worker, its modules ranked."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..config import EvalSettings
from .modelfile import ModelFile
from .process import checked, run_model_job
from .ranking import rank
from .records import ModelProfile

DEFAULT_FORWARDS = 10


def profile_model(model_file: ModelFile, settings: EvalSettings, *, forwards: int = DEFAULT_FORWARDS,
                  timeout_s: float | None = None, on_note: Callable[[str], None] | None = None) -> ModelProfile:
    """The ranked profile of one forward of the model in ``model_file``."""
    started = time.monotonic()
    reply = checked(run_model_job({"mode": "profile", "settings": settings, "model_path": str(model_file.path),
                                   "forwards": forwards},
                                  timeout_s=timeout_s or settings.run_timeout_s, on_note=on_note), model_file)
    profile = reply.profile.model_copy(update={"model_file": model_file.given,
                                               "wall_s": round(time.monotonic() - started, 3)})
    return rank(profile)
