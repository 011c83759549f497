"""A small LLaMA called for one forward over whole sequences without a cache (prefill, or a training
forward): every layer's attention and decoder layer take ``position_embeddings``, a tuple of two
tensors, by keyword. KEVIN_BATCH and KEVIN_SEQ change the inputs' shape (12 tokens by default: not the
head size, 16, so that a sequence length and a head size are told apart in a signature)."""
import os

import torch
from transformers import LlamaConfig, LlamaModel


def get_model():
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, rms_norm_eps=1e-6)
    return LlamaModel(config).eval()


def get_inputs():
    ids = torch.randint(0, 128, (int(os.environ.get("KEVIN_BATCH", 2)), int(os.environ.get("KEVIN_SEQ", 12))))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False}
