"""Groups of identical module instances and the choice of which get a kernel, on profiles written
out by hand (no worker, no torch); the worker's side of grouping is in test_model_grouping."""

from __future__ import annotations

import pytest

from kevin_agent.model.choose import DEFAULT_MIN_SAVING, choose, plan_lines
from kevin_agent.model.groups import group_name, merged_signatures, pattern, task_part
from kevin_agent.model.ranking import rank
from kevin_agent.model.records import ArgSpec, SignatureCount
from kevin_agent.model.table import table_lines

from .test_model_ranking import module, profile


def same(path, time_ms, *, identity="norm-256", shape=(1024, 1024), cls="RowNorm", **kw):
    m = module(path, time_ms, shape=shape, cls=cls, **kw)
    m.identity = identity
    return m


def two_layers(norm0=50.0, norm1=45.0):
    return rank(profile(
        module("", 100.0, children=["layers.0", "layers.1"], cls="Net"),
        same("layers.0", norm0 + 1, identity="layer", cls="Layer", children=["layers.0.norm"]),
        same("layers.1", norm1 + 1, identity="layer", cls="Layer", children=["layers.1.norm"]),
        same("layers.0.norm", norm0),
        same("layers.1.norm", norm1),
    ))


@pytest.mark.parametrize(("members", "name", "part"), [
    (["layers.0.norm", "layers.1.norm"], "layers.*.norm x2", "layers_norm"),
    (["blocks.3.mlp.act"], "blocks.3.mlp.act", "blocks_3_mlp_act"),
    (["enc.layers.0.norm", "dec.layers.2.norm"], "enc.layers.0.norm x2", "enc_layers_0_norm"),  # two parts differ
    (["layers.0.norm", "layers.1.attn.norm"], "layers.0.norm x2", "layers_0_norm"),  # different depths
    (["attn_norm", "mlp_norm"], "attn_norm x2", "attn_norm"),  # a wildcard would be the whole name
    (["enc.norm", "dec.norm", "mid.norm"], "*.norm x3", "norm"),
])
def test_a_group_is_named_by_its_one_wildcard_or_its_first_member(members, name, part):
    assert group_name(members) == name
    assert task_part(members) == part
    assert pattern(members) == (name.split()[0] if "*" in name else ("" if len(members) > 1 else members[0]))


def test_the_two_layers_norms_are_one_group_with_the_summed_share():
    ranked = two_layers()
    norms = ranked.group_of("layers.1.norm")
    assert norms.name == "layers.*.norm x2" and norms.members == ["layers.0.norm", "layers.1.norm"]
    assert norms.share == pytest.approx(0.95) and norms.calls == 2
    a, b = ranked.module("layers.0.norm"), ranked.module("layers.1.norm")
    assert norms.own_saving == pytest.approx(a.own_saving + b.own_saving) and norms.headroom > 0.9
    assert norms.signatures[0].calls == 2  # one signature, its calls summed over the members
    # the group is ranked, and each member carries its rank and its name
    assert norms.rank == 1 and a.rank == b.rank == 1 and a.group == b.group == norms.name
    assert [g.name for g in ranked.groups][:2] == ["", "layers.*.norm x2"]
    rows = table_lines(ranked, width=100)
    assert any(r.split()[:4] == ["1", "layers.*.norm", "x2", "RowNorm"] for r in rows), rows
    assert not any("layers.0.norm" in r for r in rows)


def test_different_identities_or_signatures_are_different_groups():
    ranked = rank(profile(
        module("", 100.0, children=["a.0.norm", "a.1.norm", "a.2.norm", "a.3.norm"], cls="Net"),
        same("a.0.norm", 20.0),
        same("a.1.norm", 20.0, shape=(512, 1024)),        # called at another shape
        same("a.2.norm", 20.0, identity="norm-512"),      # other parameters, or another source
        same("a.3.norm", 20.0),
    ))
    names = sorted(g.name for g in ranked.groups if g.path)
    assert names == ["a.*.norm x2", "a.1.norm", "a.2.norm"], names
    assert ranked.group_of("a.3.norm").members == ["a.0.norm", "a.3.norm"]


def test_modules_without_an_identity_stay_apart():
    # a profile written before groups existed: each module a group of its own
    ranked = rank(profile(module("", 100.0, children=["x", "y"]), module("x", 40.0), module("y", 40.0)))
    assert [g.members for g in ranked.groups] == [[""], ["x"], ["y"]]


def test_the_envelope_widens_the_recorded_ranges():
    a = SignatureCount(key="k", calls=1, args=[ArgSpec(kind="tensor", shape=[4], dtype="float32", low=-1.0, high=2.0,
                                                       mean=0.0, std=1.0)])
    b = SignatureCount(key="k", calls=2, args=[ArgSpec(kind="tensor", shape=[4], dtype="float32", low=-3.0, high=1.0,
                                                       mean=1.0, std=3.0)])
    (merged,) = merged_signatures([[a], [b]])
    spec = merged.args[0]
    assert merged.calls == 3 and (spec.low, spec.high, spec.mean, spec.std) == (-3.0, 2.0, 0.5, 2.0)


def mixed_profile():
    """act x3 saves most; a block holds it; a GEMM takes a large share; a small norm x2."""
    return rank(profile(
        module("", 100.0, children=["embed", "layers.0", "layers.1", "layers.2"], cls="Net"),
        module("embed", 30.0, library="gemm", library_ms=30.0, cls="Linear"),
        *[same(f"layers.{i}", 20.0, identity="block", cls="Block", children=[f"layers.{i}.act", f"layers.{i}.norm"])
          for i in range(3)],
        *[same(f"layers.{i}.act", 12.0, identity="act", cls="Gate") for i in range(3)],
        *[same(f"layers.{i}.norm", 0.5, identity="norm", cls="Norm", shape=(64, 64)) for i in range(3)],
    ))


def test_choose_orders_by_saving_skips_gemms_and_groups_around_a_chosen_one():
    plan = choose(mixed_profile())
    assert [g.name for g in plan.chosen] == ["layers.*.act x3"]
    why = {s.name: s.why for s in plan.skipped}
    assert why["embed"].startswith("library GEMM")
    assert why["layers.* x3"] == "holds layers.*.act x3, chosen before it"
    assert plan.below == 1  # the norms: 1.5% of the forward, below the default 2%
    share = plan.chosen[0].share
    assert plan.at_floor == pytest.approx(1 / (1 - plan.chosen[0].saving))
    assert plan.at_typical == pytest.approx(1 / (1 - share + share / 2))
    text = "\n".join(plan_lines(plan))
    assert "1. layers.*.act x3 (Gate, 3 modules, one kernel at each): 36.0% of the forward" in text
    assert "skipped embed: library GEMM" in text and "1 more group could save less than 2.0% each" in text


def test_the_threshold_and_the_cap():
    ranked = mixed_profile()
    low = choose(ranked, min_saving=0.001)
    assert [g.name for g in low.chosen] == ["layers.*.act x3", "layers.*.norm x3"]
    capped = choose(ranked, min_saving=0.001, modules=1)
    assert [g.name for g in capped.chosen] == ["layers.*.act x3"]
    assert {s.name: s.why for s in capped.skipped}["layers.*.norm x3"] == "past the 1 groups asked for"
    assert DEFAULT_MIN_SAVING == 0.02


def test_nothing_worth_a_kernel():
    ranked = rank(profile(module("", 100.0, children=["fc", "act"]),
                          module("fc", 90.0, library="gemm", library_ms=90.0, cls="Linear"),
                          module("act", 1.0)))
    plan = choose(ranked)
    assert plan.chosen == [] and plan.at_floor == 1.0
    lines = plan_lines(plan)
    assert lines[0].startswith("nothing worth a kernel: no group could save 2.0% of the forward")
    assert "  fc: library GEMM: a kernel at best matches the vendor's" in lines


def test_a_group_inside_a_chosen_one_is_skipped():
    # the block itself saves most (its glue ops): the act inside it is left out
    ranked = rank(profile(module("", 100.0, children=["b"]), module("b", 90.0, children=["b.act"]),
                          module("b.act", 5.0)))
    plan = choose(ranked)
    assert [g.name for g in plan.chosen] == ["b"]
    assert {s.name: s.why for s in plan.skipped}["b.act"] == "inside b, chosen before it"


def test_a_profile_without_groups_is_grouped_when_chosen_from():
    ranked = mixed_profile()
    bare = ranked.model_copy(update={"groups": []})
    assert [g.name for g in choose(bare).chosen] == ["layers.*.act x3"]
