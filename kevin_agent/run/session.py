"""One run from open to close, the same for every front end and for every run of many:

    session = RunSession.new(config, task_file, backend=shared)   # or RunSession.resumed(run_id)
    session.open(sink)                          # task probed, backend connected, run directory made
    session.drive()                             # the turns; ``session.ending`` says how it ended
    if session.ending.wants_delivery():
        session.deliver(session.plan())         # or deliver(plan, declined=True)
    code = session.close(outputs, registry)     # stderr, the summaries, the exit code; run given up

The headless command calls these in a row; the TUI calls each from a Textual worker and decides
when to deliver (it asks first); many runs in one process (a model's modules, a bench's tasks)
are one session after another on one backend. A backend the session is given stays its maker's
to close; one the session makes is closed when the drive ends (a vLLM engine holds the GPU).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..delivery import Delivery, DeliveryPlan, deliver, plan_delivery
from ..errors import KevinError
from ..protocols import Backend, EventSink
from .finish import Ending, Outputs, close
from .launch import resume_run, start_run

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..engine.loop import Engine
    from ..registry import Registry
    from ..results import TurnRecord
    from ..store import RunStore

Opener = Callable[[EventSink], "Engine"]
"""Opens the run's engine (``start_run`` / ``resume_run``), reporting to the sink it is given."""


class RunSession:
    """One run: its engine once opened, how it ended, and its delivery."""

    def __init__(self, opener: Opener, *, run_id: str | None = None, replace: bool = False,
                 accept_flagged: bool = False) -> None:
        """``run_id``: the run, where it is known before it opens (a resumed one). ``replace``,
        ``accept_flagged``: what the delivery may overwrite and deliver (``--replace``,
        ``--accept-flagged``)."""
        self.opener = opener
        self.replace, self.accept_flagged = replace, accept_flagged
        self.ending = Ending(run_id=run_id)
        self.records: list[TurnRecord] = []
        """The records the last plan was made from: the report describes the kernel the plan names."""

    @classmethod
    def new(cls, config: RunConfig, task_file: Path, *, registry: Registry | None = None,
            backend: Backend | None = None, names: Sequence[str] = (), replace: bool = False,
            accept_flagged: bool = False) -> RunSession:
        """A new run of ``task_file``. ``backend``: one made for many runs (``launch.open_backend``),
        used and left open; without it the run makes its own. ``names``: what a ``--responses``
        folder files the task's script under (default: the task file's stem)."""
        return cls(lambda sink: start_run(config, task_file, sink, registry=registry, backend=backend,
                                          names=names, replace=replace),
                   replace=replace, accept_flagged=accept_flagged)

    @classmethod
    def resumed(cls, run: str | RunStore, *, runs_root: Path | None = None, overrides: dict | None = None,
                registry: Registry | None = None, backend: Backend | None = None, names: Sequence[str] = (),
                replace: bool = False, accept_flagged: bool = False) -> RunSession:
        """A stored run, continued from its last finished turn (a run id, or a store ``take_run``
        gave, so that a run another process drives was refused before anything loads)."""
        run_id = run if isinstance(run, str) else run.info.run_id
        return cls(lambda sink: resume_run(run, sink, runs_root=runs_root, overrides=overrides, registry=registry,
                                           backend=backend, names=names, replace=replace),
                   run_id=run_id, replace=replace, accept_flagged=accept_flagged)

    @property
    def engine(self) -> Engine | None:
        return self.ending.engine

    def open(self, sink: EventSink) -> Engine:
        """The task probed, the backend connected and the run directory made (or taken); the
        errors of a run that cannot start (``KevinError``) propagate, with nothing left running."""
        self.ending.engine = engine = self.opener(sink)
        return engine

    def drive(self) -> Ending:
        """Run the engine to its end in this thread and say in ``ending`` how it ended: its
        outcome, the user-facing error that stopped it mid-run (the finished turns are kept), or
        the interrupt. The evaluator (and a backend the run made) is closed whatever happens, and
        a build that started while an abort was under way is killed."""
        from .interrupts import kill_run_processes

        engine = self.engine
        assert engine is not None, "open the session first"
        try:
            self.ending.outcome = engine.run()
        except KevinError as exc:
            self.ending.error = exc
        except KeyboardInterrupt as exc:
            self.ending.signum = getattr(exc, "signum", signal.SIGINT)
        finally:
            engine.close()
            if engine.aborted:
                kill_run_processes()
        return self.ending

    def plan(self) -> DeliveryPlan:
        """The delivery plan for the run as it stands. The best kernels are confirmed first where
        they are not yet (the run goes on, say); a run that can no longer confirm them (it ended
        before it could) delivers nothing."""
        engine = self.engine
        assert engine is not None, "open the session first"
        confirmation = engine.confirm()
        self.records = records = engine.store.records()
        if confirmation is None and any(r.correct for r in records):
            plan = DeliveryPlan(nothing="the best kernels were not confirmed (the run ended before they could be): "
                                        "resume the run to confirm and deliver them",
                                commit_wanted=engine.config.commit)
        else:
            plan = plan_delivery(engine.task, engine.store.info, records, engine.config, replace=self.replace,
                                 accept_flagged=self.accept_flagged)
        self.ending.plan = plan
        return plan

    def deliver(self, plan: DeliveryPlan | None = None, *, declined: bool = False,
                say: Callable[[str], None] | None = None) -> Delivery:
        """Carry out ``plan`` (the last one made; ``plan.consented()`` once the person said yes)
        and record in run.json what it did. ``declined``: the person said no. ``say`` hears, as
        it starts, what takes a while (the whole model run with the kernel)."""
        engine = self.engine
        plan = plan or self.ending.plan
        assert engine is not None and plan is not None, "plan the delivery first"
        whole_model = _whole_model(engine, say) if plan.model_file is not None else None
        delivery = deliver(plan, engine.task, engine.store.info, self.records, declined=declined,
                           whole_model=whole_model)
        if delivery.outcome == "refused":
            delivery.notes.append(self._deliver_later(plan))
        engine.store.update_info(commit=delivery.commit or engine.store.info.commit, delivery=delivery.headline())
        self.ending.delivery = delivery
        return delivery

    def _deliver_later(self, plan: DeliveryPlan) -> str:
        """After a refused delivery: where the winning kernel waits, and the command that delivers it."""
        engine = self.engine
        best = engine.best_kernel()
        where = f"the winning kernel is kept in {best.kernel_path}" if best is not None else "the run keeps its kernels"
        flags = (" --replace" if plan.needs_replace else "") + (" --accept-flagged" if plan.flagged is not None else "")
        once = " once the changes there are committed, stashed or discarded" if plan.blocked else ""
        return f"{where}; kevin-opt resume {engine.store.info.run_id}{flags} delivers it{once}"

    def as_it_stands(self) -> None:
        """A delivery refused a while ago (the TUI stayed open), said as things stand now: what was in
        the way may be gone (the change was stashed), and then the note says so instead of blaming it."""
        delivery = self.ending.delivery
        if self.engine is None or delivery is None or delivery.outcome != "refused" or not delivery.plan.blocked:
            return
        refused_plan, records = self.ending.plan, self.records
        plan = self.plan()
        self.ending.plan, self.records = refused_plan, records
        if plan.blocked or plan.kernel is None:
            return
        then = "; ".join(blocked.split(":", 1)[0] for blocked in delivery.plan.blocked)
        run_id = self.engine.store.info.run_id
        self.ending.delivery = delivery.model_copy(update={"notes": [
            f"not written: when the run ended there were {then}; there are none now",
            f"{self._deliver_later(plan).split(';')[0]}; kevin-opt resume {run_id} delivers it now"]})

    def close(self, outputs: Outputs, registry: Registry, stream: TextIO | None = None) -> int:
        """Say how the run ended, write the summaries and give the run up; the exit code."""
        try:
            return close(self.ending, outputs, registry, stream)
        finally:
            self.release()

    def release(self) -> None:
        """Give the run up, so that other processes see it as it is (and may resume it)."""
        if self.engine is not None:
            self.engine.store.release()


def _whole_model(engine: Engine, say: Callable[[str], None] | None):
    """The whole model with and without a delivered kernel, in fresh workers on the run's device
    (``delivery.e2e``); no profile, so no Amdahl prediction (``kevin-opt e2e --profile`` gives one)."""
    from ..delivery.e2e import DEFAULT_ROUNDS, measure
    from ..model.modelfile import load_model_file

    settings = engine.config.eval_settings(engine.store.info.device)

    def run(model_path: Path, kernel: Path):
        if say is not None:
            say(f"running the whole model {model_path.name} with and without the kernel before the commit "
                "(--no-e2e skips this)")
        result = measure(load_model_file(model_path), kernel, settings, profile=None, rounds=DEFAULT_ROUNDS)
        # Beside the task, as the report names them: it is committed, the person's absolute paths are not.
        return result.model_copy(update={"model_file": model_path.name, "kernel_file": kernel.name})

    return run
