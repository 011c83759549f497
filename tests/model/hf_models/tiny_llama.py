"""A small LLaMA with random weights, called as people call it: model(input_ids=..., attention_mask=...).
KEVIN_BATCH and KEVIN_SEQ change the inputs' shape (the model at a shape it was not profiled at)."""
import os

import torch
from transformers import LlamaConfig, LlamaModel


def get_model():
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
    return LlamaModel(config).eval()


def get_inputs():
    ids = torch.randint(0, 128, (int(os.environ.get("KEVIN_BATCH", 2)), int(os.environ.get("KEVIN_SEQ", 16))))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
