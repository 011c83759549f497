"""A profile in words: the ranked table that ``kevin-opt profile`` prints and the TUI shows, and
the e2e verdict. One set of cells for both, so the two never disagree. A row is a group of
identical module instances (``layers.*.norm x3``), a module like no other a group of its own."""

from __future__ import annotations

from ..results.records import E2EResult
from .records import ModelProfile, ModuleGroup, ModuleProfile

COLUMNS = ("#", "module", "class", "calls", "ms/fwd", "share", "amdahl", "roofline", "headroom", "saves", "note")
RIGHT = {"calls", "ms/fwd", "share", "amdahl", "roofline", "headroom", "saves"}
LIBRARY_WORDS = {"gemm": "library GEMM", "conv": "library conv", "attention": "library attention",
                 "rnn": "library RNN"}


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%" if value < 0.995 else f"{100 * value:.0f}%"


def roofline_cell(m: ModuleProfile | ModuleGroup) -> str:
    """The share of its roofline a module reaches: none for one that moves no bytes (an identity, a
    view: Dropout in eval), and never above 100% (``formatting.ABOVE_DRAM``: data in cache)."""
    if m.moves_nothing:
        return "—"
    if m.roofline is None:
        return ""
    return "100% cache" if m.roofline > 1.0 else _pct(m.roofline)


def note(m: ModuleProfile | ModuleGroup) -> str:
    if m.moves_nothing:
        return "moves no bytes (returns its input or a view)"
    if m.library:
        return LIBRARY_WORDS.get(m.library, m.library)
    if m.library_ms > 0 and m.time_ms > 0:
        return f"{_pct(m.library_ms / m.time_ms)} library"
    if m.path and m.rank is None and m.headroom == 0 and m.time_ms > 0:
        return "at its floor"
    return ""


def cells(m: ModuleProfile | ModuleGroup) -> tuple[str, ...]:
    root = not m.path
    calls = f"{m.calls:g}"
    return (
        "" if root else str(m.rank) if m.rank is not None else "-",
        "(model)" if root else m.name if isinstance(m, ModuleGroup) else m.path,
        m.class_name,
        calls,
        f"{m.time_ms:.3g}" if m.time_ms < 100 else f"{m.time_ms:.0f}",
        _pct(m.share),
        "" if m.amdahl is None else f"{m.amdahl:.2f}x" if m.amdahl < 100 else ">100x",
        "" if root else roofline_cell(m),
        "" if root else _pct(m.headroom),
        "" if root else _pct(m.own_saving) if m.rank is not None else "-",
        note(m),
    )


def _fit(text: str, width: int, *, keep_end: bool = False) -> str:
    if len(text) <= width:
        return text
    return "…" + text[-(width - 1):] if keep_end else text[:width - 1] + "…"


SHRINK = (("class", 8), ("calls", 0), ("roofline", 0), ("headroom", 0), ("note", 12), ("module", 12), ("note", 4))
"""Columns given up first when the table is too wide, and the least each keeps (0: dropped)."""


def table_lines(profile: ModelProfile, width: int = 100, limit: int | None = 30) -> list[str]:
    """The table: the model first, then the ranked groups, then the rest (the first ``limit``)."""
    groups = profile.groups
    rows = [cells(g) for g in groups[: (limit + 1) if limit else None]]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(COLUMNS)]
    for name, least in SHRINK:
        over = sum(w + 2 for w in widths if w) - 2 - width
        if over <= 0:
            break
        i = COLUMNS.index(name)
        widths[i] = 0 if least == 0 else max(least, widths[i] - over)
    out = []
    for row in [COLUMNS, *rows]:
        parts = []
        for i, (cell, w) in enumerate(zip(row, widths)):
            if w == 0:
                continue
            cell = _fit(cell, w, keep_end=COLUMNS[i] == "module")
            parts.append(cell.rjust(w) if COLUMNS[i] in RIGHT or i == 0 else cell.ljust(w))
        out.append("  ".join(parts).rstrip())
    if limit and len(groups) > limit + 1:
        out.append(f"... and {len(groups) - limit - 1} more modules (see --json)")
    return out


def _threads(profile: ModelProfile) -> str:
    n = profile.cpu_threads
    return f", {n} thread{'s' if n != 1 else ''}" if n else ""


def _forward_words(profile: ModelProfile) -> str:
    """The two times of one forward, each said for what it is: the profiler's (the table's times and
    shares, warm caches, forward after forward) and the one kernels are held to (caches flushed
    before each forward, as ``kevin-opt e2e`` times the whole model)."""
    forwards = f"{profile.forwards} forward{'s' if profile.forwards != 1 else ''}"
    return (f"{profile.profiled_forward_ms:.3g} ms per forward under the profiler (the table's times, the median "
            f"of {forwards}); {profile.forward_ms:.3g} ms timed with caches flushed before each forward, as e2e "
            "times it")


def summary_lines(profile: ModelProfile) -> list[str]:
    threads = _threads(profile)
    return [
        f"{profile.model_file} on {profile.device} ({profile.device_name}{threads}): {_forward_words(profile)}",
        f"bandwidth {profile.bandwidth_gb_s:.1f} GB/s {profile.bandwidth_source}"
        + (f", {profile.flop_rate_tflop_s:.3g} TFLOP/s {profile.flop_dtype} measured" if profile.flop_rate_tflop_s else "")
        + "; ranked by what a kernel for the module alone could save of the forward",
    ]


def short_summary(profile: ModelProfile) -> str:
    """The summary in one line, for the terminal UI's header: the forward's time is the table's
    model row, the other one named for what it is."""
    threads = _threads(profile)
    return (f"{profile.model_file} · {profile.device}{threads} · {profile.profiled_forward_ms:.3g} ms per forward "
            f"under the profiler ({profile.forward_ms:.3g} ms with caches flushed) · {profile.bandwidth_gb_s:.1f} GB/s"
            " · ranked by what a kernel for the module alone could save")


def signature_lines(profile: ModelProfile, top: int = 3) -> list[str]:
    out = []
    for g in profile.ranked_groups[:top]:
        sigs = "; ".join(f"{s.key} x{s.calls}" for s in g.signatures[:4])
        more = f" (+{len(g.signatures) - 4} more)" if len(g.signatures) > 4 else ""
        out.append(f"  {g.name}: {sigs}{more}")
    return ["signatures (calls per forward):", *out] if out else []


def e2e_lines(result: E2EResult) -> list[str]:
    if result.kernels:
        return _combined_lines(result)
    lines = [f"whole model: {result.baseline_ms:.3g} ms per forward without the kernel, {result.kernel_ms:.3g} ms "
             f"with it (the best of {result.rounds} rounds of fresh workers)"]
    predicted = (f"; Amdahl predicts {result.predicted:.2f}x from its {_pct(result.share)} share and its own "
                 f"{result.module_speedup:.2f}x" if result.predicted is not None else "")
    verdict = f"speedup {result.speedup:.2f}x ({_interval(result)}with and without it, interleaved){predicted}"
    if result.slower:
        verdict = f"the kernel makes the whole model SLOWER: {result.speedup:.2f}x{predicted}"
    lines.append(verdict)
    lines.append(f"kernel calls per forward: {result.kernel_calls:g}; calls that ran the original forward: "
                 f"{result.fallback_calls:g}")
    if len(result.member_calls) > 1 or result.fallback_calls:
        lines.append(_members_line(result.member_calls))
    return [*lines, *compiled_lines(result), outputs_line(result)]


def compiled_lines(result: E2EResult) -> list[str]:
    """The model in eager and under torch.compile, with and without the kernels, and which decides."""
    eager = result.eager_speedup if result.eager_speedup is not None else result.speedup
    if result.compiled_speedup is None:
        if result.compile_error:
            return [f"torch.compile: the model does not compile ({result.compile_error}); measured in eager alone"]
        return []
    lines = [f"eager: {result.baseline_ms:.3g} ms without the kernels, {result.kernel_ms:.3g} ms with "
             f"them ({eager:.2f}x); torch.compile: {result.compiled_ms:.3g} ms without, {result.compiled_kernel_ms:.3g}"
             f" ms with ({result.compiled_speedup:.2f}x); eager with the kernels against compiled without them: "
             f"{result.eager_over_compiled:.2f}x",
             f"the {result.mode} measurement decides (--mode eager|compile)"]
    ran = result.compiled_kernel_calls
    if ran is not None and ran < result.kernel_calls:
        lines.append(f"under torch.compile the kernels ran at {ran:g} of the {result.kernel_calls:g} calls per "
                     "forward they run at in eager: traced, the model passes the others arguments they were not "
                     "verified at (as transformers does its causal mask), so those run Inductor's code")
    if result.inductor_wins and ran != 0:
        lines.append("the kernels help in eager but lose to what Inductor fuses under torch.compile")
    if result.compiled_outputs_match is False:
        lines.append(f"under torch.compile the outputs with the kernels DIFFER: {result.compiled_mismatch}")
    return lines


def _members_line(calls: dict[str, list[float]]) -> str:
    return "  per module (kernel / original forward): " + ", ".join(
        f"{path} {kernel:g}/{original:g}" for path, (kernel, original) in calls.items())


def _interval(result: E2EResult) -> str:
    """The speedup's 95% interval, where there is one, as the start of its parenthesis."""
    low_high = result.speedup_interval
    return f"95% interval {low_high[0]:.2f}-{low_high[1]:.2f}x; " if low_high else ""


def outputs_line(result: E2EResult) -> str:
    """Whether the whole model's outputs with the kernels match, and how near: within the tolerance, or
    beyond it but within the model's own low-precision rounding (the float32 second opinion)."""
    if result.outputs_match and result.rounding:
        return f"outputs match: {result.rounding}"
    if result.outputs_match:
        err = f" (max abs err {result.max_abs_err:.3g})" if result.max_abs_err is not None else ""
        return f"outputs match within the {result.tolerance} tolerance{err}"
    return f"outputs DIFFER beyond the {result.tolerance} tolerance: {result.mismatch}"


def _combined_lines(result: E2EResult) -> list[str]:
    """The verdict on several kernels put in together: the combination, then each kernel."""
    kept = result.kept
    n = len(kept)
    them = f"all {n} kept kernels" if n > 1 else "the one kept kernel"
    lines = [f"whole model: {result.baseline_ms:.3g} ms per forward without the kernels, {result.kernel_ms:.3g} ms "
             f"with {them} (the best of {result.rounds} rounds of fresh workers)"]
    predicted = (f"; Amdahl predicts {result.predicted:.2f}x for the combination from their {_pct(result.share)} "
                 "share and their own speedups" if result.predicted is not None else "")
    verdict = f"speedup {result.speedup:.2f}x ({_interval(result)}with and without them, interleaved){predicted}"
    if result.slower:
        verdict = f"the kernels make the whole model SLOWER: {result.speedup:.2f}x{predicted}"
    lines.append(verdict)
    for k in result.kernels:
        name = k.kernel_file.rsplit("/", 1)[-1]
        if k.dropped:
            lines.append(f"  dropped {name} ({k.module}): {k.dropped}")
            continue
        share = f"{_pct(k.share)} of the forward, " if k.share is not None else ""
        own = f"its own {k.module_speedup:.2f}x, " if k.module_speedup else ""
        effect = (f"; without it the model is {k.contribution:.2f}x slower" if k.contribution is not None and n > 1
                  else "")
        lines.append(f"  {k.module} ({name}): {share}{own}kernel calls per forward {k.kernel_calls:g}, calls that "
                     f"ran the original forward {k.fallback_calls:g}{effect}")
        if len(k.member_calls) > 1 or k.fallback_calls:
            lines.append("  " + _members_line(k.member_calls))
    return [*lines, *compiled_lines(result), outputs_line(result)]
