"""The benchmark report of a run: markdown for people (``markdown``), JSON for tools (``data``), a
PNG chart (``chart``), written side by side (``files``).

Everything here reads the records as stored (``RunInfo`` and ``TurnRecord``), so the report
of a finished run can be rebuilt at any time from its run directory. The best kernel and its
numbers are the confirmation's (``results.winner``) where the run's best kernels were
confirmed; the per-turn numbers stay each turn's own.
"""

from .chart import plot_speedups
from .data import build_report_data, stage_totals
from .files import ReportPaths, report_stem_paths, write_report, write_report_files
from .markdown import render_markdown

__all__ = ["ReportPaths", "build_report_data", "plot_speedups",
           "render_markdown", "report_stem_paths", "stage_totals", "write_report", "write_report_files"]
