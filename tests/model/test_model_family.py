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
    assert family_of("[float32[4,8], float32[4,8]]") is None


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


def test_a_signature_with_no_family_says_why_it_is_admitted_at_its_shape_alone(tmp_path):
    # no family to try: nothing runs (no worker starts), and the module's docstring says why
    from kevin_agent.config import EvalSettings
    from kevin_agent.model.family import check_family

    layer = "float32[2,16,64], None, (float32[1,16,16], float32[1,16,16])"
    check = check_family(str(tmp_path / "never_read.py"), "Model", "", [layer, "float32[4096]"],
                         EvalSettings(device="cpu"))
    assert check.admitted == [layer, "float32[4096]"] and not check.passed and not check.failed
    assert check.describe() == [
        f"{layer}: admitted at this shape alone; the family check does not vary the shapes inside its tuple, "
        "list or dict arguments.",
        "float32[4096]: admitted at this shape alone; it has no leading dimension to vary."]
