"""A turn being assembled: what its slot, prompt and generation were, then its parse, check and
evaluation as they come, and the ``TurnRecord`` it becomes (with the feedback the model is shown).
The loop (``loop.py``) fills one per candidate and records it once its evaluation has ended."""

from __future__ import annotations

from concurrent.futures import Future

from .prompting import feedback_sentence
from ..protocols import Slot
from ..results import CheckResult, EvalResult, Status, TurnRecord
from ..store import now_iso


class Draft:
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
