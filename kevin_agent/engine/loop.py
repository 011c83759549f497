"""The refinement loop: trajectories x turns of generate -> parse -> check -> evaluate -> feedback.

A turn is a pipeline, not a barrier. All prompts of a turn go to the backend in one batch
(vLLM batches them); as each answer ends it is parsed, checked and handed to the evaluator,
whose build starts at once while the other answers still generate. The evaluator holds
timing back while the model generates (``device_busy``), so timings never overlap
generation; each turn is recorded as soon as its own evaluation ends. Which histories a
turn's slots continue is the search's choice (``search.py``). Ending a run early is an
exception carrying its reason; run state is saved in ``finally``.

When the turns end (completed, or stopped by the person), and before ``--target-speedup`` or
``--stop-at-roofline`` ends a run, the best distinct kernels are confirmed (``confirm``, see
``results.winner``): the winner and its numbers come from that. Either ends the run only when the
confirmed winner still meets it and is not flagged (``stopping.py``); an interrupted run is not
confirmed (it is confirmed when resumed).

Steering, from any thread: ``request_stop`` ends the run after the current turn;
``cancel_generation`` cancels the generation in flight (those turns are recorded as cancelled,
never shown to the model, and generated again); ``halt`` ends the run once the evaluations in
flight are done (the person quits): the generation in flight is cancelled, no candidate is
submitted and nothing is confirmed after it; ``abort`` ends the run now (a signal): the
generation is aborted, every worker is killed, and turns in flight are not recorded, so
``resume`` does them again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, as_completed

from pydantic import BaseModel

from .. import events as ev
from ..config import RunConfig
from ..results.winner import CONFIRMATION_SETTINGS, candidates, confirmation_key, winner
from .draft import Draft
from .parsing import parse_response
from .prompting import Attempt, RenderedPrompt, render_prompt
from ..protocols import Backend, Evaluator, EventSink, Generation, ReportsEachAnswer, Search, Slot
from ..results import BestKernel, CheckResult, Confirmation, EvalResult, Status, TurnRecord
from . import stopping
from .search import IndependentSearch, lineage
from ..store import RunStore, now_iso
from ..task import Task

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
        owns_backend: bool = True,
    ) -> None:
        self.task, self.config, self.backend, self.evaluator = task, config, backend, evaluator
        self.store, self.sink, self.check = store, sink, check
        self.search = search or IndependentSearch()
        # True when the model generates elsewhere than the kernels are timed (another GPU, a
        # server, a script): timing need not wait for generation.
        self.overlap_generation = overlap_generation
        self.start_note = start_note
        # A backend given to many runs is its maker's to close, after the last of them.
        self.owns_backend = owns_backend
        self.records: list[TurnRecord] = store.records()
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._abort = threading.Event()
        self._halt = threading.Event()
        self._generating = threading.Event()
        self._reports_done = isinstance(backend, ReportsEachAnswer) and backend.calls_on_done
        self._branches: list[tuple[int, int]] = []
        self._branch_lock = threading.Lock()
        self._confirming = threading.Lock()
        self._closed = False
        self._judged: str | None = None
        """The key of the confirmation the target was last judged on."""

    # --- steering (thread-safe) ----------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """The run ends after the current turn (asked for, or the person quit)."""
        return self._stop.is_set()

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

    def halt(self) -> None:
        """End the run as soon as the evaluations in flight are done: the generation in flight is
        cancelled, and no generation starts, no candidate is submitted and nothing is confirmed
        after this call (resume confirms). Thread-safe."""
        self._halt.set()
        self._stop.set()
        self._cancel.set()

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
        """The winner's turn: the confirmed winner's where the best kernels are confirmed."""
        best = winner(self.store.info, self.records)
        return best.record if best is not None else None

    def best_kernel(self) -> BestKernel | None:
        best = winner(self.store.info, self.records)
        if best is None:
            return None
        if best.confirmed is not None:
            return BestKernel.confirmed(best.confirmed, self.store.dir)
        return BestKernel.of([best.record], self.store.dir)

    def close(self) -> None:
        """Give back the evaluator's workers and the backend this run owns (a vLLM engine holds the GPU)."""
        self._closed = True
        self.evaluator.close()
        if self.owns_backend:
            self.backend.close()

    # --- confirmation -------------------------------------------------------------------------
    def confirm(self) -> Confirmation | None:
        """Confirm the best distinct kernels as they stand, or find them confirmed already with
        the same settings; the confirmation is kept in run.json. None when there is no verified
        kernel, or when they cannot be confirmed now (the run was aborted or has closed)."""
        with self._confirming:
            picks = candidates(self.records, self.config.confirm_top)
            if not picks:
                return None
            settings = self.config.model_dump(mode="json", include=CONFIRMATION_SETTINGS)
            key = confirmation_key(picks, settings, self.store.info.device_name)
            stored = self.store.info.confirmation
            if stored is not None and stored.key == key:
                return stored
            if self._abort.is_set() or self._halt.is_set() or self._closed:
                return None
            self.sink.emit(ev.ConfirmationStarted(kernels=[
                ev.Candidate(trajectory=r.trajectory, turn=r.turn, speedup=r.speedup) for r in picks]))
            result = self.evaluator.confirm([r.code for r in picks])
            if self._abort.is_set():
                return None  # cut short: nothing of it is kept
            kernels = [v.model_copy(update=dict(trajectory=r.trajectory, turn=r.turn, kernel_path=r.kernel_path or "",
                                                run_speedup=r.speedup)) for v, r in zip(result.kernels, picks)]
            confirmation = result.model_copy(update=dict(kernels=kernels, key=key, created_at=now_iso()))
            self.store.update_info(confirmation=confirmation)
            self.sink.emit(ev.ConfirmationFinished(confirmation=confirmation, best=self.best_kernel()))
            return confirmation

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
            try:
                self._check_target()
                for turn in range(1, self.config.turns + 1):
                    # A cancelled generation leaves its turn undone: it is generated again at once.
                    while todo := self._todo(turn):
                        if self._stop.is_set():  # asked for between two batches
                            raise StopRun("stopped")
                        self.step(turn, todo)
                        self._check_target()
                        if self._stop.is_set():
                            raise StopRun("stopped")
                reason = "completed"
            except StopRun as stop:
                if stop.reason != "stopped":
                    raise
                reason = stop.reason
            self.confirm()
            self._raise_if_aborted()
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
            if self.search.branch_takes_slot and slots:
                slots[-1] = Slot(trajectory=slots[-1].trajectory, **branch)
            else:
                known = {r.trajectory for r in self.records} | {s.trajectory for s in slots}
                slots.append(Slot(trajectory=max(known, default=-1) + 1, **branch))
                self.store.update_info(trajectories=max(self.store.info.trajectories, slots[-1].trajectory + 1))
        return slots

    def _check_target(self) -> None:
        """End the run once the confirmed winner meets what it stops at (``stopping``) and is not
        flagged; a turn that reaches it starts a confirmation first."""
        if not stopping.asked(self.config):
            return
        reaching = stopping.reaching(self.config, self.records)
        stored = self.store.info.confirmation
        # A turn has its second look once: turns that come after and do not reach the target
        # themselves do not start another confirmation.
        if not reaching or reaching <= {(k.trajectory, k.turn) for k in (stored.kernels if stored else [])}:
            confirmation = stored
        else:
            confirmation = self.confirm()
            self._raise_if_aborted()
        best = winner(self.store.info, self.records)
        if (end := stopping.ending(self.config, best)) is not None:
            reason, words = end
            if reason != "target_reached":
                self.sink.emit(ev.Notice(message=f"{words}; the run ends"))
            raise StopRun(reason)
        judged = best is None or best.confirmed is not None  # else the confirmation is of other kernels
        if reaching and confirmation is not None and judged and confirmation.key != self._judged:
            self._judged = confirmation.key
            self.sink.emit(ev.Notice(message=stopping.not_ended(self.config, best)))

    def step(self, turn: int, slots: list[Slot]) -> None:
        """One turn of the given slots, each candidate evaluated as soon as its answer is in."""
        started = now_iso()
        prompts = [self._prompt(slot, turn) for slot in slots]
        for slot, p in zip(slots, prompts):
            self.sink.emit(ev.TurnStarted(trajectory=slot.trajectory, turn=turn, prompt_tokens=p.tokens,
                                          dropped_attempts=p.dropped, parent_trajectory=slot.parent_trajectory))
        drafts: list[Draft | None] = [None] * len(slots)
        lock = threading.Lock()
        t0 = time.monotonic()

        def on_token(i: int, channel, text: str) -> None:
            self.sink.emit(ev.TokenDelta(trajectory=slots[i].trajectory, turn=turn, channel=channel, text=text))

        def on_done(i: int, gen: Generation) -> None:
            with lock:
                if drafts[i] is not None or self._abort.is_set():
                    return
                if self._halt.is_set() and not gen.cancelled:
                    # Finished as the person quit: nothing more is submitted; resume generates it again.
                    gen = gen.model_copy(update={"cancelled": True})
                gen_s = time.monotonic() - t0
                self.sink.emit(ev.GenerationFinished(trajectory=slots[i].trajectory, turn=turn,
                                                     completion_tokens=gen.completion_tokens, seconds=gen_s,
                                                     cancelled=gen.cancelled))
                drafts[i] = draft = self._draft(slots[i], turn, prompts[i], gen, gen_s, started)
                if draft.status is None:
                    draft.future = self._submit(draft)

        if not (self._abort.is_set() or self._halt.is_set()):
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

    def _submit(self, draft: Draft) -> Future[EvalResult]:
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
            count_tokens=self.backend.count_tokens, language=self.config.language,
        )

    def _draft(self, slot: Slot, turn: int, prompt: RenderedPrompt, gen: Generation, gen_s: float,
               started: str) -> Draft:
        draft = Draft(slot=slot, turn=turn, prompt=prompt.text, dropped=prompt.dropped, gen=gen, gen_s=gen_s,
                       started=started)
        parsed = parse_response(gen.text, gen.reasoning, self.config.language)
        draft.reasoning, draft.summary, draft.code = parsed.reasoning, parsed.summary, parsed.code or ""
        if gen.cancelled:
            draft.fail(Status.CANCELLED, "the generation was cancelled; it is not shown to the model and "
                       "the turn is generated again")
        elif parsed.error:
            draft.fail(Status.PARSE_ERROR, parsed.error)
        else:
            draft.check = self.check(draft.code, self.store.info.device, language=self.config.language)
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
