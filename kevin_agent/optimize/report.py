"""The model report an optimize commits beside the model: ``<model>_kevin_model_report.md`` for
people, ``.json`` for tools (the optimize's record, through the one serializer) and ``.png``.

Per group: its share of the forward, its kernel's confirmed speedup with its interval, the
signatures it was verified at (the guard runs it there alone), its contribution in the whole model
and its run; then the model before and after, and Amdahl's prediction against the measurement.
"""

from __future__ import annotations

from pathlib import Path

from ..delivery.hub_layer import mapping_lines
from ..model.marks import read_envelope
from ..model.table import compiled_lines, outputs_line
from ..results.optimize import GroupRun, OptimizeRecord
from ..results.records import to_json


def report_paths(model_path: Path) -> list[Path]:
    base = model_path.with_name(f"{model_path.stem}_kevin_model_report")
    return [base.with_suffix(".md"), base.with_suffix(".json"), base.with_suffix(".png")]


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def speedup_words(value: float | None, interval: list[float] | None) -> str:
    """``1.48x [1.41, 1.55]``: a speedup with its 95% interval, where it has one."""
    return _x(value) + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if value is not None and interval else "")


def whole_model_lines(record: OptimizeRecord) -> list[str]:
    """The whole model with the kernels, for the end of ``optimize``: one speedup, with its interval,
    the one the kept kernels were kept or dropped on; then each group's part and the outputs."""
    e2e = record.e2e
    if e2e is None:
        return []
    measured = [g for g in record.groups if g.state in ("kept", "dropped")]
    kept = record.kept
    n = len(kept) if kept else len(measured)
    them = (f"the {n} kept kernel{'s' if n != 1 else ''}" if kept
            else f"{'all ' if n > 1 else ''}the {n} kernel{'s' if n != 1 else ''}")
    how = (f"95% interval; the forward without them over the forward with them, timed interleaved in "
           f"{e2e.rounds} round{'s' if e2e.rounds != 1 else ''} of fresh workers; {e2e.baseline_ms:.3g} ms per "
           "forward without them")
    their = "their" if n > 1 else "its"
    amdahl = (f"; Amdahl predicts {e2e.predicted:.2f}x from {their} {100 * e2e.share:.1f}% share and {their} own "
              f"speedup{'s' if n > 1 else ''}" if e2e.predicted is not None and e2e.share is not None else "")
    lines = [f"whole model with {them}: {speedup_words(e2e.speedup, e2e.speedup_interval)} ({how}){amdahl}"]
    for g in measured:
        if g.state == "dropped":
            lines.append(f"  {g.name}: dropped: {g.why}")
            continue
        part = (f"without it the model is {_contribution(g)} slower; " if g.contribution is not None
                and len(kept) > 1 else "")
        lines.append(f"  {g.name}: kept: {part}its kernel ran at {g.kernel_calls:g} calls per forward, the "
                     f"original forward at {g.fallback_calls:g}")
    lines.append(outputs_line(e2e))
    return lines


def _interval(g: GroupRun) -> str:
    c = g.confirmation
    return f"{_x(g.speedup)} [{c.ci95[0]:.2f}, {c.ci95[1]:.2f}]" if c is not None and c.ci95 else _x(g.speedup)


def _contribution(g: GroupRun) -> str:
    if g.contribution is None:
        return "-"
    lo_hi = g.contribution_interval
    return _x(g.contribution) + (f" [{lo_hi[0]:.2f}, {lo_hi[1]:.2f}]" if lo_hi else "")


def _compiled_rows(e2e) -> list[str]:
    """The same model under torch.compile, where it was measured."""
    lines = compiled_lines(e2e)
    return [*(f"- {line}" for line in lines), ""] if lines else []


def _sentence(words: str) -> str:
    return words[:1].upper() + words[1:] + ("" if words.endswith(".") else ".")


def render_markdown(record: OptimizeRecord) -> str:
    e2e = record.e2e
    name = Path(record.model_file).name
    lines = [f"# kevin-opt optimize: {name}", "",
             f"Optimize `{record.optimize_id}` on {record.device_name or record.device}: "
             f"{len(record.kept)} kernel{'s' if len(record.kept) != 1 else ''} installed, each guarded to the "
             "signatures it was verified at (any other call runs the module's own forward).", ""]
    if e2e is not None:
        lines += ["## The whole model", "",
                  "| | speedup (95% interval) |", "|---|---|",
                  f"| measured, with the kept kernels | {speedup_words(record.measured, record.measured_interval)} |",
                  f"| Amdahl's prediction | {_x(record.predicted)} |", "",
                  f"{_sentence(outputs_line(e2e))} The speedup is the median of the forward without the kernels "
                  "over the forward with them "
                  f"({e2e.baseline_ms:.3f} ms without them), timed interleaved call by call in {e2e.rounds} "
                  "rounds of fresh workers and pooled, with the 95% interval of that median; the kernels would "
                  "be dropped together only where the whole interval were below 1. The prediction is "
                  "1 / (1 - sum(share) + sum(share / speedup)) over the kept kernels, from the profile's shares "
                  "and each kernel's confirmed speedup on its task.", "", *_compiled_rows(e2e)]
    lines += ["## Groups", "",
              "| group | share | kernel on its task (95% interval) | signatures | in the whole model | state | run |",
              "|---|---|---|---|---|---|---|"]
    for g in record.groups:
        sigs = "<br>".join(f"`{s}`" for s in g.signatures) or "-"
        state = g.state + (f": {g.why}" if g.why else "")
        run = f"`.kevin/runs/{g.run_id}`" if g.run_id else "-"
        lines.append(f"| `{g.name}` ({g.class_name}) | {100 * g.share:.1f}% | {_interval(g)} | {sigs} | "
                     f"{_contribution(g)} | {state} | {run} |")
    lines += ["", "`in the whole model`: the model with every kept kernel over the model with all of them but "
              "this one (for one kernel alone, the whole model's speedup).", "",
              "## The plan", "", *[f"    {line}" for line in record.plan], ""]
    if record.model_change:
        lines += ["## The change to the model file", "", *([record.original, ""] if record.original else []),
                  "```diff", record.model_change.rstrip("\n"), "```", ""]
    lines += _hub_layer_lines(record)
    lines += [f"Show it again with `kevin-opt show {record.optimize_id}`; each group's run with "
              "`kevin-opt show RUN`.", ""]
    return "\n".join(lines)


def _hub_layer_lines(record: OptimizeRecord) -> list[str]:
    """For each kept kernel of a Hugging Face ``kernels`` layer class: how to use it through ``kernelize``."""
    lines = []
    for g in record.kept:
        env = read_envelope(Path(g.kernel_file)) if g.kernel_file else None
        if env is not None and env.layer_name:
            heading = [] if lines else ["## To use it through Hugging Face's kernels", ""]
            lines += [*heading, *mapping_lines(Path(g.kernel_file).stem, env), ""]
    return lines


def plot(record: OptimizeRecord, path: Path) -> None:
    """Per group its kernel's speedup on its task and its contribution in the whole model; the
    whole model predicted and measured."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    groups = [g for g in record.groups if g.speedup is not None]
    labels = [g.name for g in groups] + ["whole model"]
    on_task = [g.speedup for g in groups] + [record.predicted or 0.0]
    in_model = [g.contribution or 0.0 for g in groups] + [record.measured or 0.0]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], on_task, width=0.4, label="on its task (confirmed) / Amdahl's prediction")
    ax.bar([x + 0.2 for x in xs], in_model, width=0.4, label="in the whole model (measured)")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(list(xs), labels, rotation=15, fontsize=8)
    ax.set_ylabel("speedup vs eager")
    ax.set_title(f"{Path(record.model_file).name}: kernels and the whole model")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def write_model_report(record: OptimizeRecord, model_path: Path) -> list[Path]:
    md, js, png = report_paths(model_path)
    md.write_text(render_markdown(record), encoding="utf-8")
    js.write_text(to_json(record), encoding="utf-8")
    plot(record, png)
    return [md, js, png]


def delivered_words(record: OptimizeRecord) -> str | None:
    """``already delivered in <sha>`` for an optimize whose kernels are in the model already
    (committed, or written with --no-commit or outside a repository); None for any other."""
    if record.status == "delivered" and record.commit:
        return f"already delivered in {record.commit[:12]}" + (f" on {record.branch}" if record.branch else "")
    if record.status == "written":
        return "already delivered: written, not committed (" + ", ".join(record.written) + ")"
    return None


def summary_lines(record: OptimizeRecord) -> list[str]:
    """How an optimize stands, for ``show`` and the end of ``optimize``."""
    why = f": {record.why}" if record.why and record.why != record.status else ""  # never "interrupted: interrupted"
    lines = [f"optimize {record.optimize_id}  {record.status}{why}",
             f"model {record.model_file} on {record.device}" + (f" ({record.device_name})" if record.device_name else "")]
    for i, g in enumerate(record.groups, start=1):
        speed = ""
        if g.contribution is not None:
            speed = f"; {g.contribution:.2f}x in the whole model"
        lines.append(f"  {i}. {g.name} ({100 * g.share:.1f}% of the forward): {g.state_words()}{speed}"
                     + (f"  run {g.run_id}" if g.run_id else ""))
    if record.measured is not None:
        lines.append(f"whole model: {speedup_words(record.measured, record.measured_interval)} measured, Amdahl "
                     "predicts " + (f"{record.predicted:.2f}x" if record.predicted else "-"))
    if record.original_commit:
        lines.append(f"commit {record.original_commit} (the model file as it was)")
    if record.commit:
        lines.append(f"commit {record.commit}")
    return lines
