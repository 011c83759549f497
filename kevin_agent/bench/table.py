"""The bench's table, from its folder: ``table.json`` (``BenchTable``, through the records'
serializer), ``table.csv`` (one row per task), ``table.md`` (what ``kevin-opt show BENCH`` prints)
and ``fast_p.png`` (the fast_p curve, against eager and, where measured, ``torch.compile``)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..formatting import counted, fmt_seconds, fmt_speedup
from ..results.bench import FAST_P, BenchTable, Metrics, TaskResult
from ..results.records import to_json
from ..results.scoring import metrics, p_key
from .store import BenchStore

TABLE_JSON, TABLE_CSV, TABLE_MD, FAST_P_PNG = "table.json", "table.csv", "table.md", "fast_p.png"


def build_table(store: BenchStore, *, device_name: str = "") -> BenchTable:
    """The table as the bench stands: rows in the bench's order, scores over the tasks with a result."""
    info, results = store.info, store.results()
    rows = [results[t.task_id] for t in info.tasks if t.task_id in results]
    k = info.trajectories or max((len(r.trajectories) for r in rows), default=1) or 1
    levels = sorted({t.level for t in info.tasks if t.level})
    by_level = {}
    if levels and all(t.level for t in info.tasks):
        by_level = {level: metrics([r for r in rows if r.level == level], k) for level in levels
                    if any(r.level == level for r in rows)}
    return BenchTable(
        bench_id=info.bench_id, status=store.status(), created_at=info.created_at, device=info.device,
        device_name=device_name, backend=info.backend, model=info.model, trajectories=info.trajectories,
        turns=info.turns, where=info.where, tasks_total=len(info.tasks), tasks_done=len(rows),
        pending=[t.task_id for t in info.tasks if t.task_id not in results], rows=rows,
        overall=metrics(rows, k) if rows else None, levels=by_level, wall_s=round(info.wall_s, 1),
        skipped=info.skipped)


CSV_FIELDS = ["task_id", "level", "status", "correct", "correct_trajectories", "trajectories", "speedup",
              "confirmed", "ci95_low", "ci95_high", "speedup_vs_compile", "first_correct_turn", "turns_done",
              "wall_s", "eval_device_s", "run_id", "kernel", "error"]


def table_csv(table: BenchTable) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        writer.writerow({
            "task_id": row.task_id, "level": row.level or "", "status": row.status, "correct": int(row.correct),
            "correct_trajectories": sum(1 for t in row.trajectories if t.correct),
            "trajectories": len(row.trajectories), "speedup": _num(row.speedup), "confirmed": int(row.confirmed),
            "ci95_low": _num(row.ci95[0] if row.ci95 else None), "ci95_high": _num(row.ci95[1] if row.ci95 else None),
            "speedup_vs_compile": _num(row.speedup_vs_compile), "first_correct_turn": row.first_correct_turn or "",
            "turns_done": row.turns_done, "wall_s": f"{row.wall_s:.1f}", "eval_device_s": f"{row.eval_device_s:.2f}",
            "run_id": row.run_id or "", "kernel": row.kernel or "", "error": (row.error or "").strip()})
    return out.getvalue()


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def _row_cells(row: TaskResult) -> list[str]:
    per = "".join("✓" if t.correct else "·" for t in row.trajectories) or "-"
    if row.status == "failed":  # its error in full under the table: a cell holds one short line
        return [row.task_id, "failed (below)", per, "-", "-", "-", f"{fmt_seconds(row.wall_s)}, {row.turns_done} "
                f"turn{'s' if row.turns_done != 1 else ''}"]
    speedup = fmt_speedup(row.speedup) + (" conf" if row.confirmed else "") if row.correct else "-"
    return [row.task_id, "correct" if row.correct else "incorrect", per, speedup,
            fmt_speedup(row.speedup_vs_compile) if row.correct else "-",
            str(row.first_correct_turn) if row.first_correct_turn else "-",
            f"{fmt_seconds(row.wall_s)}, {row.turns_done} turn{'s' if row.turns_done != 1 else ''}"]


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|",
            *("| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows)]


def metrics_lines(m: Metrics) -> list[str]:
    """The paper's table for one set of tasks."""
    head = ["", f"correct best@{m.k}", f"correct avg@{m.k}", f"speedup best@{m.k}", f"speedup avg@{m.k}",
            "fast_1", "fast_1.5", "geomean (correct)"]
    rows = []
    for scores in (m.eager, m.compile):
        if scores is None:
            continue
        rows.append([f"vs {scores.baseline}", _pct(m.correct_best_at_k), _pct(m.correct_avg_at_k),
                     fmt_speedup(scores.speedup_best_at_k), fmt_speedup(scores.speedup_avg_at_k),
                     _pct(scores.fast_1), _pct(scores.fast_1_5), fmt_speedup(scores.geomean_correct)])
    curve_head = ["fast_p", *(f"p={p_key(p)}" for p in FAST_P)]
    curve = [[f"vs {s.baseline}", *(_pct(s.fast_p[p_key(p)]) for p in FAST_P)] for s in (m.eager, m.compile) if s]
    lines = _md_table(head, rows) + [""] + _md_table(curve_head, curve)
    if m.compile is None and m.correct_tasks:
        lines.append("\ntorch.compile was not measured for every correct task (on the cpu device it is off unless "
                     "--compare-compile): no scores against it.")
    return lines


def render_markdown(table: BenchTable) -> str:
    lines = [f"# Bench {table.bench_id}", "",
             f"{table.tasks_done}/{table.tasks_total} tasks, {table.status}; {table.backend} / {table.model} on "
             f"{table.device}{f' ({table.device_name})' if table.device_name else ''}, "
             f"{counted(table.trajectories, 'trajectory', 'trajectories') if table.trajectories else 'default trajectories'}"
             f" x {counted(table.turns, 'turn')}, {table.where}; "
             f"{fmt_seconds(table.wall_s)}.", ""]
    if table.pending:
        lines += [f"Not finished: {', '.join(table.pending)} (`kevin-opt resume {table.bench_id}`).", ""]
    lines += ["## Tasks", ""]
    lines += _md_table(["task", "result", "per trajectory", "best speedup", "vs torch.compile", "first correct turn",
                        "time"], [_row_cells(r) for r in table.rows])
    failed = [r for r in table.rows if r.status == "failed"]
    if failed:
        lines += ["", "## Failed tasks", ""]
        for r in failed:
            lines += [f"{r.task_id} ({r.path}):", "", "```", (r.error or "failed").strip(), "```", ""]
    if table.skipped:
        lines += ["", "## Skipped (not task files)", "", *(f"- {path}: {why}" for path, why in table.skipped.items())]
    if table.overall is not None:
        lines += ["", f"## Over the bench ({table.overall.tasks} tasks; an incorrect or failed task counts 0, "
                      "fast_p counts every task in N)", "", *metrics_lines(table.overall)]
    for level, m in table.levels.items():
        lines += ["", f"## {level} ({m.tasks} tasks)", "", *metrics_lines(m)]
    return "\n".join(lines) + "\n"


def plot_fast_p(table: BenchTable, path: Path) -> None:
    """The fast_p curve: the share of tasks faster than p times the baseline, over p."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    sets = [("all tasks", table.overall)] + [(level, m) for level, m in table.levels.items()]
    for label, m in sets:
        if m is None:
            continue
        for scores, style in ((m.eager, "-"), (m.compile, "--")):
            if scores is None:
                continue
            ax.plot(list(FAST_P), [scores.fast_p[p_key(p)] for p in FAST_P], style, marker="o",
                    label=f"{label} vs {scores.baseline}")
    ax.set_xlabel("speedup threshold p")
    ax.set_ylabel("fast_p (share of all tasks)")
    ax.set_title(f"fast_p over {table.tasks_done} tasks")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(list(FAST_P))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png")


def write_table(store: BenchStore, *, device_name: str = "") -> BenchTable:
    """Every form of the table into the bench folder, each file replaced whole."""
    table = build_table(store, device_name=device_name)
    for name, text in ((TABLE_JSON, to_json(table)), (TABLE_CSV, table_csv(table)),
                       (TABLE_MD, render_markdown(table))):
        tmp = store.dir / f"{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(store.dir / name)
    if table.overall is not None:
        tmp = store.dir / f"{FAST_P_PNG}.tmp"
        plot_fast_p(table, tmp)
        tmp.replace(store.dir / FAST_P_PNG)
    return table
