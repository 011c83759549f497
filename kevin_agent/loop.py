"""The refinement loop: trajectories x turns of generate -> parse -> check -> evaluate -> feedback.

A turn is a pipeline, not a barrier. All prompts of a turn go to the backend in one batch
(vLLM batches them); as each answer ends it is parsed, checked and handed to the evaluator,
whose build starts at once while the other answers still generate. The evaluator holds
timing back while the model generates (``device_busy``), so timings never overlap
generation; each turn is recorded as soon as its own evaluation ends. Which histories a
turn's slots continue is the search's choice (``search.py``). Ending a run early is an
exception carrying its reason; run state is saved in ``finally``.

Steering, from any thread: ``request_stop`` ends the run after the current turn;
``cancel_generation`` cancels the generation in flight (those turns are recorded as cancelled,
never shown to the model, and generated again); ``abort`` ends the run now (a signal): the
generation is aborted, every worker is killed, and turns in flight are not recorded, so
``resume`` does them again.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, as_completed

from pydantic import BaseModel

from . import events as ev
from .config import RunConfig
from .parsing import parse_response
from .prompting import Attempt, RenderedPrompt, feedback_sentence, render_prompt
from .protocols import Backend, Evaluator, EventSink, Generation, Search, Slot
from .results import BestKernel, CheckResult, EvalResult, Status, TurnRecord, best_record
from .search import IndependentSearch, lineage
from .store import RunStore, now_iso
from .task import Task

CheckFn = Callable[[str, str], CheckResult]


class StopRun(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RunOutcome(BaseModel):
    run_id: str
    reason: str
    best: BestKernel | None
    records: list[TurnRecord]


class Engine:
    def __init__(
        self,
        *,
        task: Task,
        config: RunConfig,
        backend: Backend,
        evaluator: Evaluator,
        store: RunStore,
        sink: EventSink,
        check: CheckFn,
        search: Search | None = None,
        overlap_generation: bool = False,
        start_note: str = "",
    ) -> None:
        self.task, self.config, self.backend, self.evaluator = task, config, backend, evaluator
        self.store, self.sink, self.check = store, sink, check
        self.search = search or IndependentSearch()
        # True when the model generates elsewhere than the kernels are timed (another GPU, a
        # server, a script): timing need not wait for generation.
        self.overlap_generation = overlap_generation
        self.start_note = start_note
        self.records: list[TurnRecord] = store.records()
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._abort = threading.Event()
        self._generating = threading.Event()
        self._reports_done = _accepts(backend.generate, "on_done")
        self._branches: list[tuple[int, int]] = []
        self._branch_lock = threading.Lock()

    # --- steering (thread-safe) ----------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    @property
    def generating(self) -> bool:
        """The backend is generating right now (what ``cancel_generation`` would cancel)."""
        return self._generating.is_set()

    def cancel_generation(self) -> bool:
        """Cancel the generation in flight; False (and nothing happens) when none is."""
        if not self._generating.is_set():
            return False
        self._cancel.set()
        return True

    def abort(self) -> None:
        """End the run now: abort the generation, kill the evaluator's workers; turns in flight
        are not recorded. Safe to call from a signal handler or another thread, more than once."""
        self._abort.set()
        self._cancel.set()
        self.evaluator.abort()

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def branch(self, trajectory: int, turn: int) -> None:
        """Continue a finished turn's history in a new chain for the remaining turns, from the
        next batch on: in beam search it takes the weakest slot of that batch, otherwise it is a
        new trajectory. Raises ValueError for a turn that is not finished or has no turns after it."""
        if not any(r.trajectory == trajectory and r.turn == turn for r in list(self.records)):
            raise ValueError(f"trajectory {trajectory} has no finished turn {turn} to branch from")
        if turn >= self.config.turns:
            raise ValueError(f"turn {turn} is the last turn: there is no turn left to branch into")
        with self._branch_lock:
            self._branches.append((trajectory, turn))

    def best_turn(self) -> TurnRecord | None:
        return best_record(self.records)

    def best_kernel(self) -> BestKernel | None:
        return BestKernel.of(self.records, self.store.dir)

    def close(self) -> None:
        """Give back the evaluator's workers and the backend (a vLLM engine holds the GPU)."""
        self.evaluator.close()
        self.backend.close()

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        info = self.store.info
        self.sink.emit(ev.RunStarted(
            run_id=info.run_id, run_dir=str(self.store.dir), task=self.task.name, device=info.device,
            device_name=info.device_name, backend=info.backend, model=info.model,
            turns=self.config.turns, trajectories=self.config.trajectories,
            resumed_turns=len(self.records), note=self.start_note,
        ))
        reason = "failed"
        self.store.update_info(status="running")
        try:
            self._check_target()
            for turn in range(1, self.config.turns + 1):
                # A cancelled generation leaves its turn undone: it is generated again at once.
                while todo := self._todo(turn):
                    self.step(turn, todo)
                    self._check_target()
                    if self._stop.is_set():
                        raise StopRun("stopped")
            reason = "completed"
        except StopRun as stop:
            reason = stop.reason
        except KeyboardInterrupt:
            reason = "interrupted"
            raise
        finally:
            best = self.best_kernel()
            self.store.update_info(status=reason, best=best)
            self.sink.emit(ev.RunFinished(run_id=info.run_id, reason=reason, best=best,
                                          turns_done=len(self.records)))
        return RunOutcome(run_id=info.run_id, reason=reason, best=self.best_kernel(), records=list(self.records))

    def _todo(self, turn: int) -> list[Slot]:
        done = {r.trajectory for r in self.records if r.turn == turn}
        slots = [s for s in self.search.slots(turn, self.records, self.config.trajectories)
                 if s.trajectory not in done]
        return self._add_branches(turn, slots)

    def _add_branches(self, turn: int, slots: list[Slot]) -> list[Slot]:
        with self._branch_lock:
            due = [b for b in self._branches if b[1] < turn]
            self._branches = [b for b in self._branches if b[1] >= turn]
        for parent, parent_turn in due:
            branch = dict(parent_trajectory=parent, parent_turn=parent_turn)
            if self.search.name == "beam" and slots:
                slots[-1] = Slot(trajectory=slots[-1].trajectory, **branch)
            else:
                known = {r.trajectory for r in self.records} | {s.trajectory for s in slots}
                slots.append(Slot(trajectory=max(known, default=-1) + 1, **branch))
                self.store.update_info(trajectories=max(self.store.info.trajectories, slots[-1].trajectory + 1))
        return slots

    def _check_target(self) -> None:
        target = self.config.target_speedup
        best = self.best_turn()
        if target is not None and best is not None and best.speedup is not None and best.speedup >= target:
            raise StopRun("target_reached")

    def step(self, turn: int, slots: list[Slot]) -> None:
        """One turn of the given slots, each candidate evaluated as soon as its answer is in."""
        started = now_iso()
        prompts = [self._prompt(slot, turn) for slot in slots]
        for slot, p in zip(slots, prompts):
            self.sink.emit(ev.TurnStarted(trajectory=slot.trajectory, turn=turn, prompt_tokens=p.tokens,
                                          dropped_attempts=p.dropped, parent_trajectory=slot.parent_trajectory))
        drafts: list[_Draft | None] = [None] * len(slots)
        lock = threading.Lock()
        t0 = time.monotonic()

        def on_token(i: int, channel, text: str) -> None:
            self.sink.emit(ev.TokenDelta(trajectory=slots[i].trajectory, turn=turn, channel=channel, text=text))

        def on_done(i: int, gen: Generation) -> None:
            with lock:
                if drafts[i] is not None or self._abort.is_set():
                    return
                gen_s = time.monotonic() - t0
                self.sink.emit(ev.GenerationFinished(trajectory=slots[i].trajectory, turn=turn,
                                                     completion_tokens=gen.completion_tokens, seconds=gen_s,
                                                     cancelled=gen.cancelled))
                drafts[i] = draft = self._draft(slots[i], turn, prompts[i], gen, gen_s, started)
                if draft.status is None:
                    draft.future = self._submit(draft)

        if not self._abort.is_set():
            self._cancel.clear()
        extra = {"on_done": on_done} if self._reports_done else {}
        with contextlib.nullcontext() if self.overlap_generation else self.evaluator.device_busy():
            self._generating.set()
            try:
                gens = self.backend.generate([p.text for p in prompts], on_token=on_token, cancel=self._cancel,
                                             **extra)
            finally:
                self._generating.clear()
        for i, gen in enumerate(gens):  # answers the backend did not report one by one
            on_done(i, gen)
        self._raise_if_aborted()
        finished = [d for d in drafts if d is not None]
        for draft in finished:
            if draft.future is None:
                self._finish(draft.record())
        evaluating = {d.future: d for d in finished if d.future is not None}
        for future in as_completed(evaluating):
            self._raise_if_aborted()
            draft = evaluating[future]
            draft.apply_eval(future.result())
            self._finish(draft.record())
        self._raise_if_aborted()

    def _submit(self, draft: _Draft) -> Future[EvalResult]:
        where = dict(trajectory=draft.slot.trajectory, turn=draft.turn)
        return self.evaluator.submit(
            draft.code,
            on_stage=lambda stage: self.sink.emit(ev.EvalStage(stage=stage, **where)),
            on_output=lambda text: self.sink.emit(ev.EvalOutput(text=text, **where)),
        )

    def _raise_if_aborted(self) -> None:
        # What is in flight when the run is aborted was cut short by the abort itself: recording
        # it would tell the model its answer failed, so it is dropped and resume does it again.
        if self._abort.is_set():
            raise StopRun("interrupted")

    def _prompt(self, slot: Slot, turn: int) -> RenderedPrompt:
        history = lineage(self.records, slot, turn)
        attempts = [Attempt(code=r.code, summary=r.summary, feedback=r.feedback) for r in history]
        return render_prompt(
            self.task, device=self.store.info.device, device_name=self.store.info.device_name,
            attempts=attempts, budget_tokens=self.config.context_tokens - self.config.max_tokens,
            count_tokens=self.backend.count_tokens,
        )

    def _draft(self, slot: Slot, turn: int, prompt: RenderedPrompt, gen: Generation, gen_s: float,
               started: str) -> _Draft:
        draft = _Draft(slot=slot, turn=turn, prompt=prompt.text, dropped=prompt.dropped, gen=gen, gen_s=gen_s,
                       started=started)
        parsed = parse_response(gen.text, gen.reasoning)
        draft.reasoning, draft.summary, draft.code = parsed.reasoning, parsed.summary, parsed.code or ""
        if gen.cancelled:
            draft.fail(Status.CANCELLED, "the generation was cancelled; it is not shown to the model and "
                       "the turn is generated again")
        elif parsed.error:
            draft.fail(Status.PARSE_ERROR, parsed.error)
        else:
            draft.check = self.check(draft.code, self.store.info.device)
            if not draft.check.passed:
                draft.fail(Status.CHECK_FAILED, draft.check.summary())
        if draft.code:
            draft.kernel_path = self.store.write_kernel(slot.trajectory, turn, draft.code)
        return draft

    def _finish(self, record: TurnRecord) -> None:
        self.store.append(record)
        if record.finished:
            self.records.append(record)
        self.sink.emit(ev.TurnFinished(record=record, best=self.best_kernel()))


def _accepts(func: Callable, name: str) -> bool:
    """Whether ``func`` takes the keyword ``name`` (a plugin's backend may predate it)."""
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


class _Draft:
    """A turn being assembled; ``status`` stays None while the candidate awaits evaluation."""

    def __init__(self, *, slot: Slot, turn, prompt, dropped, gen, gen_s, started) -> None:
        self.slot, self.turn, self.prompt, self.dropped = slot, turn, prompt, dropped
        self.gen, self.gen_s, self.started = gen, gen_s, started
        self.status: Status | None = None
        self.error = ""
        self.reasoning = self.summary = self.code = ""
        self.kernel_path: str | None = None
        self.parse_error: str | None = None
        self.check: CheckResult | None = None
        self.eval: EvalResult | None = None
        self.future: Future[EvalResult] | None = None

    def fail(self, status: Status, error: str) -> None:
        self.status, self.error = status, error
        if status is Status.PARSE_ERROR:
            self.parse_error = error

    def apply_eval(self, result: EvalResult) -> None:
        self.eval = result
        self.status, self.error = result.status, result.error

    def record(self) -> TurnRecord:
        assert self.status is not None
        speedup = self.eval.speedup if self.eval is not None else None
        flags = self.eval.flags if self.eval is not None else []
        feedback = (self.error if self.status is Status.CANCELLED
                    else feedback_sentence(self.status, error=self.error, speedup=speedup, flags=flags))
        return TurnRecord(
            trajectory=self.slot.trajectory, turn=self.turn, parent_trajectory=self.slot.parent_trajectory,
            parent_turn=self.slot.parent_turn, status=self.status, feedback=feedback,
            prompt=self.prompt, response=self.gen.text, reasoning=self.reasoning, summary=self.summary,
            code=self.code, kernel_path=self.kernel_path, parse_error=self.parse_error, check=self.check,
            eval=self.eval, prompt_tokens=self.gen.prompt_tokens, completion_tokens=self.gen.completion_tokens,
            dropped_attempts=self.dropped, generate_s=round(self.gen_s, 3),
            eval_s=self.eval.wall_s if self.eval is not None else None,
            started_at=self.started, finished_at=now_iso(),
        )
