"""Evaluation of candidates outside the tool's process: compile, correctness, timing.

``LocalEvaluator`` implements ``protocols.Evaluator``; ``worker`` is the process each
candidate runs in; ``correctness`` and ``timing`` document the protocol and its tolerances.
"""

from __future__ import annotations

from ..config import EvalSettings
from .evaluator import LocalEvaluator, detect_device

__all__ = ["EvalSettings", "LocalEvaluator", "detect_device"]
