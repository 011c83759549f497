"""The interfaces the engine is built from. Parts are injected, never subclassed; what a part may
offer besides is declared here too, as a protocol of its own that ``isinstance`` recognises."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from .events import Event
from .results import Confirmation, EvalResult, RunInfo, Stage, TurnRecord
from .results.bench import TaskResult as BenchTaskResult
from .results.device import DeviceFacts
from .results.optimize import GroupRun, OptimizeRecord
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
    """A source of model responses. What it may offer besides (``ReportsEachAnswer``,
    ``ChecksFirst``, ``KnowsItsCapacity``, ``Replaying``) it declares by having it."""

    name: str
    model: str

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


@runtime_checkable
class ReportsEachAnswer(Protocol):
    """A backend whose ``generate`` calls ``on_done`` as each prompt is answered (when
    ``calls_on_done`` is true), so that its candidates are built while the others still generate;
    any other is not given ``on_done``, and its candidates are built when the whole turn is in."""

    calls_on_done: bool


@runtime_checkable
class ChecksFirst(Protocol):
    """A backend that can tell before a run whether it can serve it: ``check()`` is called once,
    before the run directory is made, and raises ``BackendError`` when it cannot (a server that
    does not answer, or does not serve the model), so that the person hears the cause first."""

    def check(self) -> None: ...


@runtime_checkable
class KnowsItsCapacity(Protocol):
    """A backend that knows how many sequences of the full context it serves at once (an engine of
    its own, with its KV cache): the run's trajectories default to that, and its first line says so."""

    sequences_that_fit: int


@runtime_checkable
class Replaying(Protocol):
    """A backend that replays fixed scripts of responses, one per task (the scripted backend): one
    backend can then serve many runs in turn, each from its own script."""

    def cue(self, names: Sequence[str], skip: int) -> None:
        """Serve the run about to start: the script filed under the first of ``names`` that has
        one (``UsageError`` naming them all when none has), from response ``skip`` on (those a
        resumed run has used)."""
        ...


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
    branch_takes_slot: bool
    """Whether a branch the person starts takes the weakest slot of the next batch (a beam keeps its
    width), rather than adding a trajectory of its own."""

    def slots(self, turn: int, records: Sequence[TurnRecord], trajectories: int) -> list[Slot]:
        """The slots of ``turn``, given every finished turn so far (in any order) and the run's
        number of trajectories. Must give the same answer for the same records (resume relies on it)."""
        ...


@runtime_checkable
class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...


@runtime_checkable
class Reporter(Protocol):
    """A file written about a run when its option is given a path (``--junit PATH``)."""

    cli_option: str
    """The option that names the file, ``--junit``."""
    help: str

    def write(self, path: Path, info: RunInfo, records: Sequence[TurnRecord], best: TurnRecord | None) -> None:
        """Write the file for the run as it ended (``best``: the winner's turn, or None)."""
        ...


@runtime_checkable
class OptimizeProgress(Protocol):
    """What ``kevin-opt optimize`` tells a front end as it goes (``optimize.OptimizeSession``): the
    plan, each group's state (``GroupRun.state_words``: queued, running turn k/n, verified 3.20x,
    dropped: why) and its run's id, each module run's own events, and the whole model with the
    kernels. Every call carries the record as it now stands, written to the store already; a
    screen may redraw from it alone. Calls come from the thread that drives the optimize."""

    def planned(self, record: OptimizeRecord) -> None:
        """The groups chosen (all queued) and the plan in words (``record.plan``), before the first run."""
        ...

    def group_changed(self, record: OptimizeRecord, group: GroupRun) -> None:
        """``group`` entered a state, finished a turn, or got its run's id."""
        ...

    def run_events(self, record: OptimizeRecord, group: GroupRun) -> EventSink:
        """The sink for the events of ``group``'s run (turns, tokens, evaluation stages)."""
        ...

    def note(self, text: str) -> None:
        """A step that takes a while (profiling, extracting, the whole model), as it starts."""
        ...

    def combined(self, record: OptimizeRecord) -> None:
        """The whole model measured with the kernels (``record.measured`` against
        ``record.predicted``; each group kept or dropped with why)."""
        ...

class BenchSink(Protocol):
    """What a front end hears of a bench (``bench/``): its tasks as they start and end, and each
    task's own run events (``task_id`` first; many tasks may run at once on Ray)."""

    def bench_started(self, bench_id: str, bench_dir: Path, tasks: int, done: int, where: str) -> None: ...

    def task_started(self, task_id: str) -> None: ...

    def task_event(self, task_id: str, event: Event) -> None: ...

    def task_finished(self, result: BenchTaskResult, recorded: bool) -> None:
        """``recorded``: False when the task already had a result (a copy that ran again)."""
        ...

    def note(self, text: str) -> None: ...
