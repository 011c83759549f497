"""Evaluation of candidates outside the tool's process: compile, correctness, timing.

Laid out by the process a line runs in:

- ``parent/``: the tool's side (``LocalEvaluator`` implements ``protocols.Evaluator``; the
  worker processes as the parent sees them, the probe, the device gate, warm workers, builds,
  the confirmation's parent side). Never imports torch.
- ``toolchain/``: building candidates (the build cache, the fast ``load_inline`` path, the
  precompiled and the light headers).
- ``worker/``: inside a worker process (the entry point, the task's code, correctness, timing,
  the reference data's worker side, the confirmation's rounds, the guards).

Beside them, what both sides read: ``jobs`` (the messages between them), ``reference`` (the
reference data's metadata and the stage limits), ``memory`` and ``plausibility`` (rules on
numbers), ``rounds`` (the statistics of timed rounds, and a confirmation's workers pooled).
"""

from __future__ import annotations

from ..config import EvalSettings
from .parent.evaluator import LocalEvaluator
from .parent.machine import detect_device

__all__ = ["EvalSettings", "LocalEvaluator", "detect_device"]
