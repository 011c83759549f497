"""Turn records into styled ``Content``.

Styles name theme variables ($success, $error, ...) and never fixed colours, so the same
text reads on dark and light themes.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pygments.token import Token
from textual.content import Content
from textual.highlight import HighlightTheme, highlight

from ..engine.parsing import THINK_CLOSE, THINK_OPEN
from ..formatting import (
    fmt_fraction,
    fmt_graph,
    fmt_ms,
    fmt_roofline,
    fmt_seconds,
    fmt_speedup,
    fmt_tolerance,
    stage_times,
)
from ..results import Confirmed, EvalResult, Status, TurnRecord


@dataclass(frozen=True)
class Mark:
    """How one outcome is drawn wherever a turn is listed, and what it means (the legend)."""

    glyph: str
    style: str
    label: str
    meaning: str

    def content(self) -> Content:
        return Content.styled(self.glyph, self.style)


MARKS: dict[Status, Mark] = {
    # One glyph per outcome, single-cell in every terminal font: the turn list, the history,
    # the feedback pane and the legend in `?` all draw from here; the words are the status's own.
    status: Mark(glyph, style, status.label, meaning) for status, (glyph, style, meaning) in {
        Status.CORRECT: ("✓", "bold $text-success", "verified against the reference; its speedup"),
        Status.INCORRECT: ("≠", "bold $text-error", "ran, but its output differs from the reference"),
        Status.COMPILE_ERROR: ("✗", "bold $text-error", "the kernel did not build"),
        Status.RUNTIME_ERROR: ("!", "bold $text-error", "built, then crashed or failed when run"),
        Status.TIMEOUT: ("⧗", "bold $text-warning", "did not finish within the time limit"),
        Status.CHECK_FAILED: ("⊘", "bold $text-warning", "broke a rule of the task; never compiled"),
        Status.PARSE_ERROR: ("?", "bold $text-warning", "no code could be read from the answer"),
        Status.CANCELLED: ("⊝", "bold $text-muted", "cancelled by you; never shown to the model, the turn is "
                                                   "generated again"),
    }.items()
}
LIVE = Mark("…", "bold $text-accent", "in progress", "being generated or evaluated")
COMPILE_LOG_LINES = 40
LIVE_OUTPUT_LINES = 200
"""Lines of a build's output kept on screen while it runs."""


CONFIRMED_MARK = "conf"
"""Written before a confirmed speedup in a turn's line: ``2.28x conf 2.63x``."""
DROPPED_MARK = "dropped"
ROOFLINE_STYLE = "$text-secondary"
"""The share of its roofline a kernel reaches, after its speedup in a turn's line: ``2.28x 62%``."""


def legend_rows() -> list[tuple[Content, Content]]:
    """Every mark and what it means, for the help screen."""
    rows = [(Content.assemble(m.content(), " ", (m.label, "bold")), Content.styled(m.meaning, "$text-muted"))
            for m in [*MARKS.values(), LIVE]]
    rows.append((Content.assemble(("2.28x", "bold $text-success"), " ", (CONFIRMED_MARK, "bold"), " ",
                                  ("2.63x", "bold $text-accent")),
                 Content.styled("the turn's own speedup, then the one confirmed when the run ended (verified "
                                "again, timed head to head): the confirmed one is the run's number", "$text-muted")))
    rows.append((Content.assemble(("2.28x", "bold $text-success"), " ", ("62%", ROOFLINE_STYLE)),
                 Content.styled("the share of its roofline the kernel reaches: the least time its bytes (and FLOPs) "
                                "take at the device's measured speed, over its own (confirmed where confirmed)",
                                "$text-muted")))
    rows.append((Content.assemble(("2.22x", "bold $text-success"), " ", (DROPPED_MARK, "bold $text-warning")),
                 Content.styled("verified in its turn, dropped on the second look when the run ended",
                                "$text-muted")))
    return rows


def turn_label(record: TurnRecord, confirmed: Confirmed | None = None) -> Content:
    """One line for the turn list: mark, turn number, speedup or outcome; for a kernel confirmed
    when the run ended, its confirmed speedup after the turn's own (or that it was dropped)."""
    mark = MARKS[record.status]
    detail = (
        Content.styled(fmt_speedup(record.speedup), "bold $text-success")
        if record.speedup is not None
        else Content.styled(mark.label, "$text-muted")
    )
    roof = record.eval.roofline if record.eval is not None and record.speedup is not None else None
    if confirmed is not None and confirmed.headline() is not None:
        detail = Content.assemble(detail, " ", (CONFIRMED_MARK, "bold"), " ",
                                  (fmt_speedup(confirmed.speedup_median), "bold $text-accent"))
        roof = confirmed.roofline or roof
    elif confirmed is not None:
        detail = Content.assemble(detail, " ", (DROPPED_MARK, "bold $text-warning"))
    if roof is not None and roof.fraction is not None:
        detail = Content.assemble(detail, " ", (fmt_fraction(roof.fraction), ROOFLINE_STYLE))
    return Content.assemble(mark.content(), f" turn {record.turn:<2} ", detail)


def widest_turn_label(turns: int) -> int:
    """Cells the widest line of a run of ``turns`` turns can take (the list keeps that width
    from the start, so that the panes beside it never move)."""
    number = max(len(str(turns)), 2)
    outcome = max(len(m.label) for m in MARKS.values())
    confirmed = len(f"99.99x {CONFIRMED_MARK} 99.99x 100%")
    return 2 + len(" turn ") + number + 1 + max(outcome, confirmed, len("correctness"))


def live_label(turn: int, phase: str) -> Content:
    return Content.assemble(LIVE.content(), f" turn {turn:<2} ", (phase, "italic $text-accent"))


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


def roofline_line(ev: EvalResult) -> Content | None:
    """The share of its roofline the kernel reached in its turn, with eager's and torch.compile's."""
    if (words := fmt_roofline(ev.roofline, named=False)) is None:
        return None
    share = fmt_fraction(ev.roofline.fraction)
    return _line("roofline", Content.assemble((share, "bold " + ROOFLINE_STYLE), words.removeprefix(share)))


def stage_line(record: TurnRecord) -> Content | None:
    times = stage_times(record)
    if not times:
        return None
    cached = record.eval is not None and record.eval.cached_build
    parts = [
        Content.assemble((f"{name} ", "$text-muted"), fmt_seconds(s), " (cached)" if name == "compile" and cached else "")
        for name, s in times
    ]
    return _line("time", Content(" · ").join(parts))


def mark_heading(mark: Mark, where: str, *extra: Content | tuple[str, str] | str) -> Content:
    return Content.assemble((f"{mark.glyph} {mark.label}", mark.style), f"  {where}", *extra)


def confirmed_content(kernel: Confirmed) -> Content:
    """A turn's second look, beside its own speedup."""
    headline = kernel.headline()
    if headline is None:
        first = next((line.strip() for line in kernel.error.splitlines() if line.strip()), "not confirmed")
        return _line("confirmed", Content.styled(f"no: dropped on a second look when the run ended: {first}",
                                                 "$text-warning"))
    low, high = headline.ci95
    return _line("confirmed", Content.assemble(
        (fmt_speedup(headline.speedup_median), "bold $text-accent"),
        f" vs eager (95% interval {low:.2f}-{high:.2f}x, {headline.runs} rounds head to head when the run ended"
        + (f", {fmt_fraction(kernel.roofline.fraction)} of its roofline"
           if kernel.roofline is not None and kernel.roofline.fraction is not None else "")
        + "); the speedup above is this turn's own measurement"))


def feedback_content(record: TurnRecord, confirmed: Confirmed | None = None) -> Content:
    """Everything known about why a turn ended the way it did, the numbers first; for a kernel
    confirmed when the run ended, the confirmed speedup beside the turn's own."""
    mark = MARKS[record.status]
    ev = record.eval
    lines: list[Content] = [
        mark_heading(
            mark, f"trajectory {record.trajectory} · turn {record.turn}",
            *((" · ", (fmt_speedup(record.speedup), "bold $text-success")) if record.speedup is not None else ()),
        ),
    ]
    if record.status is Status.CANCELLED:
        lines.append(Content.styled(mark.meaning, "$text-muted"))
    if ev is not None:
        timing = timing_lines(ev)
        lines.extend(reversed(timing))  # the speedup line, then the times it comes from
        if confirmed is not None and timing:
            lines.insert(2, confirmed_content(confirmed))
        if timing and (roof := roofline_line(ev)) is not None:
            lines.insert(3 if confirmed is not None else 2, roof)
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
            log = compiler_lines(ev.compile_log.strip())
            shown = log[-COMPILE_LOG_LINES:]
            head = f"compile log (last {len(shown)} of {len(log)} lines):" if len(log) > len(shown) else "compile log:"
            lines.append(Content.styled(head, "bold"))
            lines.append(Content.styled("\n".join(shown), "$text-muted"))
    if (line := stage_line(record)) is not None:
        lines.append(line)
    if record.status is not Status.CANCELLED:
        lines.append(_line("feedback to the model", Content.styled(record.feedback, "$text-muted")))
    tokens = [f"{n} {what}" for n, what in ((record.prompt_tokens, "prompt"), (record.completion_tokens, "completion")) if n]
    if tokens:
        lines.append(_line("tokens", " · ".join(tokens)))
    return Content("\n").join(lines)


# torch.utils.cpp_extension logs through Python's logging in glog's format ("I1201 09:21:34.929000
# 13183 path/to/cpp_extension.py:2542] Building extension module ..."): the logger's voice, not
# the compiler's, and each of its lines wraps to several in a narrow pane.
_LOGGER_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")


def compiler_lines(text: str) -> list[str]:
    """A build's output without the lines torch's logger adds to it."""
    return [line for line in text.splitlines() if not _LOGGER_LINE.match(line)]


def answer_text(record: TurnRecord) -> str:
    """The response without its reasoning: what the model answered once it stopped thinking."""
    text = record.response
    close = text.rfind(THINK_CLOSE)
    if close >= 0:
        text = text[close + len(THINK_CLOSE):]
    elif THINK_OPEN in text:
        return ""  # cut off while reasoning: all of it is reasoning, shown as such
    reasoning = record.reasoning.strip()
    if reasoning and text.lstrip().startswith(reasoning):
        text = text.lstrip()[len(reasoning):]
    return text.strip()


@lru_cache(maxsize=64)
def kernel_content(code: str) -> Content:
    """The kernel, highlighted: once per kernel (a long one takes a good part of a second, and the
    panes show the same kernel again on each event and each visit); Content is immutable."""
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
    """Unified diff of a turn's kernel against the turn it continued."""
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
    """The finished turn whose history ``record`` continued (its parent's turn under a search)."""
    key = record.previous()
    if key is None:
        return None
    return next((r for r in records if (r.trajectory, r.turn) == key and r.finished), None)


# --- notifications --------------------------------------------------------------------------
def short_paths(text: str, cwd: Path | None = None) -> str:
    """Paths below the working directory relative to it, the home directory as ``~``."""
    cwd = cwd or Path.cwd()
    text = text.replace(f"{cwd}{os.sep}", "")
    home = str(Path.home())
    return re.sub(rf"(?<![\w/]){re.escape(home)}(?=/)", "~", text) if home != os.sep else text


def wrap_words(text: str, width: int) -> str:
    """Wrap at spaces to ``width`` cells; a longer word (a path) breaks after a ``/``, never
    inside a name."""
    out: list[str] = []
    for paragraph in text.splitlines() or [""]:
        line = ""
        for word in paragraph.split(" "):
            pieces = [word]
            if len(word) > width and "/" in word:
                pieces = [p for p in re.findall(r"[^/]*/|[^/]+$", word) if p]
            for i, piece in enumerate(pieces):
                sep = "" if i or not line else " "
                if line and len(line) + len(sep) + len(piece) > width:
                    out.append(line)
                    line, sep = "", ""
                line += sep + piece
        out.append(line)
    return "\n".join(out)


TOAST_MAX = 72


def toast_width(room: int) -> int:
    """Cells of text in a toast at most ``room`` cells wide: less its padding and border."""
    return max(20, min(TOAST_MAX, room) - 3)


def toast_text(message: str, room: int) -> str:
    """A notification's text laid out for a toast at most ``room`` cells wide: the toast is as
    wide as its longest line (see Toast in app.tcss)."""
    return wrap_words(short_paths(message), toast_width(room))


_BLOCK = re.compile(r"\s|[-*+•] |\d+[.)] |#|\||>|```|\$\$|\\\[")
"""A line that starts a block of its own (indented, a list item, a heading, a table row, a quote,
a fence, a displayed formula): kept on its line."""


def reflow(text: str) -> str:
    """Prose with its hard line breaks inside a paragraph joined, so that it wraps to the pane as
    one paragraph rather than breaking at the model's lines and the pane's both (ragged). Blank
    lines, fenced code and lines that start a block of their own keep their breaks."""
    out: list[str] = []
    fenced = joinable = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append(line)
            joinable = False
            continue
        if fenced or not line.strip():
            out.append(line)
            joinable = False
            continue
        if joinable and not _BLOCK.match(line):
            out[-1] = f"{out[-1].rstrip()} {line.strip()}"
        else:
            out.append(line)
        # A heading, a table row or a formula ends where its line does.
        joinable = not re.match(r"\s*(#|\||\$\$|\\\[)", out[-1])
    return "\n".join(out)
