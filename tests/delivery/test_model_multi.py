"""Several kernels in one model, on the CPU: the example stack's two groups (``layers.*.norm x3``,
``layers.*.act x3``) extracted and run with their hand-written responses (real builds, real
verification, real commits), both installed at every member, the whole model measured with them
against Amdahl's combined prediction; a kernel that is right on its task but wrong in the model,
and one that slows it, dropped by leaving each out; and ``install --write`` on a KernelBench-format
model file."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.delivery.kernel_module import CLAIM_PREFIX, KernelClaim, read_claim
from kevin_agent.model.delivered import envelope, installable
from kevin_agent.model.marks import extracted_from, read_envelope

from ..clihelp import kevin
from ..conftest import EXAMPLES, git_init

pytestmark = [pytest.mark.slow, pytest.mark.timing]

NORM, ACT = "layer_stack_layers_norm_kevin.py", "layer_stack_layers_act_kevin.py"


def commit(repo: Path, *paths: str, message: str = "files") -> None:
    subprocess.run(["git", "-C", repo, "add", *paths], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", message], check=True)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    repo = git_init(tmp_path_factory.mktemp("stack") / "proj")
    shutil.copy(EXAMPLES / "layer_stack.py", repo / "layer_stack.py")
    shutil.copytree(EXAMPLES / "layer_stack_responses", repo / "responses")
    commit(repo, ".", message="my model")
    steps = {"profile": kevin("profile", "layer_stack.py", "--device", "cpu", "--json", "profile.json", "--plain",
                              cwd=repo)}
    for group, member in (("norm", "layers.0.norm"), ("act", "layers.2.act")):
        steps[f"extract {group}"] = kevin("extract", "layer_stack.py", "--module", member, "--device", "cpu", cwd=repo)
        steps[f"run {group}"] = kevin(f"layer_stack_layers_{group}.py", "--device", "cpu", "--backend", "scripted",
                                      "--responses", f"responses/layers.0.{group}.jsonl", "--turns", "3", "--headless",
                                      "--confirm-rounds", "30", "--no-e2e", "--json", f"{group}.json", cwd=repo)
    steps["install"] = kevin("install", "layer_stack.py", "--kernel", NORM, "--kernel", ACT, cwd=repo)
    steps["e2e"] = kevin("e2e", "layer_stack.py", "--kernel", NORM, "--kernel", ACT, "--profile", "profile.json",
                         "--accept-slower", "--json", "e2e.json", cwd=repo)
    for name, proc in steps.items():
        assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    return repo, steps


def test_the_profile_plans_the_two_repeated_groups(stack):
    repo, steps = stack
    out = steps["profile"].stdout
    assert "worth a kernel (2 groups" in out, out
    chosen = re.findall(r"^  \d\. (\S+ x3) ", out, flags=re.M)
    assert sorted(chosen) == ["layers.*.act x3", "layers.*.norm x3"], out
    assert "the whole model: " in out and "if every kernel reached its floor" in out


def test_each_group_is_one_task_and_one_run(stack):
    repo, steps = stack
    statuses = {"norm": ["parse_error", "incorrect", "correct"], "act": ["check_failed", "correct", "correct"]}
    for group in ("norm", "act"):
        meta = extracted_from((repo / f"layer_stack_layers_{group}.py").read_text())
        assert meta.members == [f"layers.{i}.{group}" for i in range(3)]
        summary = json.loads((repo / f"{group}.json").read_text())
        assert [t["status"] for t in summary["turns"]] == statuses[group] and summary["commit"]
        env = read_envelope(repo / f"layer_stack_layers_{group}_kevin.py")
        assert env.paths == meta.members
    text = steps["install"].stdout
    assert f"+    from . import {NORM[:-3]}, {ACT[:-3]}\n" in text
    assert f"+    import {NORM[:-3]}\n+    import {ACT[:-3]}\n" in text
    assert f"+    return {ACT[:-3]}.install({NORM[:-3]}.install(model))" in text


def test_both_kernels_run_at_every_instance_and_meet_the_prediction(stack):
    repo, steps = stack
    result = json.loads((repo / "e2e.json").read_text())
    # slower only where the whole interval is below 1 (a busy machine's timing moves it: the step accepts it)
    assert result["outputs_match"] and result["slower"] == (result["speedup_interval"][1] < 1.0), result
    kernels = {k["module"]: k for k in result["kernels"]}
    assert set(kernels) == {"layers.*.norm x3", "layers.*.act x3"}
    for k in kernels.values():
        # the repeated module ran the kernel at every instance, the original forward 0 times
        assert (k["kernel_calls"], k["fallback_calls"]) == (3, 0) and k["outputs_match"]
        assert k["member_calls"] == {member: [1, 0] for member in k["members"]}
        # its own speedup is the one its run confirmed, inside that confirmation's interval
        claim = read_claim(repo / k["kernel_file"])
        assert k["module_speedup"] == claim.speedup == claim.confirmation.speedup_median
        assert claim.confirmation.ci95[0] <= claim.speedup <= claim.confirmation.ci95[1] and k["share"] > 0.05
    # Amdahl for the kept kernels together (on a busy machine a kernel that saves little may be
    # measured out of the combination: see the drop tests below)
    kept = [k for k in kernels.values() if not k["dropped"]]
    assert kept and result["share"] == pytest.approx(sum(k["share"] for k in kept))
    assert result["predicted"] == pytest.approx(
        1 / (1 - sum(k["share"] for k in kept) + sum(k["share"] / k["module_speedup"] for k in kept)))
    # the one speedup, inside the interval measured with it (how far it lands from the prediction
    # depends on the machine's load: 1.11x to 3.45x here against about 1.9x)
    low, high = result["speedup_interval"]
    assert low <= result["speedup"] <= high and result["slower"] == (high < 1.0), result
    assert "Amdahl predicts" in steps["e2e"].stdout and "calls that ran the original forward 0" in steps["e2e"].stdout
    assert "per module (kernel / original forward): layers.0.norm 1/0, layers.1.norm 1/0, layers.2.norm 1/0" \
        in steps["e2e"].stdout


WRONG_NORM = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Right on its task, whose weight is all ones; it never reads the weight."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
'''

SLOW_ACT = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Right everywhere, and forty times the work."""

    def forward(self, x):
        for _ in range(40):
            y = x * torch.sigmoid(1.702 * x)
        return y
'''


def delivered(repo: Path, task: str, name: str, code: str, speedup: float = 2.0) -> Path:
    """A kernel module as a run delivers one (its claim line, the code, the real install footer)
    around code written in PyTorch, so nothing compiles."""
    meta = extracted_from((repo / task).read_text())
    env = envelope(meta, device="cpu", seed=0, verified=[s.key for s in meta.signatures], code=code)
    claim = KernelClaim(speedup=speedup, device="cpu", device_name="cpu").model_dump_json()
    path = repo / name
    path.write_text(f'"""A kernel for {meta.module}."""\n{CLAIM_PREFIX}{claim}\n\n{installable(env, code, path.stem)}')
    return path


def test_a_kernel_right_on_its_task_but_wrong_in_the_model_is_dropped(stack):
    repo, _ = stack
    import torch

    task = {}
    exec(compile((repo / "layer_stack_layers_norm.py").read_text(), "task", "exec"), task)
    wrong = {}
    exec(compile(WRONG_NORM, "wrong", "exec"), wrong)
    x = task["get_inputs"]()[0]
    # on its task (a fresh Model: weight all ones) it gives the module's answer
    assert torch.allclose(wrong["ModelNew"](256)(x), task["Model"](*task["get_init_inputs"]())(x), atol=1e-6)
    delivered(repo, "layer_stack_layers_norm.py", "wrong_norm_kevin.py", WRONG_NORM)
    # (--accept-slower: what is measured here is which kernel goes, not how fast the rest is)
    proc = kevin("e2e", "layer_stack.py", "--kernel", "wrong_norm_kevin.py", "--kernel", ACT, "--profile",
                 "profile.json", "--rounds", "1", "--accept-slower", "--json", "wrong.json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((repo / "wrong.json").read_text())
    effects = {Path(k["kernel_file"]).name: k for k in result["kernels"]}
    assert effects["wrong_norm_kevin.py"]["dropped"].startswith("the model's outputs differ with it alone")
    assert not effects["wrong_norm_kevin.py"]["outputs_match"] and not effects[ACT]["dropped"]
    # what is left is measured again without it: the act kernel alone, outputs matching
    assert result["outputs_match"] and result["kernel_file"] == ACT and result["kernel_calls"] == 3
    assert "dropped wrong_norm_kevin.py (layers.*.norm x3): the model's outputs differ" in proc.stdout


def test_a_kernel_that_slows_the_whole_model_is_dropped(stack):
    repo, _ = stack
    delivered(repo, "layer_stack_layers_act.py", "slow_act_kevin.py", SLOW_ACT)
    proc = kevin("e2e", "layer_stack.py", "--kernel", NORM, "--kernel", "slow_act_kevin.py", "--profile",
                 "profile.json", "--rounds", "1", "--accept-slower", "--json", "slow.json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((repo / "slow.json").read_text())
    effects = {Path(k["kernel_file"]).name: k for k in result["kernels"]}
    slow = effects["slow_act_kevin.py"]
    assert slow["outputs_match"] and slow["dropped"].startswith("the whole model is faster without it")
    assert "in the measurement before" in slow["dropped"]  # found slower twice, in fresh workers each time
    assert slow["contribution"] < 1.0 and not effects[NORM]["dropped"]
    assert result["kernel_file"] == NORM and result["outputs_match"] and result["kernel_calls"] == 3


def kernelbench_file(text: str) -> str:
    """The example written the KernelBench way: ``class Model`` built from ``get_init_inputs()``."""
    text = text.replace("class LayerStack(nn.Module):", "class Model(nn.Module):")
    assert "class Model(nn.Module):" in text
    start, end = text.index("def get_model():"), text.index("def get_inputs():")
    return text[:start] + "def get_init_inputs():\n    return [features, dim, depth]\n\n\n" + text[end:]


def test_install_write_on_a_kernelbench_file(stack):
    repo, _ = stack
    (repo / "kb_stack.py").write_text(kernelbench_file((repo / "layer_stack.py").read_text()))
    commit(repo, "kb_stack.py", message="the model, KernelBench's way")
    first = kevin("install", "kb_stack.py", "--kernel", NORM, "--write", cwd=repo)
    assert first.returncode == 0, first.stderr
    commit(repo, "kb_stack.py")
    # a kernel added later: the block is written again, with both
    (repo / "kb_stack.py").write_text((repo / "kb_stack.py").read_text() + "\n# my edit\n")
    refused = kevin("install", "kb_stack.py", "--kernel", NORM, "--kernel", ACT, "--write", cwd=repo)
    assert refused.returncode == 2 and "has uncommitted changes" in refused.stderr and "--replace" in refused.stderr
    both = kevin("install", "kb_stack.py", "--kernel", NORM, "--kernel", ACT, "--write", "--replace", cwd=repo)
    assert both.returncode == 0, both.stderr
    text = (repo / "kb_stack.py").read_text()
    assert "# my edit" in text and text.count("class Model(") == 2 and text.count("KevinOriginalModel = Model") == 1
    assert f"import {NORM[:-3]}" in text and f"        {ACT[:-3]}.install(self)\n" in text
    compile(text, "kb_stack.py", "exec")
    again = kevin("install", "kb_stack.py", "--kernel", ACT, cwd=repo)
    assert again.returncode == 0 and "already installs" in again.stdout
    # Model(*get_init_inputs()), as KernelBench's harness builds it, runs both kernels; e2e takes
    # them out for the side without them
    proc = kevin("e2e", "kb_stack.py", "--kernel", NORM, "--kernel", ACT, "--rounds", "1", "--accept-slower",
                 "--profile", "profile.json", "--json", "kb.json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((repo / "kb.json").read_text())
    assert result["outputs_match"] and all(k["outputs_match"] for k in result["kernels"])
    assert [(k["kernel_calls"], k["fallback_calls"]) for k in result["kernels"]] == [(3, 0), (3, 0)]
    # the side without them had them taken out: its speedup is nearer the one e2e measured on the file
    # that does not install them than to 1, where it would be were both sides one model
    plain = json.loads((repo / "e2e.json").read_text())
    assert abs(result["speedup"] - plain["speedup"]) < abs(result["speedup"] - 1.0), (result, plain["speedup"])


WHOLE = """\
import json, torch
import proj.layer_stack as stack
model = stack.get_model()
x = stack.get_inputs()[0]
with torch.no_grad():
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    got = [compiled(x), compiled(x[:5]), model(x[:1])]
    calls = {**stack.layer_stack_layers_norm_kevin.kernel_calls(model),
             **stack.layer_stack_layers_act_kevin.kernel_calls(model)}
    stack.layer_stack_layers_norm_kevin.uninstall(model)
    stack.layer_stack_layers_act_kevin.uninstall(model)
    want = [model(x), model(x[:5]), model(x[:1])]
for g, w in zip(got, want):
    torch.testing.assert_close(g, w)
print("calls " + json.dumps(calls))
"""


def test_the_model_file_with_its_kernels_imports_as_a_package_and_compiles_whole(stack):
    """The issue's own case: the model file, once install --write changed it, imported as part of a
    package, compiled whole (fullgraph) at the profiled batch and at others, each kernel running
    at every member; and imported from its own folder too."""
    repo, _ = stack
    written = kevin("install", "layer_stack.py", "--kernel", NORM, "--kernel", ACT, "--write", "--replace", cwd=repo)
    assert written.returncode == 0, written.stderr
    proc = subprocess.run([sys.executable, "-c", WHOLE], cwd=repo.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    calls = json.loads(proc.stdout.splitlines()[-1][len("calls "):])
    # three forwards, two compiled: the kernels counted where they ran, in the graph and in eager
    assert calls == {f"layers.{i}.{group}": {"kernel": 3, "original": 0} for i in range(3) for group in ("norm", "act")}
    bare = subprocess.run([sys.executable, "-c", "import layer_stack, torch\nm = layer_stack.get_model()\n"
                                                 "with torch.no_grad(): m(*layer_stack.get_inputs())"],
                          cwd=repo, capture_output=True, text=True, timeout=600)
    assert bare.returncode == 0, bare.stderr
