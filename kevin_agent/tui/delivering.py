"""The app's delivery of a run's kernel: `c` (now) or the end of the run (asked first), one plan
shown in a dialog, then carried out in a worker; what it did goes to the run screen's status and
the feedback pane. A mixin of ``KevinApp``, which owns the state it reads and the workers' results
(``on_worker_state_changed``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from .screens.dialogs import ConfirmScreen, commit_summary
from .screens.run import REASONS

if TYPE_CHECKING:
    from ..delivery import Delivery, DeliveryPlan
    from ..run.session import RunSession


class Delivering:
    """``KevinApp``'s delivery: it reads the app's ``session``, ``engine``, ``outcome``, ``running``,
    ``signum``, ``_delivering`` and writes ``delivery``."""

    def action_commit_best(self) -> None:
        if self.engine is None:
            self.notify("no run to commit from", severity="warning")
            return
        if self._delivering:
            self.notify("a delivery is in progress", severity="warning")
            return
        if self._best_delivered():
            self.notify(f"the best kernel is delivered already: {self.delivery.headline()}", markup=False)
            return
        self._plan_delivery(self.session)

    def _best_delivered(self) -> bool:
        """The kernel `c` would deliver is the one delivered already (a better one since offers it again)."""
        delivery = self.delivery
        if delivery is None or not delivery.succeeded() or delivery.plan.kernel is None or self.engine is None:
            return False
        best = self.engine.best_turn()
        return best is not None and (best.trajectory, best.turn) == (delivery.plan.kernel.trajectory,
                                                                    delivery.plan.kernel.turn)

    def _same_kernel(self, plan: DeliveryPlan) -> bool:
        best = self.outcome.best if self.outcome is not None else None
        return best is not None and plan.kernel is not None and (best.trajectory, best.turn) == (
            plan.kernel.trajectory, plan.kernel.turn)

    # --- delivery: one plan, shown, then carried out ------------------------------------------
    @work(thread=True, group="plan", exit_on_error=False)
    def _plan_delivery(self, session: RunSession, at_end: bool = False) -> tuple[RunSession, DeliveryPlan, bool]:
        session.engine.store.take()  # after the run it was given up; another process may have taken it since
        return session, session.plan(), at_end

    def _ask(self, session: RunSession, plan: DeliveryPlan, at_end: bool) -> None:
        if plan.kernel is None or plan.blocked:
            if at_end:
                self._deliver(session, plan)  # nothing to ask: the delivery says why
            else:
                self.notify(plan.why_not_written(), severity="warning", timeout=15, markup=False)
                self._settle()
            return
        title, yes = plan.question()

        def answered(answer: bool | None) -> None:
            if answer:
                self._deliver(session, plan.consented())
            elif at_end:
                self._deliver(session, plan, declined=True)
            else:
                self.notify(self._declined_words(), markup=False)
                self._settle()

        self.push_screen(ConfirmScreen(title, commit_summary(plan), yes=yes), answered)

    def _declined_words(self) -> str:
        """What a no to `c` leaves: nothing new, and what an earlier delivery wrote stays."""
        earlier = self.delivery
        if earlier is None or not earlier.written:
            return "nothing written, nothing committed"
        names = ", ".join(p.name for p in earlier.written)
        return f"nothing new written or committed; {names} from the earlier delivery ({earlier.headline()}) stay"

    @work(thread=True, group="deliver", exit_on_error=False)
    def _deliver(self, session: RunSession, plan: DeliveryPlan, *, declined: bool = False) -> Delivery:
        self._delivering = True
        try:
            return session.deliver(plan, declined=declined,
                                   say=lambda text: self.call_from_thread(self.run_screen.set_status, text,
                                                                          "$text-accent"))
        finally:
            self._delivering = False

    def _delivered(self, delivery: Delivery) -> None:
        self.delivery = delivery
        if self.outcome is not None and not self.running:
            label, _ = REASONS.get(self.outcome.reason, (self.outcome.reason, ""))
            text = f"{label} · {delivery.headline()}"
        else:
            text = f"running · {delivery.headline()}"
        style = "$text-success" if delivery.succeeded() else "$text-warning"
        self.run_screen.set_status(text, style)
        self.notify("\n".join(delivery.notes), title="delivery", timeout=15, markup=False,
                    severity="information" if delivery.succeeded() else "warning")
        self._settle()
        if self.signum is not None:
            self.exit(self.exit_code)
