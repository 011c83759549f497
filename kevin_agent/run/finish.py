"""How a run ends, once for every front end: whether the best kernel is delivered, what stderr
says, the JSON summary and reporters, and the exit code.

A run's ``session`` fills in an ``Ending`` (the engine, its outcome or error, the signal that
ended it, the delivery plan and what delivering did) and hands it to ``close``. The TUI only
decides *when* to deliver (it asks first); whether a run is delivered at all, the success rule
and the wording are here and in ``delivery``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..console import print_error, write_json
from ..delivery import Delivery, DeliveryPlan
from ..delivery.report import render_markdown
from ..results.winner import current, winner
from ..errors import ExitCode, KevinError
from ..results import TurnRecord
from ..results.records import BestView, DeliveryView, RunSummary, turn_views
from .interrupts import signal_name

if TYPE_CHECKING:
    from ..engine.loop import Engine, RunOutcome
    from ..registry import Registry

DELIVERED_AFTER = {"completed", "target_reached", "roofline_reached", "stopped"}
"""Run endings after which the best kernel is delivered; an interrupted or failed run is resumed instead."""


@dataclass
class Outputs:
    """Where a run's summaries go besides stderr."""

    json_path: Path | None = None
    reporters: dict[str, Path] = field(default_factory=dict)
    """Reporter name -> path (``--junit PATH``)."""

    @classmethod
    def from_args(cls, args, registry: Registry) -> Outputs:
        paths = {name: getattr(args, f"reporter_{name}", None) for name in registry.reporters}
        return cls(json_path=getattr(args, "json_path", None), reporters={k: v for k, v in paths.items() if v})


@dataclass
class Ending:
    """Everything about how one run ended."""

    run_id: str | None = None
    """Known before the engine is (a resumed run)."""
    engine: Engine | None = None
    outcome: RunOutcome | None = None
    error: KevinError | None = None
    """Why the run, or its start, failed."""
    signum: int | None = None
    """The signal that ended it."""
    quit: bool = False
    """The person quit the TUI while the run was going."""
    run_asked: bool = True
    """A run was started or asked for (False: the TUI's history, browsed and left)."""
    plan: DeliveryPlan | None = None
    delivery: Delivery | None = None

    @property
    def interrupted(self) -> bool:
        return self.signum is not None or self.quit or (self.outcome is not None and self.outcome.reason == "interrupted")

    def wants_delivery(self) -> bool:
        return (self.outcome is not None and self.error is None and not self.interrupted
                and self.outcome.reason in DELIVERED_AFTER)

    @property
    def exit_code(self) -> int:
        """The headless contract's exit code, for both front ends."""
        if self.signum is not None:
            return ExitCode.for_signal(self.signum)
        if self.error is not None:
            return self.error.exit_code
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if self.engine is None:
            return ExitCode.OK  # no run was started (the TUI's history alone): nothing failed
        return ExitCode.OK if self.delivery is not None and self.delivery.succeeded() else ExitCode.NONE

    def lines(self) -> list[str]:
        """What stderr says after the run (errors are printed by ``console.print_error``)."""
        engine = self.engine
        run_id = engine.store.info.run_id if engine is not None else self.run_id
        out: list[str] = []
        if self.signum is not None:
            before = engine is None and self.run_asked
            out.append(f"interrupted by {signal_name(self.signum)}" + (" before the run started" if before else ""))
        if self.delivery is not None:
            out += self.delivery.notes
        resumable = self.interrupted or self.error is not None or (
            self.outcome is not None and self.outcome.reason == "stopped")
        # A run that never got going has nothing to continue: its error's own hint says what to do.
        if resumable and run_id is not None and (engine is not None or self.signum is not None):
            done = len(engine.records) if engine is not None else 0
            saved = (f"{done} finished turn{' is' if done == 1 else 's are'} saved. "
                     if engine is not None else "")
            out.append(f"{saved}Continue with: kevin-opt resume {run_id}")
        return out


def close(ending: Ending, outputs: Outputs, registry: Registry, stream: TextIO | None = None) -> int:
    """Print how the run ended, write the summaries; returns the exit code."""
    out = stream or sys.stderr
    if ending.error is not None:
        _guard(print_error, ending.error, out)
    for line in ending.lines():
        _guard(_say, line, out)
    engine = ending.engine
    if engine is not None:
        info, records = engine.store.info, engine.store.records()
        for name, path in outputs.reporters.items():
            registry.reporters[name].write(path, info, records, engine.best_turn())
            _guard(_say, f"wrote {path}", out)
        if ending.outcome is not None and ending.error is None:
            write_step_summary(render_markdown(info, records))
        if outputs.json_path is not None:
            write_json(outputs.json_path, summary(ending, records))
    return ending.exit_code


def _say(line: str, out: TextIO) -> None:
    print(f"kevin-opt: {line}", file=out, flush=True)


def _guard(fn, *args) -> None:
    # After SIGHUP the terminal may be gone; the run's state is on disk either way.
    try:
        fn(*args)
    except OSError:
        pass


def write_step_summary(markdown: str) -> bool:
    """Append to ``$GITHUB_STEP_SUMMARY`` when it is set (GitHub Actions)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return False
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(markdown.rstrip("\n") + "\n\n")
    return True


def summary(ending: Ending, records: list[TurnRecord]) -> RunSummary:
    """The ``--json`` summary."""
    engine = ending.engine
    assert engine is not None
    info = engine.store.info
    best = winner(info, records)
    confirmation = current(info, records)
    delivery = ending.delivery
    return RunSummary(
        run_id=info.run_id, task=info.task.path, device=info.device, device_name=info.device_name,
        language=info.language, backend=info.backend, model=info.model, run_dir=str(engine.store.dir),
        reason=ending.outcome.reason if ending.outcome is not None else "interrupted" if ending.interrupted else "failed",
        exit_code=ending.exit_code, error=ending.error.message if ending.error is not None else None,
        signal=signal_name(ending.signum) if ending.signum is not None else None,
        turns=turn_views(records),
        best=BestView.of(best, best.record.kernel_path) if best is not None else None,
        confirmation=list(confirmation.kernels) if confirmation is not None else None,
        delivery=None if delivery is None else DeliveryView(
            outcome=delivery.outcome, headline=delivery.headline(),
            plan=[f"{label}: {text}" if label else text for label, text in delivery.plan.describe()],
            notes=delivery.notes),
        commit=delivery.commit if delivery is not None else None,
        kernel_module=str(delivery.kernel_path) if delivery is not None and delivery.kernel_path else None,
        report=delivery.report.model_dump(mode="json") if delivery is not None and delivery.report else None,
        e2e=delivery.e2e if delivery is not None else None,
    )
