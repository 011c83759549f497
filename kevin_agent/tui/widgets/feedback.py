"""The feedback of one turn: checks, compile log, correctness numbers, timings; for a turn in
flight, its phase with a running timer and the build's output as it comes."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Collapsible, Static

from ...formatting import fmt_clock, fmt_seconds
from ...results import Confirmed, TurnRecord
from ..format import LIVE, LIVE_OUTPUT_LINES, compiler_lines, feedback_content
from ..state import LiveTurn
from .rows import Rows

STAGE_NAMES = {"generating": "generation", "queued": "queue"}
"""Phases of a live turn by the names its stored stage times use."""


def live_content(live: LiveTurn, now: float, previous: TurnRecord | None) -> Content:
    """What is known about a turn in flight: its phases so far and the evaluation's output."""
    lines = [Content.assemble((f"{LIVE.glyph} {live.phase} {fmt_clock(now - live.since)}", LIVE.style),
                              f"  trajectory {live.trajectory} · turn {live.turn}")]
    phases = [
        Content.assemble((f"{STAGE_NAMES.get(name, name)} ", "$text-muted"),
                         (f"{fmt_clock(s)}…", "$text-accent") if running else fmt_seconds(s))
        for name, s, running in live.durations(now)
        if running or s >= 0.05  # a phase that passed in an instant says nothing
    ]
    lines.append(Content.assemble(("time: ", "bold"), Content(" · ").join(phases)))
    output = "\n".join(compiler_lines(live.output_text())).strip()
    if output:
        tail = output.splitlines()[-LIVE_OUTPUT_LINES:]
        what = "compiler output" if live.phase == "compile" else "evaluation output"
        lines += [Content.styled(f"{what}:", "bold"), Content.styled("\n".join(tail), "$text-muted")]
    elif live.phase == "compile":
        lines.append(Content.styled("compiling; the compiler's output shows here as it comes", "$text-muted"))
    elif previous is not None:
        # While it generates, the feedback it answers is the thing to read.
        lines += [Content(""), Content.styled("the turn it continues:", "bold"),
                  feedback_content(previous)]
    return Content("\n").join(lines)


MESSAGES_KEPT = 4
"""The run's latest messages shown above the turn's feedback."""


class FeedbackView(VerticalScroll):
    """A turn's feedback, with the run's latest messages above it (what a delivery did, what a
    confirmation found, why the run failed): text too long for a notification. The messages
    fold into one line while the person reads turns; a warning or an error opens them."""

    DEFAULT_CSS = """
    FeedbackView { height: 1fr; }
    FeedbackView > Static { width: 1fr; }
    FeedbackView > #feedback-messages-box { display: none; padding: 0; border-top: none;
                                            border-bottom: solid $primary 40%; }
    FeedbackView > #feedback-messages-box.-shown { display: block; }
    FeedbackView #feedback-messages-box > Contents { padding: 0 0 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._live_key: tuple[int, int] | None = None
        self.messages: list[tuple[str, str, str]] = []
        """(title, text, severity), oldest first."""

    def compose(self) -> ComposeResult:
        with Collapsible(title="messages", collapsed=True, id="feedback-messages-box"):
            yield Rows(id="feedback-messages", label_width=0)  # each title heads its text
        yield Static(Content.styled("no finished turn yet", "$text-muted"), id="feedback-text")

    def on_mount(self) -> None:
        self.border_title = "feedback"

    def add_message(self, title: str, text: str, severity: str = "information") -> None:
        self.messages = [*self.messages, (title, text, severity)][-MESSAGES_KEPT:]
        tones = {"warning": "$text-warning", "error": "$text-error"}
        rows = [(Content.styled(t or "kevin-opt", "bold " + tones.get(sev, "$text-primary")), Content(body))
                for t, body, sev in reversed(self.messages)]  # the latest first
        self.query_one("#feedback-messages", Rows).set_rows(rows)
        box = self.query_one("#feedback-messages-box", Collapsible)
        count = "1 message" if len(self.messages) == 1 else f"{len(self.messages)} messages"
        box.title = f"{count}: " + ", ".join(dict.fromkeys(t or "kevin-opt" for t, _, _ in reversed(self.messages)))
        box.set_class(True, "-shown")
        if severity in ("warning", "error"):
            box.collapsed = False
        self.scroll_home(animate=False)

    def fold_messages(self) -> None:
        """The person reads turns now: the messages take one line."""
        self.query_one("#feedback-messages-box", Collapsible).collapsed = True

    def show(self, record: TurnRecord | None, placeholder: str = "no finished turn yet", *,
             confirmed: Confirmed | None = None) -> None:
        self._live_key = None
        self.border_title = "feedback"
        text = (feedback_content(record, confirmed) if record is not None
                else Content.styled(placeholder, "$text-muted"))
        self.query_one("#feedback-text", Static).update(text)
        self.scroll_home(animate=False)

    def show_live(self, live: LiveTurn, now: float, previous: TurnRecord | None) -> None:
        """Redraw a turn in flight; while it builds, the end of the output stays in view unless
        the person scrolled up to read."""
        key = (live.trajectory, live.turn)
        follow = self._live_key != key or self.scroll_y >= self.max_scroll_y - 1
        self._live_key = key
        self.border_title = f"feedback · {live.phase} {fmt_clock(now - live.since)}"
        self.query_one("#feedback-text", Static).update(live_content(live, now, previous))
        if follow and live.output:
            self.call_after_refresh(self.scroll_end, animate=False)
        elif follow:
            self.scroll_home(animate=False)
