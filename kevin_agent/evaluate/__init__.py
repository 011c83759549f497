"""Evaluation of candidates outside the tool's process: compile, correctness, timing.

``LocalEvaluator`` implements ``protocols.Evaluator``; ``worker`` is the process each candidate
runs in (``candidate`` checks and times it there); ``reference`` and ``trials`` hold the task's
reference data, made once; ``gate`` decides who uses the device when; ``warm`` starts workers
ahead of need; ``correctness`` and ``timing`` document the protocol and its tolerances.
"""

from __future__ import annotations

from ..config import EvalSettings
from .evaluator import LocalEvaluator
from .machine import detect_device

__all__ = ["EvalSettings", "LocalEvaluator", "detect_device"]
