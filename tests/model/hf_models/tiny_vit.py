"""A small ViT with random weights, on one batch of images."""
import torch
from transformers import ViTConfig, ViTModel


def get_model():
    config = ViTConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       image_size=32, patch_size=8)
    return ViTModel(config).eval()


def get_inputs():
    return {"pixel_values": torch.randn(2, 3, 32, 32)}
