"""The vllm backend (the default): vLLM's engine driven from the tool's own process.

vLLM runs as it normally does: its engine core in a process of its own, torch.compile and CUDA
graphs on (``--no-cuda-graphs`` turns both off). All prompts of a turn are added to the engine
together so vLLM batches them; the engine is stepped here, and each step's new text
(``RequestOutputKind.DELTA``) goes straight to ``on_token``; each finished answer goes to
``on_done`` at once, so its candidate is built while the others still generate. A cancel aborts
the requests between steps.

The settings that shape the engine (``engine_fields``): the KV cache in fp8 by default (twice the
sequences fit, and each decode step reads half the bytes of cache), weights in bf16 unless
``--quantization fp8``, prefix caching on (the trajectories of a turn share the task prompt),
optional n-gram speculative decoding, and at most as many sequences at once as there are
trajectories. Once started, the engine's own KV cache size (``capacity``) says how many
trajectories run without preemption; ``last_stats`` holds what the engine reported for the last
``generate`` call (preemptions, prefix-cache hits, first-token latencies, speculative drafts).

vLLM is imported only when this backend is built, so the rest of the tool works without it.

``KEVIN_VLLM_ENGINE_ARGS`` takes a JSON object of further ``vllm.EngineArgs`` fields, merged over
the ones set here, e.g. ``{"attention_backend": "TRITON_ATTN"}``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import RunConfig
from ..errors import BackendError, EnvironmentUnavailable
from ..gpus import Gpu, GpuPlan, check_engine_options, detect_gpus, plan_gpus
from ..protocols import DoneCallback, Generation
from .capacity import PAPER_TRAJECTORIES

DISTRIBUTIONS = {"humming": "humming-kernels"}
"""Modules vLLM imports whose distribution on PyPI has another name."""
from .streaming import OPEN_TAG, BatchBackend, SerialCallback, ThinkSplitter
from .vllm_stats import EngineStats, EngineStatsSink, KvCapacity, stat_logger_class

ENGINE_ARGS_ENV = "KEVIN_VLLM_ENGINE_ARGS"

#: Prompt lookup: draft up to 4 tokens that followed the last 2-4 generated tokens where they
#: appeared before (in the prompt or the response).
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}

#: Tokens per engine step: prefill chunks this large run at full matrix-unit speed on one GPU,
#: and the activations vLLM reserves for them stay near 1.5 GiB for a 32B model.
MAX_BATCHED_TOKENS = 8192

INSTALL_HINT = (
    "pip install 'kevin-opt[vllm]' on a GPU machine, or use --backend openai --base-url "
    "http://HOST:PORT/v1 to reach a vLLM server elsewhere"
)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        if exc.name == "vllm":
            raise EnvironmentUnavailable("vLLM is not installed", INSTALL_HINT) from None
        # vLLM is there but one of its own dependencies is missing or mismatched.
        raise EnvironmentUnavailable(f"vLLM is installed but cannot be imported: {exc}",
                                     INSTALL_HINT) from None
    return vllm


def extra_engine_args() -> dict[str, Any]:
    """The ``EngineArgs`` fields given in ``KEVIN_VLLM_ENGINE_ARGS`` (a JSON object), if any."""
    raw = os.environ.get(ENGINE_ARGS_ENV, "").strip()
    if not raw:
        return {}
    example = f"""for example {ENGINE_ARGS_ENV}='{{"enforce_eager": true}}'"""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BackendError(f"{ENGINE_ARGS_ENV} is not valid JSON: {exc}", example) from None
    if not isinstance(value, dict):
        raise BackendError(
            f"{ENGINE_ARGS_ENV} must be a JSON object, not {type(value).__name__}", example
        )
    return value


def _require_gpu(gpus: list[Gpu]) -> None:
    if not gpus:
        raise EnvironmentUnavailable(
            "the vllm backend needs an NVIDIA GPU and none is visible to this process",
            "run on a GPU machine, or use --backend openai --base-url http://HOST:PORT/v1 to reach "
            "a server on one (for a try-out without a model: --backend scripted --responses FILE)",
        )


def engine_fields(config: RunConfig, plan: GpuPlan) -> dict[str, Any]:
    """The ``vllm.EngineArgs`` fields for ``config`` (before ``KEVIN_VLLM_ENGINE_ARGS``)."""
    fields: dict[str, Any] = {
        "model": config.model,
        "dtype": "bfloat16",
        "max_model_len": config.context_tokens,
        "tensor_parallel_size": plan.tensor_parallel_size,
        # The rest of the GPU's memory is left to kernel evaluation on the same GPU.
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "kv_cache_dtype": config.kv_cache_dtype,
        "quantization": None if config.quantization == "none" else config.quantization,
        "enable_prefix_caching": config.prefix_caching,
        "enforce_eager": not config.cuda_graphs,
        # One turn is one batch of trajectories; CUDA graphs are captured up to twice this.
        "max_num_seqs": config.trajectories or PAPER_TRAJECTORIES,
        "max_num_batched_tokens": MAX_BATCHED_TOKENS,
        # Statistics reach this process through the stat logger given to the engine.
        "disable_log_stats": False,
    }
    if config.speculative == "ngram":
        fields["speculative_config"] = dict(NGRAM)
    return fields


class VLLMBackend(BatchBackend):
    """Generates with a vLLM ``LLMEngine`` driven from this process."""

    name = "vllm"
    calls_on_done = True

    def __init__(
        self,
        config: RunConfig,
        *,
        gpus: list[Gpu] | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> None:
        """``sampling`` adds ``vllm.SamplingParams`` fields (``{"ignore_eos": True}`` makes every
        response ``max_tokens`` long, as benchmarks want)."""
        # Read first, so a malformed setting is reported even where vLLM or the GPU is missing.
        extra = extra_engine_args()
        vllm = _import_vllm()
        gpus = detect_gpus() if gpus is None else gpus
        _require_gpu(gpus)
        self.plan = plan_gpus(config, gpus)
        check_engine_options(config, gpus, self.plan)
        from vllm.sampling_params import RequestOutputKind

        self.model = config.model
        self.max_model_len = config.context_tokens
        self.max_tokens = config.max_tokens
        self.temperature = config.temperature
        # False gives each prompt of a batch its own prefix-cache salt: nothing is shared
        # between them (what --no-prefix-caching costs, without restarting the engine).
        self.prefix_sharing = True
        self._delta = RequestOutputKind.DELTA
        self._sampling_params = vllm.SamplingParams
        self._sampling = dict(sampling or {})
        self._stats = EngineStatsSink()
        self.last_stats = EngineStats()
        fields = {**engine_fields(config, self.plan), **extra}
        try:
            args = vllm.EngineArgs(**fields)
        except TypeError as exc:
            raise BackendError(f"vLLM rejected the engine arguments: {exc}",
                               f"check the field names in {ENGINE_ARGS_ENV}") from None
        # vLLM's own periodic throughput lines would interleave with the tool's progress output.
        logging.getLogger("vllm.v1.metrics.loggers").setLevel(logging.WARNING)
        # The engine core's process is started from a process with threads (the TUI, the
        # evaluator's pool): a fresh interpreter is safe where a fork of them may not be.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        started = time.monotonic()
        try:
            self._engine = vllm.LLMEngine.from_engine_args(args, stat_loggers=[stat_logger_class(self._stats)])
        except ModuleNotFoundError as exc:
            # vLLM imports every quantization method's module to resolve one: 0.22.0 imports
            # `humming` for --quantization, which ships as humming-kernels.
            distribution = DISTRIBUTIONS.get(exc.name or "", exc.name)
            raise BackendError(
                f"vLLM could not start model {config.model!r}: its Python module {exc.name!r} is missing",
                f"pip install {distribution} (or pip install 'kevin-opt[vllm]', which pins it), or run without "
                f"--quantization (now {config.quantization!r}) if that is what pulls it in",
            ) from exc
        except Exception as exc:  # vLLM raises many kinds; the person needs one message
            raise BackendError(
                f"vLLM could not start model {config.model!r}: {type(exc).__name__}: {exc}",
                "check the model name or path, --tensor-parallel-size, and that the GPU has room "
                f"(gpu_memory_utilization={config.gpu_memory_utilization}, context "
                f"{config.context_tokens} tokens; lower KEVIN_GPU_MEMORY_UTILIZATION or "
                "KEVIN_CONTEXT_TOKENS, or pass --quantization fp8, if it ran out of memory)",
            ) from exc
        self.startup_s = time.monotonic() - started
        cache = self._engine.vllm_config.cache_config
        self.capacity = KvCapacity(blocks=cache.num_gpu_blocks or 0, block_size=cache.block_size,
                                   context_tokens=config.context_tokens)
        self._tokenizer = self._load_tokenizer(config.model)

    @property
    def sequences_that_fit(self) -> int:
        """Sequences of the full context the KV cache holds at once: trajectories beyond this
        are preempted (and recomputed) when all of them grow long."""
        return self.capacity.sequences

    # --- the Backend protocol -----------------------------------------------------------------

    def _answer(self, prompts: Sequence[str], emit: SerialCallback, cancel: threading.Event | None,
                on_done: DoneCallback | None) -> list[Generation]:
        batch = uuid.uuid4().hex[:12]
        ids = [f"kevin-{batch}-{i}" for i in range(len(prompts))]
        texts = ["" for _ in prompts]
        splitters: list[ThinkSplitter] = []
        prompt_tokens: list[int] = []
        completion_tokens = [0 for _ in prompts]
        finish: list[str | None] = [None for _ in prompts]
        for i, prompt in enumerate(prompts):
            token_ids, starts_in_thought = self._encode(prompt)
            prompt_tokens.append(len(token_ids))
            room = self.max_model_len - len(token_ids)
            if room < 16:
                self._engine.abort_request(ids[:i])
                raise BackendError(
                    f"the prompt takes {len(token_ids)} tokens and the context holds "
                    f"{self.max_model_len}",
                    "raise KEVIN_CONTEXT_TOKENS (the model's limit permitting) or shorten the task",
                )
            if starts_in_thought:
                # The chat template opened the thinking block itself; give the parser the tag.
                texts[i] = OPEN_TAG + "\n"
            splitters.append(ThinkSplitter(in_reasoning=starts_in_thought))
            params = self._sampling_params(
                temperature=self.temperature,
                max_tokens=min(self.max_tokens, room),
                output_kind=self._delta,
                **self._sampling,
            )
            prompt: dict[str, Any] = {"prompt_token_ids": token_ids}
            if not self.prefix_sharing:
                prompt["cache_salt"] = ids[i]
            self._engine.add_request(ids[i], prompt, params)
        index = {request_id: i for i, request_id in enumerate(ids)}
        self._stats.take()
        cancelled = False

        def result(i: int) -> Generation:
            for channel, part in splitters[i].flush():
                emit(i, channel, part)
            return Generation(
                text=texts[i],
                prompt_tokens=prompt_tokens[i],
                completion_tokens=completion_tokens[i],
                finish_reason=finish[i],
                cancelled=cancelled and finish[i] is None,
            )

        while self._engine.has_unfinished_requests():
            if cancel is not None and cancel.is_set():
                self._engine.abort_request(ids)
                cancelled = True
                break
            for output in self._engine.step():
                i = _index_of(index, output.request_id)
                if i is None:
                    continue
                for completion in output.outputs:
                    delta = completion.text
                    if delta:
                        texts[i] += delta
                        for channel, part in splitters[i].feed(delta):
                            emit(i, channel, part)
                    completion_tokens[i] += len(completion.token_ids or ())
                    if completion.finish_reason:
                        finish[i] = completion.finish_reason
                if output.finished and on_done is not None:
                    # This answer is complete: its candidate is built while the rest generate.
                    on_done(i, result(i))

        self.last_stats = self._stats.take()
        return [result(i) for i in range(len(prompts))]

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        core = getattr(self._engine, "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            shutdown()

    # --- helpers ------------------------------------------------------------------------------

    def _load_tokenizer(self, model: str) -> Any:
        get = getattr(self._engine, "get_tokenizer", None)
        tokenizer = get() if callable(get) else None
        # Older engines hand out a tokenizer group; the Hugging Face tokenizer sits inside.
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        if tokenizer is None or not hasattr(tokenizer, "apply_chat_template"):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model)
        return tokenizer

    def _encode(self, prompt: str) -> tuple[list[int], bool]:
        """Token ids of the chat-formatted prompt, and whether the template opened ``<think>``."""
        if getattr(self._tokenizer, "chat_template", None):
            rendered = self._tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        else:
            rendered = prompt
        starts_in_thought = rendered.rstrip().endswith(OPEN_TAG)
        # The template already holds any special tokens the model expects.
        return self._tokenizer.encode(rendered, add_special_tokens=False), starts_in_thought


def _index_of(index: dict[str, int], request_id: str) -> int | None:
    if request_id in index:
        return index[request_id]
    # Some vLLM versions add a suffix to keep request ids unique.
    for known in sorted(index, key=len, reverse=True):
        if request_id.startswith(known):
            return index[known]
    return None
