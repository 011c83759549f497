"""Where a report's three files go, and writing them."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from ...results import RunInfo, TurnRecord
from ...results.records import E2EResult, to_json
from .chart import plot_speedups
from .data import build_report_data
from .markdown import render_markdown

# BaseModel has a deprecated ``json()`` method; the field named json deliberately replaces it.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "json"', category=UserWarning)

    class ReportPaths(BaseModel):
        markdown: Path
        json: Path
        chart: Path



def report_stem_paths(out_dir: Path, stem: str) -> ReportPaths:
    base = out_dir / f"{stem}_kevin_report"
    return ReportPaths(markdown=base.with_suffix(".md"), json=base.with_suffix(".json"), chart=base.with_suffix(".png"))


def write_report(info: RunInfo, records: Sequence[TurnRecord], out_dir: Path, stem: str) -> ReportPaths:
    """Write ``<stem>_kevin_report.md``, ``.json`` and ``.png`` into ``out_dir``."""
    return write_report_files(info, records, report_stem_paths(out_dir, stem))


def write_report_files(info: RunInfo, records: Sequence[TurnRecord], paths: ReportPaths, *,
                       e2e: E2EResult | None = None) -> ReportPaths:
    paths.markdown.parent.mkdir(parents=True, exist_ok=True)
    plot_speedups(info, records, paths.chart)
    paths.markdown.write_text(render_markdown(info, records, paths.chart.name, e2e=e2e), encoding="utf-8")
    paths.json.write_text(to_json(build_report_data(info, records, e2e=e2e)), encoding="utf-8")
    return paths
