"""How the app ends: `q` (asked while a run goes on; a second `q` leaves at once) and the signals
(SIGINT, SIGTERM, SIGHUP: the run ends as headless, exit 128 + the signal; a second one leaves at
once). A mixin of ``KevinApp``, whose state (``running``, ``engine``, ``signum``, ``_quitting``) it
reads and sets."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content

from ..run.interrupts import kill_run_processes, signal_name
from .screens.dialogs import ConfirmScreen


class Quitting:
    """``KevinApp``'s quit and signal handling."""

    # --- signals ----------------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        if self.handle_signals:
            self.signals.install()

    def on_unmount(self) -> None:
        if self.handle_signals:
            self.signals.uninstall()

    def interrupt(self, signum: int) -> None:
        """A signal: end the run as headless does (abort, record it as interrupted, exit with
        128 + signum once the engine has unwound). A second one leaves at once."""
        if self.left_on_second_signal(self.running):
            return
        self.signum = signum
        if self.running:
            if self.engine is not None:
                self.engine.abort()
            else:
                kill_run_processes()  # the task's probe; the engine is aborted as soon as it exists
            self.run_screen.set_status(f"{signal_name(signum)}: ending the run", "$text-warning")
        elif not self._delivering:
            self.exit(self.exit_code)

    def left_on_second_signal(self, busy: bool) -> bool:
        """A signal after the first leaves at once (True): what was ``busy`` is abandoned, its
        thread may still be unwinding."""
        if self.signum is None:
            return False
        kill_run_processes()
        self._abandoned = busy
        self.exit(self.exit_code)
        return True

    # --- quitting ---------------------------------------------------------------------------
    def action_quit(self) -> None:
        if not self.running:
            self.exit(self.exit_code)
            return
        body = Content(
            "A run is in progress. Quit? The generation in flight is cancelled and nothing new "
            "starts; an evaluation in flight is finished first.\n"
            "Finished turns are saved: resume the run from the history screen, or with kevin-opt resume."
        )
        self.confirm_quit(body, lambda: self.running, self._halt)

    def _halt(self) -> None:
        self._quitting = True
        if self.engine is not None:
            self.engine.halt()
        self.run_screen.set_status("quitting once the evaluation in flight ends (q again: now)", "$text-warning")

    def confirm_quit(self, body: Content | str, busy: Callable[[], bool], stop: Callable[[], None]) -> None:
        """Ask before quitting while work goes on (``busy``); yes ``stop``s it, or leaves when it
        ended meanwhile. A second request leaves now: the evaluation in flight still ends before
        the process does."""
        if self._quitting:
            self.action_exit_now()
            return

        def answered(yes: bool | None) -> None:
            if yes and busy():
                stop()
            elif yes:
                self.exit(self.exit_code)

        self.push_screen(ConfirmScreen("quit?", body, yes="Quit"), answered)

    def action_exit_now(self) -> None:
        if self.running:
            # Now means now: the turns in flight are dropped (resume does them again).
            self._quitting = True
            if self.engine is not None:
                self.engine.abort()
        self.exit(self.exit_code)
