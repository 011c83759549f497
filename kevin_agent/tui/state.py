"""What the run screen knows about the run in progress, rebuilt from engine events.

Kept apart from the widgets so that the run screen only renders: every event goes through
``RunState.apply`` and the screen redraws what changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..events import (
    EvalStage,
    Event,
    GenerationFinished,
    Notice,
    RunFinished,
    RunStarted,
    TurnFinished,
    TurnStarted,
)
from ..results import BestKernel, TurnRecord

TurnKey = tuple[int, int]


@dataclass
class LiveTurn:
    """A turn whose generation or evaluation is in flight."""

    trajectory: int
    turn: int
    phase: str = "generating"
    """``generating``, ``cancelled`` or the evaluation stage (``compile``, ``timing``, ...)."""
    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning_chars: int = 0
    text_chars: int = 0

    def add(self, channel: str, text: str) -> None:
        if channel == "reasoning":
            self.reasoning.append(text)
            self.reasoning_chars += len(text)
        else:
            self.text.append(text)
            self.text_chars += len(text)

    def reasoning_text(self) -> str:
        # Joined once per redraw, then kept joined so the next join only adds the new parts.
        if len(self.reasoning) > 1:
            self.reasoning[:] = ["".join(self.reasoning)]
        return self.reasoning[0] if self.reasoning else ""

    def answer_text(self) -> str:
        if len(self.text) > 1:
            self.text[:] = ["".join(self.text)]
        return self.text[0] if self.text else ""


@dataclass
class RunState:
    started: RunStarted | None = None
    records: dict[TurnKey, TurnRecord] = field(default_factory=dict)
    live: dict[int, LiveTurn] = field(default_factory=dict)
    """In-flight turn per trajectory."""
    best: BestKernel | None = None
    finished: RunFinished | None = None
    notices: list[Notice] = field(default_factory=list)
    last_finished: TurnKey | None = None

    @property
    def active(self) -> bool:
        return self.started is not None and self.finished is None

    def add_records(self, records: list[TurnRecord]) -> None:
        """Turns finished before this screen saw the run (a resumed run)."""
        for rec in records:
            self.records[(rec.trajectory, rec.turn)] = rec
            self.last_finished = (rec.trajectory, rec.turn)
        self.best = self.best or best_of(records)

    def apply(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.started = event
            self.finished = None
        elif isinstance(event, TurnStarted):
            live = self.live.get(event.trajectory)
            # The turn's first tokens can be drawn before its TurnStarted message is handled.
            if live is None or live.turn != event.turn:
                self.live[event.trajectory] = LiveTurn(event.trajectory, event.turn)
        elif isinstance(event, GenerationFinished):
            live = self.live.get(event.trajectory)
            if live is not None and live.turn == event.turn:
                live.phase = "cancelled" if event.cancelled else "parse"
        elif isinstance(event, EvalStage):
            live = self.live.get(event.trajectory)
            if live is not None and live.turn == event.turn:
                live.phase = event.stage.value
        elif isinstance(event, TurnFinished):
            key = (event.record.trajectory, event.record.turn)
            self.records[key] = event.record
            self.last_finished = key
            if event.best is not None:
                self.best = event.best
            live = self.live.get(event.record.trajectory)
            if live is not None and live.turn == event.record.turn:
                del self.live[event.record.trajectory]
        elif isinstance(event, Notice):
            self.notices.append(event)
        elif isinstance(event, RunFinished):
            self.finished = event
            self.live.clear()
            if event.best is not None:
                self.best = event.best

    def add_tokens(self, trajectory: int, turn: int, channel: str, text: str) -> LiveTurn | None:
        if (trajectory, turn) in self.records:
            return None
        live = self.live.get(trajectory)
        if live is None or live.turn != turn:
            # Tokens can only follow TurnStarted; a stray chunk (a late flush) starts the turn.
            live = self.live[trajectory] = LiveTurn(trajectory, turn)
        live.add(channel, text)
        return live

    def trajectories(self) -> list[int]:
        known = {t for t, _ in self.records} | set(self.live)
        if self.started is not None:
            known |= set(range(self.started.trajectories))
        return sorted(known)

    def best_curve(self) -> list[float]:
        return best_curve(list(self.records.values()))


def best_of(records: list[TurnRecord]) -> BestKernel | None:
    return BestKernel.of(records)


def best_curve(records: list[TurnRecord]) -> list[float]:
    """Best verified speedup over all trajectories after each turn number (0 while none)."""
    if not records:
        return []
    last = max(r.turn for r in records)
    per_turn = [0.0] * (last + 1)
    for rec in records:
        if rec.speedup is not None:
            per_turn[rec.turn] = max(per_turn[rec.turn], rec.speedup)
    curve, best = [], 0.0
    for turn in range(1, last + 1):
        best = max(best, per_turn[turn])
        curve.append(best)
    return curve
