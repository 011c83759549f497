"""Events the engine emits while it runs.

The CLI prints them as progress lines, the TUI turns them into Textual messages, plugins
may listen. They are plain pydantic models with a ``kind`` tag so they serialise to JSON.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel

from .results import BestKernel, Confirmation, Stage, TurnRecord


class RunStarted(BaseModel):
    kind: Literal["run_started"] = "run_started"
    run_id: str
    run_dir: str
    task: str
    device: str
    device_name: str
    backend: str
    model: str
    turns: int
    trajectories: int
    resumed_turns: int = 0
    """Turns already on disk when a resumed run starts."""
    note: str = ""
    """How trajectories x turns compare with the paper's 16 x 8, and what fits the KV cache."""


class TurnStarted(BaseModel):
    """Generation for one turn of one trajectory begins."""

    kind: Literal["turn_started"] = "turn_started"
    trajectory: int
    turn: int
    prompt_tokens: int | None = None
    dropped_attempts: int = 0
    parent_trajectory: int | None = None
    """The trajectory whose history this turn continues, when not its own."""


class TokenDelta(BaseModel):
    """Streamed model output. High rate: sinks should coalesce."""

    kind: Literal["token"] = "token"
    trajectory: int
    turn: int
    channel: Literal["reasoning", "text"]
    text: str


class GenerationFinished(BaseModel):
    kind: Literal["generation_finished"] = "generation_finished"
    trajectory: int
    turn: int
    completion_tokens: int | None = None
    seconds: float
    cancelled: bool = False


class EvalStage(BaseModel):
    """The evaluator entered a stage for a candidate."""

    kind: Literal["eval_stage"] = "eval_stage"
    trajectory: int
    turn: int
    stage: Stage


class EvalOutput(BaseModel):
    """Output of a candidate's worker as it comes (the compiler's log during a build). High rate:
    sinks should coalesce."""

    kind: Literal["eval_output"] = "eval_output"
    trajectory: int
    turn: int
    text: str


class TurnFinished(BaseModel):
    kind: Literal["turn_finished"] = "turn_finished"
    record: TurnRecord
    best: BestKernel | None
    """Best verified kernel so far, across trajectories."""


class Notice(BaseModel):
    kind: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "info"
    message: str
    topic: str = ""
    """What the notice is about (``delivery``), said before it; empty: the run itself."""

    def text(self) -> str:
        return f"{self.topic}: {self.message}" if self.topic else self.message


class Candidate(BaseModel):
    """A kernel about to be confirmed, by its turn's own numbers."""

    trajectory: int
    turn: int
    speedup: float


class ConfirmationStarted(BaseModel):
    """The best distinct kernels are being verified again and timed head to head."""

    kind: Literal["confirmation_started"] = "confirmation_started"
    kernels: list[Candidate]


class ConfirmationFinished(BaseModel):
    kind: Literal["confirmation_finished"] = "confirmation_finished"
    confirmation: Confirmation
    best: BestKernel | None
    """The winner (None: every kernel was dropped)."""


class RunFinished(BaseModel):
    kind: Literal["run_finished"] = "run_finished"
    run_id: str
    reason: Literal["completed", "target_reached", "roofline_reached", "stopped", "interrupted", "failed"]
    best: BestKernel | None
    turns_done: int


Event = Union[
    RunStarted, TurnStarted, TokenDelta, GenerationFinished, EvalStage, EvalOutput, TurnFinished, Notice,
    ConfirmationStarted, ConfirmationFinished, RunFinished,
]
