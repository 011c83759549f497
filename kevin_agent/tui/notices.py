"""Where the app's messages go, so that none covers what the person is reading.

Short ones are toasts, over the model output on the run screen and under the text on the history
screen (``app.tcss``), never over a dialog: while one is open they wait, and show once it closes.
Long ones (what a delivery did, what a confirmation found, an error with its hint) go to the run
screen's feedback pane, where they stay to be read, and a one-line toast says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from textual.geometry import Size
from textual.screen import ModalScreen, Screen

from ..formatting import cut_words
from .format import short_paths, toast_text, toast_width


class NoticeHost(Protocol):
    """What the notices use of the app: where they would show, and the run screen's feedback pane."""

    @property
    def screen(self) -> Screen: ...
    @property
    def size(self) -> Size: ...
    @property
    def has_run(self) -> bool: ...
    @property
    def run_screen(self) -> Any: ...

TOAST_LINES = 3
"""The most lines a toast holds; a longer message goes to the feedback pane."""
TOAST_S = 6.0
POINTER = " (more in the feedback pane)"


class Notices:
    def __init__(self, app: NoticeHost, toast: Callable[..., None]) -> None:
        self._app = app
        self._toast = toast
        self._held: list[dict[str, Any]] = []
        self._pointed: dict[str, float] = {}
        """When a toast last pointed to the feedback pane, by title."""

    def notify(self, message: str, *, title: str, severity: str, timeout: float | None, markup: bool) -> None:
        app = self._app
        room = getattr(app.screen, "toast_room", app.size.width * 3 // 4)
        # Plain text is laid out for the toast: paths shortened and broken at a "/", never inside
        # a name (markup is left to Textual).
        text = toast_text(message, room) if not markup else message
        if len(text.splitlines()) > TOAST_LINES and app.has_run and app.run_screen.is_mounted:
            app.run_screen.add_message(title, message, severity)
            now = time.monotonic()
            if self._pointed.get(title, -TOAST_S) > now - TOAST_S:
                return  # a pointer to the same pane is showing already
            self._pointed[title] = now
            first = next((line for line in message.splitlines() if line.strip()), "")
            width = toast_width(room) - len(POINTER)
            # Its first words where they say something, else only where to read it.
            text = cut_words(short_paths(first), width) + POINTER if width >= 30 else POINTER.strip(" ()")
            markup = False
        toast = dict(message=text, title=title, severity=severity, timeout=min(timeout or TOAST_S, TOAST_S),
                     markup=markup)
        if isinstance(app.screen, ModalScreen):
            self._held.append(toast)
        else:
            self._toast(**toast)

    def release(self) -> None:
        """Show what waited while a dialog was open (called when a screen under it is back)."""
        held, self._held = self._held, []
        for toast in held:
            self._toast(**toast)
