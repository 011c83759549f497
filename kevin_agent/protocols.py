"""The interfaces the engine is built from. Parts are injected, never subclassed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from .events import Event
from .results import Confirmation, EvalResult, Stage, TurnRecord
from .results.device import DeviceFacts
from .task import TaskProbe

#: Called with (index of the prompt in the batch, channel, text delta) as tokens stream.
TokenCallback = Callable[[int, Literal["reasoning", "text"], str], None]
#: Called with (index of the prompt in the batch, its generation) as soon as that prompt is done.
DoneCallback = Callable[[int, "Generation"], None]


class Generation(BaseModel):
    """What a backend returns for one prompt."""

    text: str
    """The answer (for reasoning models that return thinking inline, the whole output)."""
    reasoning: str = ""
    """Thinking returned separately from the answer, when the server splits it out."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    cancelled: bool = False


@runtime_checkable
class Backend(Protocol):
    """A source of model responses.

    A backend may also have ``check()``, called once before a run starts and before its run
    directory is made: it raises ``BackendError`` when the backend cannot serve the run (a server
    that does not answer, or does not serve the model), so that the person hears the cause first.
    """

    name: str
    model: str
    calls_on_done: bool
    """Whether ``generate`` calls ``on_done`` as each prompt is answered (a backend that does not
    declare it is not given one, and its candidates are built when the whole turn is in)."""

    def generate(
        self,
        prompts: Sequence[str],
        *,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
        on_done: DoneCallback | None = None,
    ) -> list[Generation]:
        """Answer every prompt; all prompts of one turn come in one call so they can batch.

        ``on_done(i, generation)`` is called as soon as prompt ``i`` is answered, while the others
        still generate, so its candidate can be checked and compiled early. When ``cancel`` is set
        mid-way, return what was generated so far with ``cancelled=True``. Raises
        ``BackendError`` for failures the person must fix.
        """
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in the model's context (an estimate is fine)."""
        ...

    def close(self) -> None: ...


#: Called with (index of the candidate in the batch, stage) as evaluation moves on.
StageCallback = Callable[[int, Stage], None]


#: Called with the stage one candidate's evaluation entered.
CandidateStageCallback = Callable[[Stage], None]

#: Called with what one candidate's worker printed since the last call (the compiler's log
#: while it builds), as it comes.
OutputCallback = Callable[[str], None]


@runtime_checkable
class Evaluator(Protocol):
    """Compiles, verifies and times candidates for one task, outside the tool's process."""

    device: str
    device_name: str
    device_facts: DeviceFacts | None
    """What the GPU's driver says about it (None off NVIDIA GPUs): the peaks shown beside the measured ones."""

    def probe(self) -> TaskProbe:
        """Build the task once and make (or find) its reference data; the task's shapes for the
        prompt. Raises ``TaskError`` for a task that cannot be evaluated, ``EnvironmentUnavailable``
        for a machine that cannot run it, both before any turn."""
        ...

    def versions(self) -> dict[str, str]:
        """The toolchain and library versions the results depend on (for ``run.json``)."""
        ...

    def submit(self, source: str, *, on_stage: CandidateStageCallback | None = None,
               on_output: OutputCallback | None = None) -> Future[EvalResult]:
        """Start evaluating one candidate now: its build (CPU work) begins at once, its timing
        waits while ``device_busy`` is held. The future always resolves to an ``EvalResult``,
        never to an exception, for anything the candidate does; ``EvalResult.stage_s`` says
        where its time went."""
        ...

    def device_busy(self) -> AbstractContextManager[None]:
        """Held while the model generates on the evaluation device: no candidate's timing starts
        until it is released, so timings never overlap generation (builds and correctness
        checks go on). Never raises, also after ``abort``."""
        ...

    def evaluate(
        self, sources: Sequence[str], *, on_stage: StageCallback | None = None
    ) -> list[EvalResult]:
        """Submit every source and wait: one result per source, in order."""
        ...

    def confirm(self, sources: Sequence[str]) -> Confirmation:
        """Verify ``sources`` again on fresh seeds and time them head to head with the reference,
        interleaved, in each of ``confirm_workers`` workers, their rounds pooled: one verdict per
        source, in order (a kernel that fails is dropped with the reason, never an exception).
        After ``abort`` it returns promptly."""
        ...

    def abort(self) -> None:
        """Kill every worker and compiler of this evaluator now (the run is being interrupted);
        futures still pending resolve promptly, their results are not to be recorded."""
        ...

    def close(self) -> None: ...


class Slot(BaseModel):
    """One place in a turn's batch: the trajectory it records under, and whose history it continues."""

    trajectory: int
    parent_trajectory: int | None = None
    """Continue this trajectory's history instead of its own (None: its own)."""
    parent_turn: int | None = None
    """Continue from this turn of the parent (None: the turn before the slot's turn)."""


@runtime_checkable
class Search(Protocol):
    """Decides which histories a turn continues: the slots of each turn's batch."""

    name: str

    def slots(self, turn: int, records: Sequence[TurnRecord], trajectories: int) -> list[Slot]:
        """The slots of ``turn``, given every finished turn so far (in any order) and the run's
        number of trajectories. Must give the same answer for the same records (resume relies on it)."""
        ...


@runtime_checkable
class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...
