"""The report's chart: speedup over turns, one line per trajectory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...results.winner import winner
from ...results import RunInfo, TurnRecord


def plot_speedups(info: RunInfo, records: Sequence[TurnRecord], path: Path) -> None:
    """Speedup over turns, one line per trajectory; failed turns sit at 0, marked with x."""
    fig = speedup_figure(info, records)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")


def speedup_figure(info: RunInfo, records: Sequence[TurnRecord]):
    """The chart's ``matplotlib.figure.Figure``."""
    # The object API with the Agg canvas leaves pyplot's global state (and backend) alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    best = winner(info, records)
    for trajectory in sorted({r.trajectory for r in records}):
        recs = sorted((r for r in records if r.trajectory == trajectory), key=lambda r: r.turn)
        ok = [r.correct and r.speedup is not None for r in recs]
        ys = [r.speedup if good else 0.0 for r, good in zip(recs, ok)]
        (line,) = ax.plot([r.turn for r in recs], ys, linewidth=1.5, label=f"trajectory {trajectory}")
        for good, marker in ((True, "o"), (False, "x")):
            points = [(r.turn, y) for r, y, g in zip(recs, ys, ok) if g is good]
            if points:
                ax.scatter(*zip(*points), marker=marker, s=40 if good else 60, color=line.get_color(),
                           zorder=3, clip_on=False)
    if best is not None:
        # The star sits at the number its label says: the confirmed median where the run confirmed
        # it (the turn's own measurement, the dot under it, is said beside it).
        own = best.record.speedup
        confirmed = (f" confirmed (trajectory {best.trajectory}, turn {best.turn}; its turn {own:.2f}x)"
                     if best.confirmed is not None and own is not None
                     else f" (trajectory {best.trajectory}, turn {best.turn})")
        ax.scatter([best.turn], [best.speedup], marker="*", s=260, color="gold", edgecolors="black",
                   zorder=4, label=f"best: {best.speedup:.2f}x{confirmed}")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="1.0x (eager)")
    ax.set_xlabel("turn")
    ax.set_ylabel("speedup vs eager (x = not correct)")
    ax.set_title("Speedup over turns")
    if records:
        ax.set_xticks(sorted({r.turn for r in records}))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best", ncol=1 + len({r.trajectory for r in records}) // 8)
    fig.tight_layout()
    return fig
