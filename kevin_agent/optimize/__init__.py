"""``kevin-opt optimize``: a whole model through profile, choice, one run per group on one backend,
the whole model with every kernel, and one delivery (``session``); what it commits beside the model
(``deliver``, ``report``). Its record is ``results.optimize``; its folder ``store.optimizes``."""

from .report import delivered_words, render_markdown, report_paths, summary_lines
from .session import OptimizeSession

__all__ = ["OptimizeSession", "delivered_words", "render_markdown", "report_paths", "summary_lines"]
