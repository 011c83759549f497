"""How many sequences a model's KV cache holds on given GPUs, and so how many trajectories a run
can batch without vLLM preempting (and recomputing) some of them.

The arithmetic is vLLM's: of each GPU's memory, ``gpu_memory_utilization`` is vLLM's; the
weights (split over the tensor-parallel GPUs) and a reserve for activations, CUDA graphs and
the libraries' workspaces come off it, and the rest is KV cache. The engine's own count, read
once it has started, replaces this estimate wherever it is available.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

GiB = 1 << 30

#: The paper's evaluation: 16 parallel trajectories x 8 refinement turns.
PAPER_TRAJECTORIES, PAPER_TURNS = 16, 8

Quantization = Literal["none", "fp8"]
KvCacheDtype = Literal["auto", "fp8"]


class ModelShape(BaseModel):
    """The sizes of a Qwen2/Llama-style decoder that decide its memory."""

    model_config = ConfigDict(frozen=True)

    layers: int
    hidden_size: int
    intermediate_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = True

    @classmethod
    def from_hf_config(cls, data: dict) -> ModelShape:
        """From a Hugging Face ``config.json`` (the text model's part of it)."""
        data = data.get("text_config", data)
        heads = data["num_attention_heads"]
        return cls(
            layers=data["num_hidden_layers"],
            hidden_size=data["hidden_size"],
            intermediate_size=data["intermediate_size"],
            attention_heads=heads,
            kv_heads=data.get("num_key_value_heads", heads),
            head_dim=data.get("head_dim") or data["hidden_size"] // heads,
            vocab_size=data["vocab_size"],
            tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
            qkv_bias=data.get("model_type", "qwen2") == "qwen2",
        )

    @property
    def linear_params(self) -> int:
        """Weights of the attention and MLP projections: what fp8 quantization shrinks."""
        q = self.attention_heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attention = self.hidden_size * (q + 2 * kv) + q * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        return self.layers * (attention + mlp)

    @property
    def other_params(self) -> int:
        """Embeddings, the output head, norms and biases: kept in bf16 under fp8 quantization."""
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        bias = (self.attention_heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        norms = 2 * self.hidden_size
        return embeddings + self.layers * (bias + norms) + self.hidden_size

    @property
    def params(self) -> int:
        return self.linear_params + self.other_params

    def weight_bytes(self, quantization: Quantization = "none") -> int:
        linear_bytes = 1 if quantization == "fp8" else 2
        return self.linear_params * linear_bytes + self.other_params * 2

    def kv_bytes_per_token(self, kv_cache_dtype: KvCacheDtype = "auto") -> int:
        """Keys and values of every layer for one token (bf16, or one byte each in fp8)."""
        element = 1 if kv_cache_dtype == "fp8" else 2
        return self.layers * 2 * self.kv_heads * self.head_dim * element


#: Kevin-32B is QwQ-32B fine-tuned: QwQ's architecture (Qwen2, 64 layers, hidden size 5120,
#: 40 query heads and 8 KV heads of size 128).
QWQ_32B = ModelShape(layers=64, hidden_size=5120, intermediate_size=27648, attention_heads=40,
                     kv_heads=8, head_dim=128, vocab_size=152064)

KNOWN_SHAPES = {"cognition-ai/kevin-32b": QWQ_32B, "qwen/qwq-32b": QWQ_32B}


def model_shape(model: str) -> ModelShape | None:
    """The shape of ``model``: a local folder's config.json, the Hugging Face cache's copy, or a
    model known here by name; None when none of those is at hand (nothing is downloaded)."""
    candidates = [Path(model).expanduser() / "config.json"]
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
        if isinstance(cached, str):
            candidates.append(Path(cached))
    except Exception:  # noqa: BLE001 - not a repo id, or no hub library: fall back to names
        pass
    for path in candidates:
        try:
            return ModelShape.from_hf_config(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError):
            continue
    return KNOWN_SHAPES.get(model.lower())


def default_trajectories(sequences_that_fit: int | None) -> int:
    """As many trajectories as run without preemption at full context, up to the paper's 16;
    1 when the backend cannot say (a server elsewhere, scripted responses)."""
    if sequences_that_fit is None:
        return 1
    return max(1, min(PAPER_TRAJECTORIES, sequences_that_fit))


def sequences_with_fp8_weights(shape: ModelShape, sequences_that_fit: int, *, context_tokens: int,
                               kv_cache_dtype: KvCacheDtype) -> int:
    """The engine's own measure of full-context sequences, moved to fp8 weights by the arithmetic:
    what quantizing the projections frees (one byte a weight of two) goes to the KV cache. Over
    several GPUs each frees its share of the weights and holds its share of every sequence, so the
    number is the same for any tensor-parallel size."""
    freed = shape.weight_bytes("none") - shape.weight_bytes("fp8")
    per_sequence = shape.kv_bytes_per_token(kv_cache_dtype) * context_tokens
    return sequences_that_fit + int(freed // per_sequence)


def room_flags(kv_cache_dtype: str, quantization: str) -> list[str]:
    """The vLLM options not yet on that make room in the KV cache."""
    flags = ["--kv-cache-dtype fp8"] if kv_cache_dtype != "fp8" else []
    return flags + (["--quantization fp8"] if quantization != "fp8" else [])


def trajectories_note(
    trajectories: int, turns: int, *, sequences_that_fit: int | None, context_tokens: int, chosen: bool,
    room: list[str] = [],  # noqa: B006 - never mutated
    with_fp8_weights: int | None = None,
) -> str:
    """How a run's trajectories x turns compare with the paper's 16 x 8, for its first line.

    ``chosen`` is True when the number of trajectories was picked from the capacity (not given);
    ``room`` names options that would fit more (``room_flags``); ``with_fp8_weights`` is how many
    sequences fp8 weights would hold (``sequences_with_fp8_weights``), where they are not in use.
    """
    if (chosen and sequences_that_fit is not None and trajectories < PAPER_TRAJECTORIES
            and with_fp8_weights is not None and with_fp8_weights >= PAPER_TRAJECTORIES):
        return (f"the paper: {PAPER_TRAJECTORIES} x {PAPER_TURNS}; the KV cache holds {sequences_that_fit} sequences "
                f"of {context_tokens} tokens: {PAPER_TRAJECTORIES} trajectories at {context_tokens // 1024}K need "
                f"--quantization fp8 on this GPU (about {with_fp8_weights} fit with fp8 weights)")
    if (trajectories, turns) == (PAPER_TRAJECTORIES, PAPER_TURNS):
        head = "as in the paper"
    else:
        head = f"the paper: {PAPER_TRAJECTORIES} x {PAPER_TURNS}"
    if sequences_that_fit is None:
        if chosen:
            return f"{head}; --trajectories {PAPER_TRAJECTORIES} for its setting"
        return head
    fits = f"the KV cache holds {sequences_that_fit} sequences of {context_tokens} tokens"
    if trajectories > sequences_that_fit:
        return f"{head}; {fits}, so vLLM may preempt and recompute some"
    if chosen and trajectories < PAPER_TRAJECTORIES:
        more = f"{' or '.join(room)} makes room for more, " if room else ""
        return f"{head}; {fits}: {more}--trajectories {PAPER_TRAJECTORIES} runs the paper's setting with preemption"
    return f"{head}; {fits}"
