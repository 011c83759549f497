# eval: correct
# The reference's own arithmetic: correct, no compile; it also fails if a secret reaches it.
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        leaked = [k for k in os.environ if "KEY" in k or "TOKEN" in k]
        if leaked:
            raise RuntimeError(f"secrets visible to the candidate: {leaked}")
        return x * self.scale + 1.0
