"""A transformers LlamaModel with random weights (transformers 5.x), for benchmarks/optimize_hf_llama.py:
LLaMA-7B's layer shape (hidden 4096, 32 heads, MLP 11008) at LLAMA_HF_LAYERS layers, called as people
call it, ``model(input_ids=..., attention_mask=...)``, on one sequence of LLAMA_HF_SEQ tokens, in
LLAMA_HF_DTYPE. LLAMA_HF_HIDDEN (with the MLP at 2.6875x it) makes it small for the CPU."""
import os

import torch
from transformers import LlamaConfig, LlamaModel

# LLAMA_HF_, not HF_: the workers' environment drops HF_ variables as possible credentials.
HIDDEN = int(os.environ.get("LLAMA_HF_HIDDEN", 4096))
SEQ = int(os.environ.get("LLAMA_HF_SEQ", 2048))
LAYERS = int(os.environ.get("LLAMA_HF_LAYERS", 4))
DTYPE = getattr(torch, os.environ.get("LLAMA_HF_DTYPE", "bfloat16"))


def get_model():
    heads = max(HIDDEN // 128, 1)
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=HIDDEN * 43 // 16, num_hidden_layers=LAYERS,
                         num_attention_heads=heads, num_key_value_heads=heads, vocab_size=32000,
                         max_position_embeddings=max(SEQ, 2048), rms_norm_eps=1e-6)
    return LlamaModel(config).to(DTYPE).eval()


def get_inputs():
    ids = torch.randint(0, 32000, (1, SEQ))
    # No cache: one forward over the whole sequence (prefill, or training's forward). With a cache each
    # layer's attention writes its own layer of it, so the attentions are one computation only without.
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False}
