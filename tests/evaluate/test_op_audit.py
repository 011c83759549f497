"""The run-time operator audit's one allowance: a vendor library call the reference makes itself (a
GEMM, attention, a convolution) the candidate may make too, and nothing else PyTorch computes. The
operators are the ones real modules call, seen by the real dispatch mode."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from kevin_agent.evaluate.worker.guards import audit_ops, refused_ops


class Layer(nn.Module):
    """A transformer block's shape: GEMMs, attention, and elementwise work around them."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96, bias=False)
        self.out = nn.Linear(32, 32, bias=False)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 8, 32)
        return x + F.silu(self.out(a))


class LibraryAndOwn(Layer):
    """Keeps the GEMMs and attention, computes the rest another way (here PyTorch stands in for a
    kernel's own work: its elementwise operators must still be refused)."""

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 8, 32)
        return torch.addcmul(x, self.out(a), torch.sigmoid(self.out(a)))


def test_the_library_calls_the_reference_makes_are_allowed_and_nothing_else():
    x = torch.randn(2, 8, 32)
    reference, candidate = Layer(), LibraryAndOwn()
    ref_ops, cand_ops = audit_ops(reference, [x]), audit_ops(candidate, [x])
    gemm = [op for op in cand_ops if op.split("::")[1] in ("mm", "addmm", "bmm")]
    attention = [op for op in cand_ops if "scaled_dot_product" in op]
    assert gemm and attention, cand_ops
    refused = refused_ops(cand_ops, ref_ops)
    assert "aten::addcmul" in refused and "aten::sigmoid" in refused
    assert not set(gemm + attention) & set(refused)


def test_a_library_call_the_reference_does_not_make_is_refused():
    # an elementwise reference: a GEMM or attention in the candidate is PyTorch computing for it
    x = torch.randn(2, 8, 32)
    ref_ops = audit_ops(lambda t: t * 2.0 + 1.0, [x])
    cand_ops = audit_ops(Layer(), [x])
    refused = refused_ops(cand_ops, ref_ops)
    assert any(op.split("::")[1] in ("mm", "addmm", "bmm") for op in refused)
    assert any("scaled_dot_product" in op for op in refused)
    assert refused_ops(cand_ops, []) == cand_ops


class InPlaceEpilogue(Layer):
    """The last residual add inside the output projection's GEMM, on a buffer of its own."""

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(16, 32)
        return x.reshape(16, 32).clone().addmm_(a, self.out.weight.t()).view(2, 8, 32)


def test_a_gemm_in_place_is_the_library_call_the_reference_makes():
    x = torch.randn(2, 8, 32)
    ref_ops, cand_ops = audit_ops(Layer(), [x]), audit_ops(InPlaceEpilogue(), [x])
    assert "aten::addmm_" in cand_ops
    assert "aten::addmm_" not in refused_ops(cand_ops, ref_ops)
    assert "aten::addmm_" in refused_ops(cand_ops, audit_ops(lambda t: t * 2.0, [x]))
