"""What the run screen knows about the run in progress, rebuilt from engine events.

Kept apart from the widgets so that the run screen only renders: every event goes through
``RunState.apply`` and the screen redraws what changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..events import (ConfirmationFinished, EvalStage, Event, GenerationFinished, Notice, RunFinished, RunStarted,
                      TurnFinished, TurnStarted)
from ..results import BestKernel, Confirmed, Status, TurnRecord, continued_from

TurnKey = tuple[int, int]
"""(trajectory, turn) of a finished or live turn."""
CancelledKey = tuple[int, int, int]
"""(trajectory, turn, n): the n-th cancelled generation of that turn."""
Key = TurnKey | CancelledKey


@dataclass
class LiveTurn:
    """A turn whose generation or evaluation is in flight."""

    trajectory: int
    turn: int
    parent_trajectory: int | None = None
    """The trajectory whose history this turn continues, when not its own."""
    phase: str = "generating"
    """``generating``, ``cancelled``, ``queued`` or the evaluation stage (``compile``, ``timing``, ...)."""
    since: float = 0.0
    """Clock reading when the phase began."""
    stages: list[tuple[str, float]] = field(default_factory=list)
    """Every phase entered so far, with its start."""
    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)
    """The evaluation's output as it came (the compiler's log during a build)."""
    reasoning_chars: int = 0
    text_chars: int = 0

    def enter(self, phase: str, now: float) -> None:
        self.phase, self.since = phase, now
        self.stages.append((phase, now))

    def add(self, channel: str, text: str) -> None:
        if channel == "reasoning":
            self.reasoning.append(text)
            self.reasoning_chars += len(text)
        elif channel == "eval":
            self.output.append(text)
        else:
            self.text.append(text)
            self.text_chars += len(text)

    @staticmethod
    def _joined(parts: list[str]) -> str:
        # Joined once per redraw, then kept joined so the next join only adds the new parts.
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    def reasoning_text(self) -> str:
        return self._joined(self.reasoning)

    def answer_text(self) -> str:
        return self._joined(self.text)

    def output_text(self) -> str:
        return self._joined(self.output)

    def durations(self, now: float) -> list[tuple[str, float, bool]]:
        """(phase, seconds, still running) for each phase entered, in order."""
        ends = [start for _, start in self.stages[1:]] + [now]
        return [(name, end - start, i == len(self.stages) - 1)
                for i, ((name, start), end) in enumerate(zip(self.stages, ends))]


@dataclass
class RunState:
    clock: Callable[[], float] = time.monotonic
    started: RunStarted | None = None
    records: dict[TurnKey, TurnRecord] = field(default_factory=dict)
    """Finished turns (the ones the model is told about)."""
    cancelled: dict[TurnKey, list[TurnRecord]] = field(default_factory=dict)
    """Cancelled generations of each turn, in order; the turn was generated again."""
    live: dict[int, LiveTurn] = field(default_factory=dict)
    """In-flight turn per trajectory."""
    best: BestKernel | None = None
    confirmed: dict[TurnKey, Confirmed] = field(default_factory=dict)
    """The second look each confirmed kernel got, by its turn (empty until a confirmation)."""
    finished: RunFinished | None = None
    notices: list[Notice] = field(default_factory=list)
    last_finished: TurnKey | None = None

    @property
    def active(self) -> bool:
        return self.started is not None and self.finished is None

    def add_records(self, records: Iterable[TurnRecord]) -> None:
        """Turns stored before this screen saw the run (a resumed run), cancelled ones included."""
        for rec in records:
            self._add(rec)
        self.best = self.best or best_of(list(self.records.values()))

    def _add(self, rec: TurnRecord) -> None:
        key = (rec.trajectory, rec.turn)
        if rec.status is Status.CANCELLED:
            attempts = self.cancelled.setdefault(key, [])
            if rec not in attempts:  # read from the store and reported by an event too
                attempts.append(rec)
        elif key not in self.records:  # the first finished line of a turn is the one that counts
            self.records[key] = rec
            self.last_finished = key

    def record(self, key: Key) -> TurnRecord | None:
        if len(key) == 3:
            attempts = self.cancelled.get(key[:2], [])
            return attempts[key[2]] if key[2] < len(attempts) else None
        return self.records.get(key)

    def continued(self, live: LiveTurn) -> TurnRecord | None:
        """The finished turn whose feedback a live turn answers."""
        key = continued_from(live.trajectory, live.turn, live.parent_trajectory, None)
        return self.records.get(key) if key is not None else None

    def _live_turn(self, trajectory: int, turn: int) -> LiveTurn | None:
        live = self.live.get(trajectory)
        return live if live is not None and live.turn == turn else None

    def apply(self, event: Event) -> None:
        now = self.clock()
        if isinstance(event, RunStarted):
            self.started = event
            self.finished = None
        elif isinstance(event, TurnStarted):
            live = self._live_turn(event.trajectory, event.turn)
            # The turn's first tokens can be drawn before its TurnStarted message is handled;
            # a cancelled turn starts again under the same number, from scratch.
            if live is None or live.phase != "generating":
                live = self.live[event.trajectory] = LiveTurn(event.trajectory, event.turn)
                live.enter("generating", now)
            live.parent_trajectory = event.parent_trajectory
        elif isinstance(event, GenerationFinished):
            if (live := self._live_turn(event.trajectory, event.turn)) is not None:
                live.enter("cancelled" if event.cancelled else "queued", now)
        elif isinstance(event, EvalStage):
            if (live := self._live_turn(event.trajectory, event.turn)) is not None:
                live.enter(event.stage.value, now)
        elif isinstance(event, TurnFinished):
            self._add(event.record)
            if event.best is not None:
                self.best = event.best
            if self._live_turn(event.record.trajectory, event.record.turn) is not None:
                del self.live[event.record.trajectory]
        elif isinstance(event, Notice):
            self.notices.append(event)
        elif isinstance(event, ConfirmationFinished):
            self.best = event.best
            self.confirmed = {(k.trajectory, k.turn): k for k in event.confirmation.kernels
                              if k.trajectory is not None and k.turn is not None}
        elif isinstance(event, RunFinished):
            self.finished = event
            self.live.clear()
            self.best = event.best

    def add_tokens(self, trajectory: int, turn: int, channel: str, text: str) -> LiveTurn | None:
        if (trajectory, turn) in self.records:
            return None
        live = self._live_turn(trajectory, turn)
        if live is None and channel == "eval":
            return None  # a build's output outlived its turn's display
        if live is None:
            # Tokens can only follow TurnStarted; a stray chunk (a late flush) starts the turn.
            live = self.live[trajectory] = LiveTurn(trajectory, turn)
            live.enter("generating", self.clock())
        live.add(channel, text)
        return live

    def trajectories(self) -> list[int]:
        known = {t for t, _ in self.records} | {t for t, _ in self.cancelled} | set(self.live)
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
