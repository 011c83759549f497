"""Numbers as every view prints them: the progress lines, `show`, the report and the TUI."""

from __future__ import annotations

from .results import (BestKernel, Confirmed, ConfirmedSpeedup, EvalResult, LaunchedTiming, MemoryUse, Roofline,
                      TimingStats, TurnRecord, implausible_flag)
from .results.ncu import NcuProfile

STAGE_ORDER = ("generation", "queue", "compile", "load", "correctness", "timing")


def counted(n: int | float, noun: str, plural: str | None = None) -> str:
    """``1 turn``, ``2 turns``: a number with its noun in the right number."""
    return f"{n:g} {noun if n == 1 else plural or noun + 's'}"


def fmt_speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


ABOVE_DRAM = "100% (in cache)"
"""A share above the roofline: capped, and why. The roofline's bytes floor is the DRAM bandwidth
measured on a buffer far larger than the caches; a call whose data stays in a cache runs faster than
that floor, and no cache bandwidth is measured to hold it to. The time is at (past) the floor that
was measured; a share of it above 100% would only say how much the cache beats DRAM."""


def fmt_fraction(value: float | None) -> str:
    """A share of the roofline as a percentage: ``93%``, ``4.2%``, ``0.31%``; above the roofline
    (data in cache), ``100% (in cache)``, never a share above 100%."""
    if value is None:
        return "-"
    if value > 1.0:
        return ABOVE_DRAM
    pct = 100 * value
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%"


def fmt_roofline(roof: Roofline | None, *, with_reference: bool = True, named: bool = True) -> str | None:
    """A kernel's share of its roofline in words, with PyTorch's beside it: ``62% of its roofline
    (memory-bound: 8.4 MB at 22.7 GB/s, 0.37 ms); eager 20%, torch.compile 41%`` (under a label that
    says roofline, not ``named``: ``62% (memory-bound: ...``); None without one."""
    if roof is None or roof.fraction is None:
        return None
    share = fmt_fraction(roof.fraction) + (" of its roofline" if named else "")
    text = f"{share} ({roof.bound}-bound: {floor_words(roof)})"
    if with_reference:
        others = [f"{who} {fmt_fraction(value)}" for who, value in (("eager", roof.reference_fraction),
                                                                     ("torch.compile", roof.compiled_fraction))
                  if value is not None]
        text += f"; {', '.join(others)}" if others else ""
    return text


def floor_words(roof: Roofline) -> str:
    """What the roofline's floor is made of: the bytes at the bandwidth, and the FLOPs at the FLOP
    rate where they were counted, then the floor itself."""
    parts = [f"{roof.bytes / 1e6:.3g} MB at {roof.bandwidth_gb_s:.3g} GB/s {roof.bandwidth_source}"]
    if roof.flops and roof.flop_rate_tflop_s:
        parts.append(f"{roof.flops:.3g} FLOPs at {roof.flop_rate_tflop_s:.3g} TFLOP/s {roof.dtype}")
    return ", ".join(parts) + f", {fmt_ms_value(roof.floor_ms)}"


def fmt_ms_value(ms: float) -> str:
    """A time in ms for people, in µs below 0.1 ms."""
    return f"{ms * 1000:.3g} µs" if ms < 0.1 else f"{ms:.3g} ms"


def ncu_lines(profile: NcuProfile) -> list[str]:
    """What Nsight Compute found, a few lines per kernel: its time, its DRAM and SM throughput as
    shares of their peaks, achieved occupancy, registers, shared memory, the top warp stalls."""
    lines = [f"Nsight Compute, trajectory {profile.trajectory} turn {profile.turn}"
             + (f" on {profile.device_name}" if profile.device_name else "")
             + f" (full report: {profile.report_path}, open it with ncu-ui):"]
    for k in profile.kernels:
        def pct(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}%"

        head = f"  {k.name}" + (f" x{k.launches}" if k.launches > 1 else "")
        if k.duration_us is not None:
            head += f": {k.duration_us:.3g} µs"
        shared = [f"{n} B {what}" for n, what in ((k.shared_static_bytes, "static"), (k.shared_dynamic_bytes, "dynamic"))
                  if n is not None]
        lines.append(head)
        lines.append(f"    DRAM {pct(k.dram_pct)} of peak, SM {pct(k.sm_pct)} of peak, achieved occupancy "
                     f"{pct(k.occupancy_pct)}; "
                     + (f"{k.registers_per_thread} registers/thread" if k.registers_per_thread is not None
                        else "registers -")
                     + (f", shared memory {' + '.join(shared)} per block" if shared else "")
                     + (f"; block {k.block_size}, grid {k.grid_size}" if k.block_size else ""))
        if k.stalls:
            lines.append("    warps stalled most on: " + ", ".join(f"{s.reason} ({s.value:.3g})" for s in k.stalls))
    return lines


def fmt_confirmed(headline: ConfirmedSpeedup) -> str:
    """A confirmed speedup with its interval: ``2.41x (95% interval 2.39-2.43x, 200 rounds)``."""
    low, high = headline.ci95
    return f"{headline.speedup_median:.2f}x (95% interval {low:.2f}-{high:.2f}x, {headline.runs} rounds)"


def confirmed_line(kernel: Confirmed) -> str:
    """One kernel's confirmation in a line: its confirmed numbers, or why it was dropped."""
    where = f"t{kernel.trajectory} turn {kernel.turn}"
    headline = kernel.headline()
    if headline is None:
        first = next((line.strip() for line in kernel.error.splitlines() if line.strip()), "not confirmed")
        return f"dropped {where}: {first[:200]}"
    line = f"confirmed {where}: {fmt_confirmed(headline)}"
    if headline.speedup_vs_compile_median is not None:
        line += f", {fmt_speedup(headline.speedup_vs_compile_median)} vs torch.compile"
    if kernel.run_speedup is not None:
        line += f"; its turn measured {fmt_speedup(kernel.run_speedup)}"
    if kernel.roofline is not None and kernel.roofline.fraction is not None:
        line += f"; {fmt_fraction(kernel.roofline.fraction)} of its roofline"
    if kernel.implausible:
        line += f"  FLAGGED: {implausible_flag(kernel.flags)}"
    return line


def second_look(kernel: Confirmed) -> str:
    """What a turn's confirmation found, beside the turn's own number: ``confirmed 2.70x (95%
    interval ...)``, or why it was dropped."""
    headline = kernel.headline()
    if headline is None:
        first = next((line.strip() for line in kernel.error.splitlines() if line.strip()), "not confirmed")
        return f"dropped on a second look: {cut_words(first, 160)}"
    text = f"confirmed {fmt_confirmed(headline)} head to head"
    if kernel.roofline is not None and kernel.roofline.fraction is not None:
        text += f", {fmt_fraction(kernel.roofline.fraction)} of its roofline"
    return text + (f"  FLAGGED: {implausible_flag(kernel.flags)}" if kernel.implausible else "")


def best_words(best: BestKernel) -> str:
    """The best kernel as the last progress line and ``show`` say it: confirmed with its turn's
    own number beside it, or marked as the turn's own."""
    where = f"trajectory {best.trajectory}, turn {best.turn}"
    if best.confirmation is not None:
        own = f"; its turn measured {fmt_speedup(best.run_speedup)}" if best.run_speedup is not None else ""
        text = f"{fmt_confirmed(best.confirmation)} confirmed ({where}{own})"
    else:
        text = f"{fmt_speedup(best.speedup)}, its turn's own measurement, unconfirmed ({where})"
    return text + ("  FLAGGED" if best.implausible else "")


def marked_speedup(speedup: float | None, confirmed: bool) -> str:
    """A speedup with which kind it is, for a column that holds both: ``2.63x confirmed``,
    ``2.28x unconfirmed`` (a turn's own measurement)."""
    if speedup is None:
        return "-"
    return f"{fmt_speedup(speedup)} {'confirmed' if confirmed else 'unconfirmed'}"


def cut_words(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut at a word, with ``…`` where it was cut."""
    if len(text) <= width:
        return text
    head = text[:max(width - 1, 1)]
    if " " in head.strip():
        head = head.rstrip()
        head = head[:head.rfind(" ")] if not text[len(head)].isspace() else head
    return head.rstrip(" ,;:") + "…"


def fmt_ms(stats: TimingStats | None) -> str:
    """A median time, in microseconds below 0.1 ms."""
    if stats is None:
        return "-"
    ms = stats.median_ms
    return f"{ms * 1000:.1f} µs" if ms < 0.1 else f"{ms:.3f} ms"


def fmt_tolerance(ev: EvalResult) -> str | None:
    """How the outputs were compared, e.g. "strict (atol 0.0001, rtol 0.0001), reference TF32 off"."""
    if ev.tolerance is None:
        return None
    text = ev.tolerance
    if ev.atol is not None and ev.rtol is not None:
        text += f" (atol {ev.atol:g}, rtol {ev.rtol:g})"
    if ev.reference_tf32 is not None:
        text += f", reference TF32 {'on' if ev.reference_tf32 else 'off'}"
    return text


def fmt_graph(ev: EvalResult) -> str | None:
    """The "in a CUDA graph" column in one line, or None where it was not measured."""
    graph = ev.graph
    if graph is None:
        return None
    kernel = fmt_ms(graph.runtime) if graph.runtime is not None else graph.runtime_note
    eager = fmt_ms(graph.reference) if graph.reference is not None else graph.reference_note
    text = f"kernel {kernel}, eager {eager} per call ({graph.calls} calls per graph)"
    return text + (f": {fmt_speedup(graph.speedup)}" if graph.speedup is not None else "")


LAUNCHES_APART = 0.10
"""The time with each call's launches in it is shown beside the headline where the two speedups
differ by more than this share (calls made of many small kernels)."""


def fmt_launched(launched: LaunchedTiming | None, speedup: float | None) -> str | None:
    """The speedup with each call's launches in the time, e.g. "with its launches: 3.10x (kernel
    0.0081 ms, eager 0.0251 ms)", where it differs from ``speedup`` by more than ``LAUNCHES_APART``;
    else None."""
    if launched is None or not speedup or abs(launched.speedup / speedup - 1) <= LAUNCHES_APART:
        return None
    return (f"with its launches: {fmt_speedup(launched.speedup)} (kernel {fmt_ms(launched.runtime)}, "
            f"eager {fmt_ms(launched.reference)})")


def fmt_signatures(ev: EvalResult) -> str | None:
    """A result at several input signatures in one line, e.g. "at 3 input signatures, weighted by
    use: 2.10x (#0 float32[64, 512] x24: 2.31x; #1 float32[8, 512] x8: 1.52x; #2 x2: checked)"."""
    if not ev.signatures:
        return None
    parts = [f"#{s.signature} {', '.join(s.inputs)} x{s.count}: "
             + (fmt_speedup(s.speedup) if s.speedup is not None else "checked") for s in ev.signatures]
    weighted = fmt_speedup(ev.weighted_speedup) if ev.weighted_speedup is not None else "-"
    return f"at {len(ev.signatures)} input signatures, weighted by use: {weighted} ({'; '.join(parts)})"


def gib(n: int | float) -> str:
    """Bytes in GiB for people: 6.0 GiB, 0.25 GiB."""
    value = n / (1 << 30)
    return f"{value:.1f} GiB" if value >= 1 else f"{value:.2g} GiB"


def fmt_memory(use: MemoryUse) -> str:
    """An evaluation's peak memory against the task's own, e.g. "peak 18.3 GiB (cuda allocator),
    1.52x the task's 12.0 GiB"."""
    return (f"memory: peak {gib(use.peak_reserved_bytes)} ({use.measured}), {use.ratio:.2f}x the task's "
            f"{gib(use.footprint_bytes)} (planned at most {gib(use.planned_bytes)})")


def fmt_clock(seconds: float) -> str:
    """Elapsed time as a clock shows it: m:ss, h:mm:ss past the hour."""
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def fmt_seconds(seconds: float) -> str:
    """A duration: tenths of a second below a minute, m:ss above."""
    return f"{seconds:.1f} s" if seconds < 60 else fmt_clock(seconds)


def stage_times(record: TurnRecord) -> list[tuple[str, float]]:
    """Where a turn's time went: generation, then each evaluation stage that was timed."""
    ev = record.eval
    times: list[tuple[str, float]] = []
    if record.generate_s is not None:
        times.append(("generation", record.generate_s))
    # Older records carry only the build time; newer ones time every stage.
    raw = getattr(ev, "stage_s", None)
    raw = raw.model_dump() if hasattr(raw, "model_dump") else raw  # a StageTimes
    stage_s = {k: v for k, v in (raw or {}).items() if v is not None}
    if not stage_s and ev is not None and ev.compile_s is not None:
        stage_s = {"compile": ev.compile_s}
    known = [name for name in STAGE_ORDER if name in stage_s]
    times += [(name, stage_s[name]) for name in known + sorted(set(stage_s) - set(known))]
    return times
