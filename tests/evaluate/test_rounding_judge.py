"""The second opinion on low-precision outputs: where a bf16 kernel's answer differs from the
reference's beyond the tolerance, both are measured against the reference run in float32, and the
kernel's stands when it is as near the exact answer as the reference's own rounding is. Real modules,
real roundings: a sum of many terms added one at a time in bf16 (the reference) against the same
sum accumulated in float32 and rounded once (a kernel's)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from kevin_agent.evaluate.worker.candidate import Float32Reference
from kevin_agent.evaluate.worker.correctness import Mismatch, Outcome, judged


class RowSum(nn.Module):
    """Adds a row's terms one at a time, each sum rounded to the input's dtype."""

    def forward(self, x, pair):
        total = x[:, 0]
        for i in range(1, x.shape[1]):
            total = total + x[:, i]
        return total * pair[0][:, 0] + pair[1][:, 0]


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(512, 256, generator=g).bfloat16()
    return [x, (torch.ones(512, 1).bfloat16(), torch.zeros(512, 1).bfloat16())]


def test_an_answer_nearer_float32_than_the_reference_stands_and_is_said():
    inputs = _inputs()
    reference = RowSum()
    want = reference(*inputs)
    exact = inputs[0].float().sum(1).bfloat16()  # float32 accumulation, rounded once: a kernel's way
    with pytest.raises(Mismatch):
        judged(exact, want, inputs, None, None, None, Outcome())  # no second opinion: the plain verdict
    outcome = Outcome()
    judged(exact, want, inputs, Float32Reference(reference), None, None, outcome)
    assert outcome.rounding.startswith("beyond the tolerance, but within the reference's own bfloat16 rounding")
    assert outcome.evidence()["rounding"] == outcome.rounding


@pytest.mark.parametrize("wrong", [lambda e: e * 1.1, lambda e: e + 10.0])  # the reference is off by 1.1% on average
def test_an_answer_further_from_float32_than_the_reference_is_still_wrong(wrong):
    inputs = _inputs()
    reference = RowSum()
    want = reference(*inputs)
    bad = wrong(inputs[0].float().sum(1)).bfloat16()
    with pytest.raises(Mismatch, match="against the reference in float32"):
        judged(bad, want, inputs, Float32Reference(reference), None, None, Outcome())


def test_float32_outputs_get_no_second_opinion():
    x = torch.rand(64, 256)
    asked = []

    def truth(inputs):
        asked.append(True)
        return inputs[0].sum(1)

    with pytest.raises(Mismatch):
        judged(x.sum(1) + 1.0, x.sum(1), [x], truth, None, None, Outcome())
    assert not asked
