"""The report as markdown: the best kernel with its evidence, the confirmation, the winner's
path, every turn, the evaluation time and the flags."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...results.winner import Winner, current, winner
from ...results.lineage import outcome, path_to, tree_lines
from ...formatting import (
    confirmed_line,
    counted,
    floor_words,
    fmt_fraction,
    fmt_launched,
    fmt_memory,
    fmt_signatures,
    fmt_tolerance,
)
from ...model.delivered import report_section
from ...model.table import e2e_lines
from ...results import (
    Confirmation,
    EvalResult,
    LaunchedTiming,
    RunInfo,
    StageTimes,
    TimingStats,
    TurnRecord,
)
from ...results.records import E2EResult
from .data import stage_totals

def _cell(rec: TurnRecord | None, best: TurnRecord | None) -> str:
    if rec is None:
        return "-"
    if rec.correct:
        text = f"{rec.speedup:.2f}x" if rec.speedup is not None else "correct"
        if rec.eval is not None and rec.eval.roofline is not None and rec.eval.roofline.fraction is not None:
            text += f", {fmt_fraction(rec.eval.roofline.fraction)} of roofline"
        return f"**{text}** (best)" if rec is best else text
    return rec.status.label


def _fmt(value: float | None, spec: str = ".3g") -> str:
    return format(value, spec) if value is not None else "-"


def _timing_row(label: str, stats: TimingStats | None, speedup: str, missing: str = "not measured") -> str:
    if stats is None:
        return f"| {label} | {missing} | - | - | - | {speedup} |"
    return (
        f"| {label} | {stats.median_ms:#.4g} | {stats.p10_ms:#.4g} - {stats.p90_ms:#.4g} | "
        f"{stats.std_ms:#.3g} | {stats.runs} | {speedup} |"
    )


def _turn_table(records: Sequence[TurnRecord], best: TurnRecord | None) -> list[str]:
    trajectories = sorted({r.trajectory for r in records})
    turns = sorted({r.turn for r in records})
    by_key = {(r.trajectory, r.turn): r for r in records}
    lines = [
        "| turn | " + " | ".join(f"trajectory {t}" for t in trajectories) + " |",
        "| ---: | " + " | ".join("---" for _ in trajectories) + " |",
    ]
    for turn in turns:
        lines.append(f"| {turn} | " + " | ".join(_cell(by_key.get((t, turn)), best) for t in trajectories) + " |")
    return lines


def _graph_rows(ev: EvalResult) -> list[str]:
    graph = ev.graph
    if graph is None:
        return []
    return [_timing_row(f"kernel in a CUDA graph (per call, {graph.calls} per graph)", graph.runtime, "-",
                        graph.runtime_note or "not measured"),
            _timing_row("eager PyTorch in a CUDA graph (per call)", graph.reference,
                        f"{_fmt(graph.speedup, '.2f')}x" if graph.speedup is not None else "-",
                        graph.reference_note or "not measured")]


def _launched_rows(launched: LaunchedTiming | None, speedup: float) -> list[str]:
    """The times with each call's launches in them, where their speedup differs from the headline's
    (``formatting.LAUNCHES_APART``): what an eager model pays where the host launches slower than the
    GPU runs."""
    if fmt_launched(launched, speedup) is None:
        return []
    return [_timing_row("kernel with its launches (the GPU idle at the call)", launched.runtime, "-"),
            _timing_row("eager PyTorch with its launches", launched.reference, f"{launched.speedup:.2f}x")]


def _signature_lines(ev: EvalResult) -> list[str]:
    """A task with several input signatures: the kernel at each, and the speedup weighted by use."""
    if (line := fmt_signatures(ev)) is None:
        return []
    return [f"Verified {line}.", ""]


def _timing_notes(ev: EvalResult) -> list[str]:
    """How the times were taken, and what the checks on them found."""
    if ev.device != "cuda":
        how = "Times are wall time around each call, the CPU caches flushed before each, median of the runs"
    elif ev.sync is None:  # recorded before report format 2
        how = "Times run up to a device-wide synchronisation after each call, the L2 cache flushed before each"
    else:
        how = ("Times are the GPU's own time for each call: CUDA events around it on its stream, the L2 cache "
               "flushed before each, and the whole call queued before the GPU reaches it, so the host's launch "
               "speed is not in it; median of the runs")
        if ev.graph is not None:
            how += "; the CUDA-graph rows are one replay of a captured graph divided by its calls"
    lines = [how + ".", ""]
    if ev.sync is not None:
        lines += [f"- work off the stream: {max(ev.sync.hidden_ms, 0.0) * 1000:.1f} µs (a device-wide "
                  f"synchronisation added {ev.sync.overhead_ms * 1000:.1f} µs to an empty call; refused above "
                  f"{ev.sync.limit_ms * 1000:.1f} µs)"]
    if ev.floor is not None:
        lines += [f"- physical floor: {ev.floor.floor_ms:.4g} ms ({ev.floor.bytes} bytes of inputs and outputs "
                  f"at {ev.floor.bandwidth_gb_s:.0f} GB/s {ev.floor.bandwidth_source})"
                  + (": **the kernel beat it, which is implausible**" if ev.implausible else "")]
    return lines + ([""] if len(lines) > 2 else [])


def _roofline_lines(best: Winner) -> list[str]:
    """How close the kernel, eager PyTorch and torch.compile come to the device's roofline."""
    roof = best.roofline
    if roof is None or roof.fraction is None:
        return []
    whose = "its confirmed median" if best.confirmed is not None and best.confirmed.roofline is not None else "its time"
    pytorch = [f"eager PyTorch {fmt_fraction(roof.reference_fraction)}"] if roof.reference_fraction is not None else []
    pytorch += [f"`torch.compile` {fmt_fraction(roof.compiled_fraction)}"] if roof.compiled_fraction is not None else []
    return [f"Roofline: the kernel reaches **{fmt_fraction(roof.fraction)}** of it ({whose}), "
            + (f"{' and '.join(pytorch)}. " if pytorch else "")
            + f"The task is {roof.bound}-bound: its floor is {floor_words(roof)}, the least one call takes at the "
            "device's measured speed (its inputs read and its outputs written once"
            + (", the reference's FLOPs done once" if roof.flops else "") + ").", ""]


def _best_section(best: Winner) -> list[str]:
    ev, confirmed = best.record.eval, best.confirmed
    assert ev is not None  # a correct turn always carries its evaluation
    times = confirmed if confirmed is not None else ev
    vs_compile = f"{best.speedup_vs_compile:.2f}x" if best.speedup_vs_compile is not None else "-"
    speedup = f"**{best.speedup:.2f}x**"
    if best.headline is not None:
        low, high = best.headline.ci95
        speedup += f" (95% interval {low:.2f}x - {high:.2f}x)"
    lines = [
        f"## Best kernel: trajectory {best.trajectory}, turn {best.turn}",
        "",
        f"{speedup} faster than eager PyTorch"
        + (f", **{vs_compile}** vs `torch.compile`" if best.speedup_vs_compile is not None else "")
        + (f" on {ev.device_name}" if ev.device_name else "") + ".",
        "",
    ]
    if confirmed is not None:
        lines += [f"Confirmed at the end of the run: verified again on fresh inputs (seeds the run never used), "
                  f"then timed in {confirmed.runs} rounds, each timing the kernel"
                  + (", eager PyTorch and `torch.compile`" if confirmed.compiled_reference is not None
                     else " and eager PyTorch")
                  + " once, interleaved, the cache flushed before every call. The speedup is the "
                  "median of the rounds' ratios, the interval a 95% interval for that median (order "
                  f"statistics). Its own turn measured {best.record.speedup:.2f}x.", ""]
    lines += [
        "| | median (ms) | p10 - p90 (ms) | std (ms) | runs | kernel's speedup over it |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        _timing_row("kernel (`ModelNew`)", times.runtime, "-"),
        _timing_row("eager PyTorch", times.reference, f"{best.speedup:.2f}x"),
        _timing_row("`torch.compile`", times.compiled_reference, vs_compile),
        *_graph_rows(ev),
        *_launched_rows(times.launched, best.speedup),
        "",
        *_signature_lines(ev),
        *_roofline_lines(best),
        *_timing_notes(ev),
        "### Correctness evidence",
        "",
        f"- trials passed: {ev.trials_passed} / {ev.trials} (fresh seeds, alternating input distributions)",
    ]
    if confirmed is not None:
        lines.append(f"- on a second look: {confirmed.trials_passed} / {confirmed.trials} more, on other seeds, "
                     "and the re-check after timing")
    lines += [
        f"- max absolute error: {_fmt(ev.max_abs_err)} (atol {_fmt(ev.atol)})",
        f"- max relative error: {_fmt(ev.max_rel_err)} (rtol {_fmt(ev.rtol)})",
    ]
    if (tolerance := fmt_tolerance(ev)) is not None:
        lines.append(f"- tolerance: {tolerance}")
    if ev.rounding or (confirmed is not None and confirmed.rounding):
        lines.append(f"- {ev.rounding or confirmed.rounding}")
    if ev.memory is not None:
        lines.append(f"- {fmt_memory(ev.memory)}")
    if best.record.summary.strip():
        lines += ["", "### What the kernel does (model's summary)", "", best.record.summary.strip()]
    return lines


def _confirmation_section(confirmation: Confirmation) -> list[str]:
    workers = max(len(confirmation.seeds), 1)
    how = ("in one worker" if workers == 1 else
           f"in each of {workers} workers, each on fresh inputs of its own, their rounds pooled")
    lines = ["## Confirmation", "",
             f"The best {len(confirmation.kernels)} distinct kernels by their turns' own speedups, verified again "
             f"and timed head to head {how}:", "",
             "| kernel | its turn | confirmed | 95% interval | each worker | vs `torch.compile` | rounds | verdict |",
             "| --- | ---: | ---: | --- | --- | ---: | ---: | --- |"]
    best = confirmation.winner
    for k in confirmation.kernels:
        if k.verified and k.ci95 is not None:
            verdict = "**winner**" if k is best else "confirmed"
            if k.implausible:
                verdict += ", flagged: below the physical floor"
            each = (f"{min(k.worker_medians):.2f}x - {max(k.worker_medians):.2f}x"
                    if len(k.worker_medians) > 1 else "-")
            cells = [f"{k.speedup_median:.2f}x", f"{k.ci95[0]:.2f}x - {k.ci95[1]:.2f}x", each,
                     f"{k.speedup_vs_compile_median:.2f}x" if k.speedup_vs_compile_median is not None else "-",
                     str(k.runs)]
        else:
            verdict = "dropped: " + confirmed_line(k).split(": ", 1)[1].replace("|", "/")
            cells = ["-", "-", "-", "-", "-"]
        run = f"{k.run_speedup:.2f}x" if k.run_speedup is not None else "-"
        lines.append(f"| trajectory {k.trajectory}, turn {k.turn} | {run} | " + " | ".join(cells) + f" | {verdict} |")
    return lines


def _path_section(records: Sequence[TurnRecord], best: TurnRecord) -> list[str]:
    """The turns that led to the winner, one row each: where each came from and what it got."""
    lines = ["### The winner's path", "",
             "Each turn's prompt carried the turns above it (their kernels, summaries and feedback).", "",
             "| turn | trajectory | outcome | the model's summary |", "| ---: | ---: | --- | --- |"]
    for rec in path_to(records, (best.trajectory, best.turn)):
        summary = rec.summary.strip().splitlines()[0][:120] if rec.summary.strip() else "-"
        lines.append(f"| {rec.turn} | {rec.trajectory} | {outcome(rec)} | {summary.replace('|', '/')} |")
    tree = tree_lines(records, (best.trajectory, best.turn))
    if any(r.parent_trajectory is not None for r in records):
        lines += ["", "All trajectories (`*` marks the winner's path):", "", "```", *tree, "```"]
    return lines


def render_markdown(info: RunInfo, records: Sequence[TurnRecord], chart_name: str | None = None, *,
                    e2e: E2EResult | None = None) -> str:
    """The report as markdown; ``chart_name`` is the PNG's path relative to the markdown file
    (None leaves the chart out, e.g. for a CI step summary where it cannot be shown); ``e2e``: the
    whole model with and without the kernel, where the delivery ran it."""
    best = winner(info, records)
    confirmation = current(info, records)
    versions = info.versions
    task = info.task
    lines = [
        f"# kevin-opt report: {task.name} (`{task.class_name}`)",
        "",
        "| | |",
        "| --- | --- |",
        f"| task | `{Path(task.path).name}` (class `{task.class_name}`, sha256 {task.digest}) |",
        f"| device | {info.device}" + (f" ({info.device_name})" if info.device_name else "")
        + (f"; in theory {peaks} ({info.device_facts.source})"
           if info.device_facts is not None and (peaks := info.device_facts.peaks_words()) else "") + " |",
        *([f"| kernel language | Triton (`@triton.jit` kernels{', run in its interpreter' if info.device == 'cpu' else ''}) |"]
          if info.language == "triton" else []),
        f"| backend / model | {info.backend} / `{info.model}` |",
        f"| run | `{info.run_id}` ({info.status}, {counted(len(records), 'turn')} evaluated, "
        f"{counted(info.trajectories, 'trajectory', 'trajectories')} x {counted(info.turns, 'turn')}) |",
    ]
    for key in ("torch", "cuda", "driver", "python", "compiler", "kevin-opt"):
        if versions.get(key):
            lines.append(f"| {key} | {versions[key]} |")
    for key, value in sorted(versions.items()):
        if key not in ("torch", "cuda", "driver", "python", "compiler", "kevin-opt") and value:
            lines.append(f"| {key} | {value} |")
    if info.commit:
        lines.append(f"| commit | {info.commit} |")
    lines.append("")

    if best is not None:
        lines += _best_section(best)
        lines += ["", *_path_section(records, best.record)]
        if put_back := report_section(Path(task.path), best.record, info.device, int(info.config.get("seed", 0))):
            lines += ["", *put_back]
        if e2e is not None:
            lines += ["", "## The whole model", "",
                      f"`{e2e.model_file}` run with and without the kernel in fresh workers before the commit:", "",
                      *[f"- {line}" for line in e2e_lines(e2e)]]
    elif confirmation is not None:
        lines += ["## No confirmed kernel", "", "Every verified kernel was dropped when it was verified again."]
    else:
        lines += ["## No verified kernel", "", "No turn produced a kernel that passed the correctness checks."]
    lines.append("")
    if confirmation is not None:
        lines += [*_confirmation_section(confirmation), ""]

    lines += ["## Turns", "", "Speedup vs eager PyTorch for correct turns (each turn's own measurement) and the "
              "share of the roofline it reached, otherwise how the turn failed.", ""]
    lines += _turn_table(records, best.record if best else None) if records else ["No turns were evaluated."]
    lines.append("")
    if chart_name:
        lines += [f"![speedup over turns]({chart_name})", ""]

    totals = stage_totals(records)
    if totals is not None:
        names = list(StageTimes.model_fields)
        lines += ["## Evaluation time", "",
                  f"Seconds spent per stage, summed over {totals['evaluations']} evaluations (queue: waiting "
                  "for a build slot, a worker or the device).", "",
                  "| " + " | ".join(names) + " | total |", "|" + " ---: |" * (len(names) + 1),
                  "| " + " | ".join(f"{totals[n]:.1f}" for n in names) + f" | {sum(totals[n] for n in names):.1f} |",
                  ""]

    flagged = [(r, f) for r in records if r.eval is not None for f in r.eval.flags]
    lines += ["## Flags", ""]
    if flagged:
        lines += [f"- trajectory {r.trajectory} turn {r.turn}: {f}" for r, f in flagged]
    else:
        lines.append("None raised.")
    lines.append("")
    return "\n".join(lines)
