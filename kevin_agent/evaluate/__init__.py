"""Evaluation of candidates outside the tool's process: compile, correctness, timing.

Laid out by the process a line runs in:

- ``parent/``: the tool's side (``LocalEvaluator`` implements ``protocols.Evaluator``; the
  probe, the device gate, warm workers, builds, the confirmation's parent side). Never imports
  torch. The worker processes themselves are started, followed and reaped by ``workers``.
- ``toolchain/``: building candidates (the build cache, the fast ``load_inline`` path, the
  precompiled and the light headers).
- ``worker/``: inside a worker process (the entry point, the task's code, correctness, timing,
  the reference data's worker side, the confirmation's rounds, the guards); its package exports
  what other kinds of worker measure with.

Beside them, what both sides read: ``jobs`` (the evaluation's kind of worker and its messages),
``ncu`` (the Nsight Compute target's job),
``reference`` (the reference data's metadata and the stage limits), ``memory`` and
``plausibility`` (rules on numbers), ``rounds`` (the statistics of timed rounds, and a
confirmation's workers pooled).

Outside this package only this face is imported (for the tool's process) and ``worker``'s (inside
other workers); ``tests/test_architecture.py`` checks it.
"""

from __future__ import annotations

from ..config import EvalSettings
from .parent.builds import compile_in
from .parent.evaluator import LocalEvaluator
from .parent.machine import detect_device
from .parent.nsight import profile_kernel

__all__ = ["EvalSettings", "LocalEvaluator", "compile_in", "detect_device", "profile_kernel"]
