"""From a whole model to a kernel installed in it, on the CPU, as the README's "Start from your
model" walks it: profile, extract the top module, a scripted run on it (real builds, real
verification, a real commit), install, e2e. Then the delivered kernel, installed in the real
model in this process, runs only at the signature it was verified at."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
import torch

from kevin_agent.config import EvalSettings
from kevin_agent.evaluate.toolchain import cache
from kevin_agent.delivery.e2e import kernel_code
from kevin_agent.model.marks import read_envelope

from ..clihelp import kevin
from ..conftest import EXAMPLES, git_init

pytestmark = [pytest.mark.slow, pytest.mark.timing]


@pytest.fixture(scope="module")
def delivered(tmp_path_factory):
    repo = git_init(tmp_path_factory.mktemp("from-model") / "proj")
    shutil.copy(EXAMPLES / "mlp_block.py", repo / "mlp_block.py")
    shutil.copy(EXAMPLES / "mlp_block_act.cpu.jsonl", repo / "responses.jsonl")
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my model"], check=True)
    steps = {
        "profile": kevin("profile", "mlp_block.py", "--device", "cpu", "--json", "profile.json", cwd=repo),
        "extract": kevin("extract", "mlp_block.py", "--module", "act", "-o", "mlp_block_act.py", cwd=repo),
    }
    steps["run"] = kevin("mlp_block_act.py", "--device", "cpu", "--backend", "scripted", "--responses",
                         "responses.jsonl", "--turns", "2", "--headless", "--confirm-rounds", "40",
                         "--accept-slower", "--json", "summary.json", cwd=repo)
    steps["install"] = kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", cwd=repo)
    steps["e2e"] = kevin("e2e", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--profile", "profile.json",
                         "--rounds", "3", "--accept-slower", "--json", "e2e.json", cwd=repo)
    # once the model file installs the kernel itself, e2e takes it out for the side without it
    steps["write"] = kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--write", cwd=repo)
    steps["e2e written"] = kevin("e2e", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--profile",
                                 "profile.json", "--rounds", "1", "--accept-slower", "--json", "e2e_written.json", cwd=repo)
    return repo, steps


def test_each_step_succeeds(delivered):
    repo, steps = delivered
    for name, proc in steps.items():
        assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    ranked = [m["path"] for m in json.loads((repo / "profile.json").read_text())["modules"] if m["rank"]]
    assert ranked[0] == "act"
    summary = json.loads((repo / "summary.json").read_text())
    assert [t["status"] for t in summary["turns"]] == ["correct", "correct"] and summary["commit"]
    # the run on an extracted task ran the whole model with its kernel before committing it
    e2e = summary["e2e"]
    assert e2e["outputs_match"] and e2e["kernel_calls"] == 1 and e2e["module"] == "act"
    # slower only where the whole interval is below 1 (a busy machine's timing moves it: the steps accept it)
    assert e2e["slower"] == (e2e["speedup_interval"][1] < 1.0), e2e
    assert (e2e["model_file"], e2e["kernel_file"]) == ("mlp_block.py", "mlp_block_act_kevin.py")
    assert any(line.startswith("whole model: mlp_block.py runs with and without it")
               for line in summary["delivery"]["plan"])
    assert json.loads((repo / "mlp_block_act_kevin_report.json").read_text())["e2e"] == e2e
    assert "## The whole model" in (repo / "mlp_block_act_kevin_report.md").read_text()
    assert "+    return mlp_block_act_kevin.install(MLPBlock(dim, hidden).eval())" in steps["install"].stdout


def test_e2e_speedup_is_what_amdahl_predicts(delivered):
    repo, steps = delivered
    result = json.loads((repo / "e2e.json").read_text())
    assert result["outputs_match"] and result["kernel_calls"] == 1 and result["fallback_calls"] == 0
    assert result["module"] == "act" and result["rounds"] == 3
    # the whole model's speedup is said once, with the 95% interval of its interleaved rounds
    low, high = result["speedup_interval"]
    assert low <= result["speedup"] <= high and result["slower"] == (high < 1.0)
    # Amdahl's prediction from the module's share and its own speedup, beside the measured one
    assert result["predicted"] == pytest.approx(
        1 / (1 - result["share"] + result["share"] / result["module_speedup"]), rel=1e-6)
    assert (f"speedup {result['speedup']:.2f}x (95% interval {low:.2f}-{high:.2f}x; with and without it, "
            f"interleaved); Amdahl predicts {result['predicted']:.2f}x" in steps["e2e"].stdout)
    assert "rounds of fresh workers:" not in steps["e2e"].stdout  # no second speedup beside it
    written = json.loads((repo / "e2e_written.json").read_text())
    # the side without the kernel had it taken out: its outputs are the original forward's, not the
    # kernel's, and its speedup is nearer the one e2e measures on the model that does not install it
    # than to 1, where it would be were both sides one model
    assert written["outputs_match"] and written["max_abs_err"] > 0 and written["kernel_calls"] == 1
    assert abs(written["speedup"] - result["speedup"]) < abs(written["speedup"] - 1.0), (written, result["speedup"])


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_delivered_kernel_runs_only_at_its_signature(delivered, monkeypatch):
    repo, _ = delivered
    kernel_path = repo / "mlp_block_act_kevin.py"
    env = read_envelope(kernel_path)
    # verified at the profile's rows and at 1, 7 and more: admitted at any number of rows
    assert env.signatures == ["float32[n0,512]"] and env.device == "cpu" and env.training is False
    # the build the run made, found where the e2e command found it: nothing compiles here
    settings = EvalSettings(device="cpu")
    folder = settings.cache_dir / cache.build_key(kernel_code(kernel_path, env), "cpu", settings.fast_build)
    assert cache.is_built(folder)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(folder))
    monkeypatch.syspath_prepend(str(repo))
    torch.set_num_threads(1)
    monkeypatch.delitem(sys.modules, "mlp_block_act_kevin", raising=False)
    kernel = importlib.import_module("mlp_block_act_kevin")  # the module the model file imports
    model_file = _import(repo / "mlp_block.py", "person_mlp_block")  # its get_model() installs the kernel now
    torch.manual_seed(0)
    model = model_file.get_model()
    torch.manual_seed(0)
    original = kernel.uninstall(model_file.get_model())
    guard = model.act.forward
    x, small = torch.randn(4096, 128), torch.randn(1000, 128)
    with torch.no_grad():
        at_signature, other_rows = model(x), model(small)
        assert (guard.kernel_calls, guard.fallback_calls) == (2, 0)  # both in the family it passed
        torch.testing.assert_close(at_signature, original(x), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(other_rows, original(small), atol=1e-4, rtol=1e-4)
    with torch.enable_grad():  # outside its envelope (verified without autograd)
        elsewhere = model(small)
        assert (guard.kernel_calls, guard.fallback_calls) == (2, 1)
        assert torch.equal(elsewhere, original(small))  # the original forward, bit for bit
    kernel.uninstall(model)
    with torch.no_grad():
        assert torch.equal(model(x), original(x))


def test_a_kernel_that_slows_the_model_down_is_said_to_and_not_accepted(tmp_path):
    """The script's turn 1 (a scalar std::tanh loop, several times slower than PyTorch) delivered
    with --min-speedup 0; its build is the one the walk above made."""
    repo = git_init(tmp_path / "proj")
    shutil.copy(EXAMPLES / "mlp_block.py", repo / "mlp_block.py")
    shutil.copy(EXAMPLES / "mlp_block_act.cpu.jsonl", repo / "responses.jsonl")
    assert kevin("extract", "mlp_block.py", "--module", "act", "-o", "mlp_block_act.py", cwd=repo).returncode == 0
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    run = kevin("mlp_block_act.py", "--device", "cpu", "--backend", "scripted", "--responses", "responses.jsonl",
                "--turns", "1", "--min-speedup", "0", "--headless", "--confirm-rounds", "20", "--json", "s.json",
                cwd=repo)
    # the run itself ran the whole model with it: slower, so written and not committed, exit 1
    assert run.returncode == 1, run.stderr
    assert "running the whole model mlp_block.py with and without the kernel before the commit" in run.stderr
    assert "the whole model is slower with it" in run.stderr and "pass --accept-slower" in run.stderr
    assert json.loads((repo / "s.json").read_text())["e2e"]["slower"] is True
    assert subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head
    slower = kevin("e2e", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--rounds", "1", "--json", "e2e.json",
                   cwd=repo)
    assert slower.returncode == 1, slower.stderr
    assert "the kernel makes the whole model SLOWER" in slower.stdout
    assert "pass --accept-slower" in slower.stderr
    assert json.loads((repo / "e2e.json").read_text())["slower"] is True
    accepted = kevin("e2e", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--rounds", "1", "--accept-slower",
                     cwd=repo)
    assert accepted.returncode == 0 and "SLOWER" in accepted.stdout
