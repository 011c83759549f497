"""A LLaMA as people load one: from_pretrained on a local folder (tiny-llama/ beside this file, which the
test writes with save_pretrained), in bfloat16."""
from pathlib import Path

import torch
from transformers import LlamaModel


def get_model():
    return LlamaModel.from_pretrained(Path(__file__).parent / "tiny-llama", dtype=torch.bfloat16).eval()


def get_inputs():
    ids = torch.randint(0, 128, (2, 16))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
