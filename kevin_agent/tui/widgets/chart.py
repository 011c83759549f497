"""Best verified speedup over turns: a sparkline with its scale written underneath."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Sparkline, Static

from ...formatting import fmt_speedup


class SpeedupChart(Vertical):
    DEFAULT_CSS = """
    SpeedupChart { height: auto; }
    SpeedupChart Sparkline { height: 2; }
    SpeedupChart > .sparkline--max-color { color: $success; }
    """

    def compose(self) -> ComposeResult:
        yield Sparkline([], id="chart-line")
        yield Static(id="chart-caption")

    def on_mount(self) -> None:
        self.border_title = "best speedup"
        self.show([])

    def show(self, curve: list[float], confirmed: float | None = None) -> None:
        """``curve[i]`` is the best speedup the turns measured after turn ``i + 1`` (0 while none
        is verified); ``confirmed``: the winner's confirmed speedup, once there is one."""
        # A flat line of zeros would draw as full bars: nothing verified draws nothing.
        self.query_one(Sparkline).data = curve if curve and max(curve) > 0 else []
        caption = self.query_one("#chart-caption", Static)
        if not curve:
            caption.update(Content.styled("no turns yet", "$text-muted"))
        elif max(curve) <= 0:
            caption.update(Content.styled("none verified yet", "$text-muted"))
        else:
            # The line is the turns' own numbers; the confirmed one is said apart, as what it is.
            parts = [f"turns 1-{len(curve)}: ", (fmt_speedup(max(curve)), "bold $text-success")]
            if confirmed is not None:
                parts += ["\nconfirmed: ", (fmt_speedup(confirmed), "bold $text-accent")]
            caption.update(Content.assemble(*parts))
