"""``kevin-opt optimize --module PATH``: the plan is the groups the person names, in the order named.

``choose`` on profiles written out by hand (the groups tests' own), then the CLI on the example
stack with a folder of no scripts (a real profile and extraction; each group's run ends before its
first turn, so nothing builds), a refusal that leaves no record, and a resume that plans the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kevin_agent.config import load_config
from kevin_agent.errors import ExitCode
from kevin_agent.model.choose import choose, plan_lines
from kevin_agent.model.modelfile import ModelError
from kevin_agent.model.ranking import rank
from kevin_agent.optimize import OptimizeSession
from kevin_agent.store.optimizes import OPTIMIZE_JSON, read_record

from ..clihelp import kevin
from ..conftest import EXAMPLES
from ..model.test_model_groups import mixed_profile, same
from ..model.test_model_ranking import module, profile


def test_named_groups_are_the_plan_in_the_order_named():
    ranked = mixed_profile()
    # the ranking skips the blocks ("holds layers.*.act x3"); named, they are the plan
    assert {s.name: s.why for s in choose(ranked).skipped}["layers.* x3"].startswith("holds layers.*.act x3")
    blocks = choose(ranked, named_modules=["layers.1"])
    (group,) = blocks.chosen
    assert group.name == "layers.* x3" and group.members == ["layers.0", "layers.1", "layers.2"]
    assert blocks.at_floor == pytest.approx(1 / (1 - group.saving))
    text = "\n".join(plan_lines(blocks))
    assert text.startswith("named with --module (1 group, in the order named; the ranking, --modules and "
                           "--min-saving do not apply):")
    assert "1. layers.* x3 (Block, 3 modules, one kernel at each)" in text and "skipped" not in text
    # in the order named, past --modules and below --min-saving (the norms save 1.5%), by path or group name
    plan = choose(ranked, modules=1, named_modules=["layers.2.norm", "layers.*.act x3"])
    assert [g.name for g in plan.chosen] == ["layers.*.norm x3", "layers.*.act x3"]
    assert plan.named_modules == ["layers.2.norm", "layers.*.act x3"] and not plan.skipped and plan.below == 0


@pytest.mark.parametrize(("named", "message", "hint"), [
    (["layers.9"], "--module layers.9: the model's forward calls no module at layers.9",
     "pass one of the closest: layers.2, layers.1, layers.0"),
    (["layers.0.act", "layers.2.act"], "--module layers.0.act and --module layers.2.act are one group, "
                                       "layers.*.act x3", "name it once"),
    (["layers.0", "layers.1.norm"], "--module layers.0 and --module layers.1.norm nest: layers.*.norm x3 is inside "
                                    "layers.* x3", "--module layers.0 for the whole, or --module layers.1.norm"),
    (["embed"], "--module embed: embed is one library GEMM call, and a kernel at best matches the vendor's",
     "name a module that does more than this one call"),
])
def test_what_no_plan_can_hold_is_refused(named, message, hint):
    with pytest.raises(ModelError) as refused:
        choose(mixed_profile(), named_modules=named)
    assert refused.value.message.startswith(message) and hint in refused.value.hint
    assert refused.value.exit_code == ExitCode.USAGE


def test_a_library_call_inside_a_module_points_at_that_module():
    ranked = rank(profile(module("", 100.0, children=["block"]),
                          module("block", 90.0, children=["block.fc", "block.act"], library_ms=30.0),
                          module("block.fc", 30.0, library="gemm", library_ms=30.0),
                          module("block.act", 45.0)))
    with pytest.raises(ModelError, match="block.fc is one library GEMM call") as refused:
        choose(ranked, named_modules=["block.fc"])
    assert refused.value.hint == "name the module holding it instead: --module block"


def stack(folder: Path) -> Path:
    """The example stack in ``folder``, with a folder of scripts that serves no group."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "layer_stack.py", folder / "layer_stack.py")
    (folder / "no_scripts").mkdir()
    return folder


RUN = ("--device", "cpu", "--backend", "scripted", "--responses", "no_scripts", "--headless")


def test_the_flag_makes_the_plan_and_is_recorded(tmp_path):
    folder = stack(tmp_path)
    proc = kevin("optimize", "layer_stack.py", *RUN, "--module", "layers.1.act", "--module", "layers.*.norm",
                 "--modules", "1", "--json", "opt.json", cwd=folder)
    # each group's run found no script: nothing verified, exit 1, after the plan of both named groups
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert "named with --module (2 groups, in the order named" in err and "worth a kernel" not in err
    assert err.index("1. layers.*.act x3") < err.index("2. layers.*.norm x3") < err.index("extracting")
    record = json.loads((folder / "opt.json").read_text())
    assert record["schema"] == 3 and record["named_modules"] == ["layers.1.act", "layers.*.norm"]
    assert [g["name"] for g in record["groups"]] == ["layers.*.act x3", "layers.*.norm x3"]
    assert all(g["state"] == "failed" and "no script" in g["why"] for g in record["groups"])


def test_a_path_that_is_no_module_is_refused_after_the_profile_and_nothing_kept(tmp_path):
    folder = stack(tmp_path)
    proc = kevin("optimize", "layer_stack.py", *RUN, "--module", "layers.0", cwd=folder)
    assert proc.returncode == 2, proc.stderr
    # the ModuleDict that holds a layer's modules is never called: its members are the closest paths
    assert "kevin-opt: error: --module layers.0: the model's forward calls no module at layers.0\n" \
           "  hint: pass one of the closest: layers.0.act, layers.0.norm" in proc.stderr
    assert "profiling" in proc.stderr and "extracting" not in proc.stderr
    assert not list((folder / ".kevin" / "runs").glob("opt-*"))


def test_a_resumed_optimize_plans_the_modules_it_was_given(tmp_path):
    folder = stack(tmp_path)
    config = load_config({"device": "cpu", "backend": "scripted", "responses": str(folder / "no_scripts")})
    session = OptimizeSession.new(folder / "layer_stack.py", config, modules=4, min_saving=0.02,
                                  named_modules=["layers.2.act"])
    # as an interrupt during the profile leaves it: no plan yet
    session.record.status = "interrupted"
    session.close()
    optimize_id = session.record.optimize_id
    assert read_record(session.store.dir).named_modules == ["layers.2.act"]
    proc = kevin("resume", optimize_id, cwd=folder)
    assert proc.returncode == 1, proc.stderr
    assert "named with --module (1 group" in proc.stderr
    record = read_record(session.store.dir)
    assert record.named_modules == ["layers.2.act"] and [g.name for g in record.groups] == ["layers.*.act x3"]
    # a record of the layout before (no named_modules) reads as one the ranking planned
    older = json.loads((session.store.dir / OPTIMIZE_JSON).read_text())
    del older["named_modules"]
    older["schema"] = 2
    (session.store.dir / OPTIMIZE_JSON).write_text(json.dumps(older))
    assert read_record(session.store.dir).named_modules == []


def test_a_group_partly_inside_a_named_one_keeps_its_members_outside_it():
    # a transformers LLaMA's shape: the norms are one group, two in each layer and one after them all
    ranked = rank(profile(
        module("", 100.0, children=["layers.0", "layers.1", "norm"], cls="Net"),
        *[same(f"layers.{i}", 40.0, identity="layer", cls="Layer", children=[f"layers.{i}.norm"]) for i in range(2)],
        *[same(p, 6.0, identity="norm", cls="Norm") for p in ("layers.0.norm", "layers.1.norm", "norm")],
    ))
    assert choose(ranked, named_modules=["norm"]).chosen[0].members == ["layers.0.norm", "layers.1.norm", "norm"]
    layers, norm = choose(ranked, named_modules=["layers.0", "norm"]).chosen
    assert layers.members == ["layers.0", "layers.1"]
    # the final norm alone: the layers' norms run inside the layers' kernel
    assert norm.name == "norm" and norm.members == ["norm"] and norm.calls == pytest.approx(1)
    assert norm.share == pytest.approx(choose(ranked, named_modules=["norm"]).chosen[0].share / 3)
    # the same in the other order; a name that is itself inside the other's group is still refused
    assert [g.members for g in choose(ranked, named_modules=["norm", "layers.0"]).chosen] == [["norm"],
                                                                                          ["layers.0", "layers.1"]]
    with pytest.raises(ModelError, match="nest"):
        choose(ranked, named_modules=["layers.0", "layers.1.norm"])
