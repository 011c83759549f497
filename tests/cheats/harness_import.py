# expect: no-harness
# device: cpu
# Reaches into the evaluator.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor k(torch::Tensor x) { return x; }", functions=["k"])

import kevin_agent.evaluate.worker.main as w


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.k(x)
