"""SIGINT, SIGTERM and SIGHUP under the TUI: they end the run as they do headless (``interrupts``).

The handlers are plain ``signal`` handlers, not the event loop's: Python runs them in the main
thread even while the event loop is blocked (Textual writing to a terminal that is gone waits
for good on its output thread), and a handler only hands the signal to the loop. So that a
stuck loop cannot keep the process alive, every signal also arms a deadline that ends the
process (``interrupts.Deadline``): a hangup or a second signal soon, any other signal once the
run has had time to end on its own. A hangup also points the terminal's streams at /dev/null
first, so that nothing blocks on, or dies of, writing to it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType

from ..run.interrupts import HANDLED, Deadline, Terminal

HANGUP_GRACE_S = 5.0
"""After a hangup: long enough for the engine to unwind and record the run, short for a person
whose terminal just closed."""
SIGNAL_GRACE_S = 60.0
"""After SIGINT or SIGTERM with the terminal still there: the run ends by itself within seconds,
or finishes the delivery under way."""
SECOND_SIGNAL_GRACE_S = 3.0
"""A second signal means now."""


class AppSignals:
    """The signal handlers of a TUI that owns its process, installed from the event loop."""

    def __init__(self, interrupt: Callable[[int], None]) -> None:
        self._interrupt = interrupt
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, object] = {}
        self._terminal = Terminal()
        self.deadline = Deadline()
        self.first: int | None = None

    def install(self) -> None:
        self._loop = asyncio.get_running_loop()
        for sig in HANDLED:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._terminal.gone()
        first = self.first is None
        if first:
            self.first = signum
        code = 128 + self.first
        if not first:
            grace = SECOND_SIGNAL_GRACE_S
        elif signum == signal.SIGHUP:
            grace = HANGUP_GRACE_S
        else:
            grace = SIGNAL_GRACE_S
        self.deadline.arm(grace, code)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._interrupt, signum)
