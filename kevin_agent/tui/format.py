"""Turn records into styled ``Content``.

Styles name theme variables ($success, $error, ...) and never fixed colours, so the same
text reads on dark and light themes.
"""

from __future__ import annotations

import difflib

from pygments.token import Token
from textual.content import Content
from textual.highlight import HighlightTheme, highlight

from ..formatting import fmt_graph, fmt_ms, fmt_speedup, fmt_tolerance
from ..results import EvalResult, Status, TurnRecord

MARKS: dict[Status, tuple[str, str, str]] = {
    # status: (mark, style, short label)
    Status.CORRECT: ("✓", "bold $text-success", "correct"),
    Status.INCORRECT: ("✗", "bold $text-error", "incorrect"),
    Status.COMPILE_ERROR: ("✗", "bold $text-error", "compile error"),
    Status.RUNTIME_ERROR: ("!", "bold $text-error", "runtime error"),
    Status.PARSE_ERROR: ("?", "bold $text-warning", "parse error"),
    Status.CHECK_FAILED: ("⊘", "bold $text-warning", "check failed"),
    Status.TIMEOUT: ("⧗", "bold $text-warning", "timeout"),
    Status.CANCELLED: ("-", "$text-muted", "cancelled"),
}
LIVE_MARK = ("…", "bold $text-accent")
COMPILE_LOG_LINES = 40


def turn_label(record: TurnRecord, *, width: int = 0) -> Content:
    """One line for the turn list: mark, turn number, speedup or outcome."""
    mark, style, label = MARKS[record.status]
    detail = (
        Content.styled(fmt_speedup(record.speedup), "bold $text-success")
        if record.speedup is not None
        else Content.styled(label, "$text-muted")
    )
    return Content.assemble((mark, style), f" turn {record.turn:<2} ", detail)


def live_label(turn: int, phase: str) -> Content:
    mark, style = LIVE_MARK
    return Content.assemble((mark, style), f" turn {turn:<2} ", (phase, "italic $text-accent"))


def _line(label: str, value: Content | str) -> Content:
    return Content.assemble((f"{label}: ", "bold"), value)


def correctness_line(ev: EvalResult) -> Content | None:
    if not ev.trials:
        return None
    ok = ev.trials_passed == ev.trials
    parts = [Content.styled(f"{ev.trials_passed}/{ev.trials} trials", "$text-success" if ok else "$text-error")]
    if ev.max_abs_err is not None:
        parts.append(Content(f"max abs err {ev.max_abs_err:.2e}"))
    if ev.max_rel_err is not None:
        parts.append(Content(f"max rel err {ev.max_rel_err:.2e}"))
    if ev.tolerance is not None:
        parts.append(Content(fmt_tolerance(ev) or ""))
    elif ev.atol is not None and ev.rtol is not None:
        parts.append(Content(f"atol {ev.atol:g} rtol {ev.rtol:g}"))
    return _line("correctness", Content(" · ").join(parts))


def timing_lines(ev: EvalResult) -> list[Content]:
    if ev.runtime is None:
        return []
    runs = f" (median of {ev.runtime.runs})" if ev.runtime.runs else ""
    lines = [
        _line(
            "timing" + runs,
            Content.assemble(
                ("kernel ", "$text-muted"), fmt_ms(ev.runtime),
                ("  eager ", "$text-muted"), fmt_ms(ev.reference),
                ("  torch.compile ", "$text-muted"), fmt_ms(ev.compiled_reference),
            ),
        )
    ]
    speed = Content.assemble(
        (fmt_speedup(ev.speedup), "bold $text-success" if (ev.speedup or 0) >= 1 else "bold $text-warning"),
        " vs eager",
    )
    if ev.speedup_vs_compile is not None:
        speed = speed + Content.assemble("  ", (fmt_speedup(ev.speedup_vs_compile), "bold"), " vs torch.compile")
    lines.append(_line("speedup", speed))
    return lines


def feedback_content(record: TurnRecord) -> Content:
    """Everything known about why a turn ended the way it did, the numbers first."""
    mark, style, label = MARKS[record.status]
    ev = record.eval
    lines: list[Content] = [
        Content.assemble(
            (f"{mark} {label}", style),
            f"  trajectory {record.trajectory} · turn {record.turn}",
            *((" · ", (fmt_speedup(record.speedup), "bold $text-success")) if record.speedup is not None else ()),
        ),
    ]
    if ev is not None:
        timing = timing_lines(ev)
        lines.extend(reversed(timing))  # the speedup line, then the times it comes from
        if (graph := fmt_graph(ev)) is not None:
            lines.append(_line("in a CUDA graph", graph))
        if (line := correctness_line(ev)) is not None:
            lines.append(line)
        if ev.flags:
            lines.append(_line("flags", Content.styled("; ".join(ev.flags), "$text-warning")))
    if record.parse_error:
        lines.append(_line("parse error", Content.styled(record.parse_error, "$text-error")))
    if record.check is not None and not record.check.passed:
        lines.append(Content.styled("check failures:", "bold"))
        for v in record.check.violations:
            where = f" (line {v.line})" if v.line else ""
            lines.append(Content.assemble("  ", (f"[{v.rule}]", "$text-warning"), f" {v.message}{where}"))
    if ev is not None:
        if ev.error:
            lines.append(_line("error", Content.styled(ev.error.strip(), "$text-error")))
        if ev.compile_log.strip() and record.status is Status.COMPILE_ERROR:
            log = ev.compile_log.strip().splitlines()
            shown = log[-COMPILE_LOG_LINES:]
            head = f"compile log (last {len(shown)} of {len(log)} lines):" if len(log) > len(shown) else "compile log:"
            lines.append(Content.styled(head, "bold"))
            lines.append(Content.styled("\n".join(shown), "$text-muted"))
        if ev.compile_s is not None:
            cached = " (cached build)" if ev.cached_build else ""
            lines.append(_line("compile", f"{ev.compile_s:.1f} s{cached}"))
    lines.append(_line("feedback to the model", Content.styled(record.feedback, "$text-muted")))
    tokens = [f"{n} {what}" for n, what in ((record.prompt_tokens, "prompt"), (record.completion_tokens, "completion")) if n]
    if tokens:
        lines.append(_line("tokens", " · ".join(tokens)))
    return Content("\n").join(lines)


def kernel_content(code: str) -> Content:
    return highlight(code, language="python") if code.strip() else Content.styled("(no kernel)", "$text-muted")


class DiffTheme(HighlightTheme):
    """Added lines in the success colour, removed ones in the error colour."""

    STYLES = {
        **HighlightTheme.STYLES,
        Token.Generic.Inserted: "$text-success",
        Token.Generic.Deleted: "$text-error",
        Token.Generic.Subheading: "$text-accent",
        Token.Generic.Heading: "bold",
    }


def kernel_diff(previous: TurnRecord | None, record: TurnRecord) -> str:
    """Unified diff of a turn's kernel against the previous turn of its trajectory."""
    if previous is None:
        return ""
    return "".join(
        difflib.unified_diff(
            previous.code.splitlines(keepends=True),
            record.code.splitlines(keepends=True),
            fromfile=f"trajectory {previous.trajectory} turn {previous.turn}",
            tofile=f"trajectory {record.trajectory} turn {record.turn}",
        )
    )


def diff_content(previous: TurnRecord | None, record: TurnRecord) -> Content:
    if previous is None:
        return Content.styled("first turn of its trajectory: nothing to compare with", "$text-muted")
    text = kernel_diff(previous, record)
    if not text:
        return Content.styled("kernel unchanged from the previous turn", "$text-muted")
    return highlight(text, language="diff", theme=DiffTheme)


def previous_turn(records: list[TurnRecord], record: TurnRecord) -> TurnRecord | None:
    earlier = [r for r in records if r.trajectory == record.trajectory and r.turn < record.turn]
    return max(earlier, key=lambda r: r.turn) if earlier else None
