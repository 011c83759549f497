# expect: no-streams
# device: cuda
# A quote supplied at run time opens a string, so what reads as a comment is code.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

QUOTE = chr(34)
src = f"""
__global__ void k(float* x) {{}}
torch::Tensor run(torch::Tensor x) {{
    cudaStream_t s; const char* note = {QUOTE}/* ", cudaStreamCreate(&s)); // */
    k<<<1, 1, 0, s>>>(x.data_ptr<float>());
    return x;
}}
"""
ext = load_inline(name="k", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
