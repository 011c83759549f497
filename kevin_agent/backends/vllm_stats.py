"""What the vLLM engine reports about itself: the size of its KV cache, and per batch of
prompts the preemptions, prefix-cache hits, first-token latencies and speculative drafts.

vLLM hands these to stat loggers in the tool's own process (also when its engine core runs in
a process of its own); ``stat_logger_class`` makes one that feeds an ``EngineStatsSink``.
"""

from __future__ import annotations

import statistics
from typing import Any

from pydantic import BaseModel


class KvCapacity(BaseModel):
    """The KV cache as the engine allocated it."""

    blocks: int
    block_size: int
    context_tokens: int

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    @property
    def sequences(self) -> int:
        """Sequences of ``context_tokens`` that fit at once: more are preempted at full length."""
        return self.tokens // self.context_tokens


class RequestTiming(BaseModel):
    """One finished request, as the engine timed it."""

    generated_tokens: int
    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens whose KV cache was reused (prefix caching)."""
    queued_s: float
    prefill_s: float
    decode_s: float

    @property
    def decode_tokens_per_s(self) -> float | None:
        if self.generated_tokens < 2 or self.decode_s <= 0:
            return None
        return (self.generated_tokens - 1) / self.decode_s


class EngineStats(BaseModel):
    """The engine's counters over one ``generate`` call."""

    preemptions: int = 0
    """Requests preempted (their KV cache freed, to be recomputed) for lack of KV cache."""
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    """Prompt tokens looked up in, and found in, the prefix cache."""
    first_token_s: list[float] = []
    """Per request: from its arrival to its first token, engine side."""
    max_kv_cache_usage: float = 0.0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    requests: list[RequestTiming] = []

    @property
    def spec_acceptance(self) -> float | None:
        return self.spec_accepted_tokens / self.spec_draft_tokens if self.spec_draft_tokens else None

    def summary(self) -> dict[str, Any]:
        """The numbers a person reads (medians over requests, the worst where it matters)."""
        rates = [r for r in (t.decode_tokens_per_s for t in self.requests) if r is not None]
        return {
            "preemptions": self.preemptions,
            "prefix_cache_hit_rate": (self.prefix_cache_hits / self.prefix_cache_queries
                                      if self.prefix_cache_queries else None),
            "ttft_median_s": statistics.median(self.first_token_s) if self.first_token_s else None,
            "ttft_max_s": max(self.first_token_s) if self.first_token_s else None,
            "decode_tok_s_median": statistics.median(rates) if rates else None,
            "decode_tok_s_min": min(rates) if rates else None,
            "max_kv_cache_usage": self.max_kv_cache_usage,
            "spec_acceptance": self.spec_acceptance,
            "spec_draft_tokens": self.spec_draft_tokens,
        }


class EngineStatsSink:
    """Adds up what vLLM's stat loggers receive; ``take`` returns it and starts afresh."""

    def __init__(self) -> None:
        self._stats = EngineStats()

    def take(self) -> EngineStats:
        stats, self._stats = self._stats, EngineStats()
        return stats

    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        s = self._stats
        if iteration_stats is not None:
            s.preemptions += getattr(iteration_stats, "num_preempted_reqs", 0)
            s.prompt_tokens += getattr(iteration_stats, "num_prompt_tokens", 0)
            s.generation_tokens += getattr(iteration_stats, "num_generation_tokens", 0)
            s.first_token_s.extend(getattr(iteration_stats, "time_to_first_tokens_iter", []))
            for done in getattr(iteration_stats, "finished_requests", []):
                s.requests.append(RequestTiming(
                    generated_tokens=done.num_generation_tokens, prompt_tokens=done.num_prompt_tokens,
                    cached_tokens=getattr(done, "num_cached_tokens", 0), queued_s=done.queued_time,
                    prefill_s=done.prefill_time, decode_s=done.decode_time,
                ))
        if scheduler_stats is not None:
            s.max_kv_cache_usage = max(s.max_kv_cache_usage, getattr(scheduler_stats, "kv_cache_usage", 0.0))
            prefix = getattr(scheduler_stats, "prefix_cache_stats", None)
            if prefix is not None:
                s.prefix_cache_queries += prefix.queries
                s.prefix_cache_hits += prefix.hits
            spec = getattr(scheduler_stats, "spec_decoding_stats", None)
            if spec is not None:
                s.spec_drafts += spec.num_drafts
                s.spec_draft_tokens += spec.num_draft_tokens
                s.spec_accepted_tokens += spec.num_accepted_tokens


def stat_logger_class(sink: EngineStatsSink) -> type:
    """A vLLM ``StatLoggerBase`` that forwards to ``sink`` (vLLM imported only here)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _SinkLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
            sink.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return _SinkLogger
