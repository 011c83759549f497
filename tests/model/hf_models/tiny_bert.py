"""A small BERT encoder with random weights; its outputs a ModelOutput with a pooled output."""
import torch
from transformers import BertConfig, BertModel


def get_model():
    config = BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        vocab_size=128, max_position_embeddings=64)
    return BertModel(config).eval()


def get_inputs():
    ids = torch.randint(0, 128, (2, 16))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
