"""A small Qwen2 with random weights, called with keyword arguments. KEVIN_BATCH and KEVIN_SEQ change
the inputs' shape."""
import os

import torch
from transformers import Qwen2Config, Qwen2Model


def get_model():
    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, rms_norm_eps=1e-6)
    return Qwen2Model(config).eval()


def get_inputs():
    ids = torch.randint(0, 128, (int(os.environ.get("KEVIN_BATCH", 2)), int(os.environ.get("KEVIN_SEQ", 16))))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
