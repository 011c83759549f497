"""One turn of one trajectory, as ``turns.jsonl`` holds it."""

from __future__ import annotations

from .evaluation import CheckResult, EvalResult, Status
from .versioned import RUN_SCHEMA, Versioned, schema_field


class TurnRecord(Versioned):
    """One turn of one trajectory: a line of ``turns.jsonl``."""

    schema_: int = schema_field(RUN_SCHEMA)
    trajectory: int
    turn: int
    """1-based turn number within the trajectory."""
    parent_trajectory: int | None = None
    """The trajectory whose history this turn continued, when not its own (a branch, or a beam
    slot continuing another trajectory); None on turn 1 and in independent search."""
    parent_turn: int | None = None
    """The parent's turn that this one continued (None: the turn before this one)."""
    status: Status
    feedback: str
    """The one sentence that goes back to the model next turn."""
    prompt: str = ""
    response: str = ""
    reasoning: str = ""
    summary: str = ""
    code: str = ""
    kernel_path: str | None = None
    """Path of the candidate source, relative to the run directory."""
    parse_error: str | None = None
    check: CheckResult | None = None
    eval: EvalResult | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    dropped_attempts: int = 0
    """Earlier attempts left out of the prompt to fit the context budget."""
    generate_s: float | None = None
    eval_s: float | None = None
    started_at: str = ""
    finished_at: str = ""

    @property
    def speedup(self) -> float | None:
        return self.eval.speedup if self.eval is not None and self.eval.correct else None

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    def previous(self) -> tuple[int, int] | None:
        """(trajectory, turn) of the turn this one continued: its prompt carried that turn's
        history. None on turn 1."""
        return continued_from(self.trajectory, self.turn, self.parent_trajectory, self.parent_turn)

    @property
    def finished(self) -> bool:
        """The turn counts: it has an outcome the model can be told (a cancelled one does not)."""
        return self.status is not Status.CANCELLED


def continued_from(trajectory: int, turn: int, parent_trajectory: int | None,
                   parent_turn: int | None) -> tuple[int, int] | None:
    """The (trajectory, turn) whose history a turn continues; None when there is none."""
    source = trajectory if parent_trajectory is None else parent_trajectory
    previous = turn - 1 if parent_turn is None else parent_turn
    return (source, previous) if previous >= 1 else None


def best_record(records) -> TurnRecord | None:
    """The verified turn with the highest speedup (earliest wins a tie)."""
    best = None
    for rec in records:
        if rec.correct and rec.speedup is not None and (best is None or rec.speedup > best.speedup):
            best = rec
    return best


def implausible_flag(flags: list[str]) -> str:
    """The flag that names the physical floor a kernel beat (of a result flagged implausible)."""
    return next((f for f in flags if f.startswith("implausible")), "implausible runtime")
