"""Numbers as every view prints them: the progress lines, `show`, the report and the TUI."""

from __future__ import annotations

from .results import TimingStats


def fmt_speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def fmt_ms(stats: TimingStats | None) -> str:
    """A median time, in microseconds below 0.1 ms."""
    if stats is None:
        return "-"
    ms = stats.median_ms
    return f"{ms * 1000:.1f} µs" if ms < 0.1 else f"{ms:.3f} ms"
