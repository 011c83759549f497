"""The family of shapes around a verified signature: which dimensions vary, the sizes tried, and
the key the installed guard reads back."""

from __future__ import annotations

import torch

from kevin_agent.model.family import family_of
from kevin_agent.model.worker.guard import CallSpec


def test_the_leading_dimensions_vary_and_the_last_stays():
    family = family_of("float32[2048,256]")
    assert family.key == "float32[n0,256]" and family.sizes == {"n0": 2048}
    assert [t.key for t in family.trials] == ["float32[1,256]", "float32[7,256]", "float32[3073,256]"]
    # a square input: its leading size varies, its last does not
    assert family_of("float16[256,256], None").key == "float16[n0,256], None"


def test_a_mask_beside_activations_varies_with_them():
    family = family_of("float32[2,16,64], bool[2,16], 0.5")
    assert family.key == "float32[n0,n1,64], bool[n0,n1], 0.5"
    assert family.trials[1].shapes == [[7, 7, 64], [7, 7]]


def test_no_family_where_nothing_varies_or_the_guard_compares_text():
    assert family_of("float32[4096]") is None
    assert family_of("float32[64,128]@1,64") is None
    assert family_of("[(float32[4,8],), float32[4,8]]") is None


def test_the_guard_admits_the_family_one_size_per_symbol():
    spec = CallSpec("float32[n0,n1,64], bool[n0,n1], 0.5")
    x, mask = torch.zeros(3, 5, 64), torch.zeros(3, 5, dtype=torch.bool)
    assert spec.admits([x, mask, 0.5])
    assert not spec.admits([x, torch.zeros(3, 4, dtype=torch.bool), 0.5])  # n1 is 5 and 4
    assert not spec.admits([x, mask, 0.25]) and not spec.admits([x, mask, 1])  # another value, another type
    assert not spec.admits([x.double(), mask, 0.5]) and not spec.admits([x[..., :32], mask, 0.5])
    assert not spec.admits([x.transpose(0, 1).contiguous().transpose(0, 1), mask, 0.5])  # not contiguous
    assert not spec.admits([torch.zeros(0, 5, 64), torch.zeros(0, 5, dtype=torch.bool), 0.5])
    assert CallSpec("float32[4,8]@1,4").admits([torch.zeros(8, 4).t()])


def test_the_tensors_inside_a_tuple_vary_with_the_others():
    # a transformers decoder layer: hidden states, position ids and the rotary tables (cos, sin)
    layer = "float32[2,12,64], None, int64[1,12], None, False, (float32[1,12,16], float32[1,12,16])"
    family = family_of(layer)
    assert family.key == "float32[n0,n1,64], None, int64[n2,n1], None, False, (float32[n2,n1,16], float32[n2,n1,16])"
    assert family.trials[1].key == "float32[7,7,64], None, int64[7,7], None, False, (float32[7,7,16], float32[7,7,16])"
    assert family.trials[1].shapes == [[7, 7, 64], [7, 7], [7, 7, 16], [7, 7, 16]]
    # the rows of positions held at one, as a graph exported at one holds them
    held = family_of(layer, ones_fixed=True)
    assert held.key == "float32[n0,n1,64], None, int64[1,n1], None, False, (float32[1,n1,16], float32[1,n1,16])"
    assert held.trials[2].shapes == [[4, 19, 64], [1, 19], [1, 19, 16], [1, 19, 16]]
    assert family_of("(float32[4,8],)").key == "(float32[n0,8],)"
    # and the guard admits the family it names, the symbols shared across the tuple
    spec = CallSpec(held.key)
    cos = torch.zeros(1, 5, 16)
    assert spec.admits([torch.zeros(3, 5, 64), None, torch.zeros(1, 5, dtype=torch.int64), None, False, (cos, cos)])
    assert not spec.admits([torch.zeros(3, 5, 64), None, torch.zeros(1, 5, dtype=torch.int64), None, False,
                            (torch.zeros(1, 6, 16), cos)])


def test_a_signature_with_no_family_says_why_it_is_admitted_at_its_shape_alone(tmp_path):
    # no family to try: nothing runs (no worker starts), and the module's docstring says why
    from kevin_agent.config import EvalSettings
    from kevin_agent.model.family import check_family

    nested = "float32[2,16,64], {'cos': float32[1,16,16]}"
    check = check_family(str(tmp_path / "never_read.py"), "Model", "", [nested, "float32[4096]"],
                         EvalSettings(device="cpu"))
    assert check.admitted == [nested, "float32[4096]"] and not check.passed and not check.failed
    assert check.describe() == [
        f"{nested}: admitted at this shape alone; the family check does not vary the shapes inside its dict or "
        "nested arguments.",
        "float32[4096]: admitted at this shape alone; it has no leading dimension to vary."]


ROW_SUM_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds a row's terms one at a time, each sum rounded to bfloat16."""

    def forward(self, x):
        total = x[:, 0]
        for i in range(1, x.shape[1]):
            total = total + x[:, i]
        return total


def get_inputs():
    return [torch.rand(64, 256).bfloat16()]


def get_init_inputs():
    return []
'''

ROW_SUM_KERNEL = '''
import torch.nn as nn


class ModelNew(nn.Module):
    """The same sum accumulated in float32 and rounded once{scale}."""

    def forward(self, x):
        return (x.float().sum(1) * {factor}).bfloat16()
'''


def test_a_bfloat16_kernel_is_judged_at_other_shapes_as_its_run_judged_it(tmp_path):
    # the family check asks the float32 second opinion as the run's own trials do: a sum accumulated in
    # float32 differs from the reference's bf16 running sum beyond the tolerance, but is nearer the exact
    # answer, so it is admitted at the family; one 10% off is not
    from kevin_agent.config import EvalSettings
    from kevin_agent.model.family import check_family

    task = tmp_path / "row_sum.py"
    task.write_text(ROW_SUM_TASK)
    settings = EvalSettings(device="cpu")
    exact = check_family(str(task), "Model", ROW_SUM_KERNEL.format(scale="", factor=1.0), ["bfloat16[64,256]"], settings)
    assert exact.admitted == ["bfloat16[n0,256]"] and list(exact.passed) == ["bfloat16[n0,256]"], exact
    off = check_family(str(task), "Model", ROW_SUM_KERNEL.format(scale=", 10% high", factor=1.1), ["bfloat16[64,256]"],
                       settings)
    assert off.admitted == ["bfloat16[64,256]"] and "against the reference in float32" in off.failed["bfloat16[64,256]"]
