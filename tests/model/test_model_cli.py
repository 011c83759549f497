"""``kevin-opt profile``, ``extract`` and ``install`` as a person runs them: the real CLI in a
subprocess, real model workers, real git repositories; bad input gets a message and exit 2, no
traceback, and nothing of the person's changed."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from kevin_agent.cli import build_parser
from kevin_agent.model.marks import INSTALL_PREFIX, line
from kevin_agent.model.records import InstallEnvelope, SignatureUse
from kevin_agent.registry import build_registry
from kevin_agent.results.records import SCHEMA

from ..clihelp import kevin
from ..conftest import EXAMPLES, git_init


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.parts}


@pytest.fixture
def repo(tmp_path):
    repo = git_init(tmp_path / "proj")
    shutil.copy(EXAMPLES / "mlp_block.py", repo / "mlp_block.py")
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my model"], check=True)
    return repo


def refused(proc, *words):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_profile_ranks_the_example_around_its_activation(repo):
    proc = kevin("profile", "mlp_block.py", "--device", "cpu", "--json", "profile.json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((repo / "profile.json").read_text())
    assert (data["schema"], data["kind"]) == (SCHEMA, "profile") and data["device"] == "cpu" and data["cpu_threads"] == 1
    modules = {m["path"]: m for m in data["modules"]}
    ranked = [m["path"] for m in data["modules"] if m["rank"] is not None]
    assert ranked[0] == "act", ranked
    assert modules["up"]["library"] == modules["down"]["library"] == "gemm" and modules["up"]["rank"] is None
    act = modules["act"]
    assert act["signatures"] == [{"key": "float32[4096,512]", "calls": 1, "output_bytes": 4096 * 512 * 4, "aliased": False,
                                  "args": [act["signatures"][0]["args"][0]]}]
    assert act["calls"] == 1 and act["share"] > 0.2 and act["amdahl"] == pytest.approx(1 / (1 - act["share"]))
    assert 0 < act["floor_ms"] < act["time_ms"] and act["saving"] == pytest.approx(act["share"] * act["headroom"])
    assert modules[""]["time_ms"] >= sum(modules[p]["time_ms"] for p in ("norm", "up", "act", "down"))
    # Each module's roofline: the GEMMs by their FLOPs (counted per module) at the measured matmul rate,
    # the element-wise modules by their bytes.
    assert modules["up"]["flops"] == 2 * 4096 * 128 * 512 and act["flops"] == 0 and data["flop_rate_tflop_s"] > 0
    assert all(modules[p]["roofline"] > 0 for p in ("norm", "up", "act", "down"))
    assert "roofline" in proc.stdout.splitlines()[3]
    table = proc.stdout.splitlines()
    assert any(row.split()[:3] == ["1", "act", "TanhGELU"] for row in table), proc.stdout
    assert "next: kevin-opt extract mlp_block.py --module act -o mlp_block_act.py" in proc.stdout


def test_extract_writes_a_task_kevin_opt_loads(repo):
    proc = kevin("extract", "mlp_block.py", "--module", "act", "-o", "act_task.py", "--device", "cpu", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "by its source capture, checked bit for bit" in proc.stdout
    # The next command names a backend that works without a GPU (the default, vLLM here, needs one).
    suggested = [line.strip().split("   (")[0] for line in proc.stdout.splitlines() if line.startswith("  kevin-opt")]
    assert "no GPU" in proc.stdout and len(suggested) == 2, proc.stdout
    parser = build_parser(build_registry())
    for line in suggested:
        args = parser.parse_args(["run", *shlex.split(line)[1:]])
        assert (args.file.name, args.device, args.backend) in {("act_task.py", "cpu", "openai"),
                                                               ("act_task.py", "cpu", "scripted")}, line
    text = (repo / "act_task.py").read_text()
    assert "class Model(nn.Module):" in text and "def get_input_signatures():" in text
    again = kevin("extract", "mlp_block.py", "--module", "act", "-o", "act_task.py", cwd=repo)
    refused(again, "act_task.py: already exists", "--replace")


def test_a_file_without_a_model_is_refused(repo):
    (repo / "layer.py").write_text("import torch\n\nclass Layer(torch.nn.Module):\n    pass\n")
    before = snapshot(repo)
    for command in (["profile"], ["extract", "--module", "x"]):
        proc = kevin(*command, "layer.py", "--device", "cpu", cwd=repo)
        refused(proc, "defines neither get_model() nor a KernelBench-style Model", "hint: define get_model()")
    assert snapshot(repo) == before


def test_a_module_path_the_model_lacks_names_the_closest(repo):
    before = snapshot(repo)
    proc = kevin("extract", "mlp_block.py", "--module", "actt", "--device", "cpu", cwd=repo)
    refused(proc, "the model has no module 'actt'", "closest paths: act")
    assert snapshot(repo) == before


UNCAPTURABLE = '''
import torch
import torch.nn as nn
from helpers import halve


class Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return halve(x)
        return -x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()

    def forward(self, x):
        return self.gate(x)


def get_model():
    return Net()


def get_inputs():
    return [torch.randn(4, 8)]
'''


def test_a_module_that_cannot_be_captured_says_why_and_suggests_a_task(repo):
    (repo / "helpers.py").write_text("def halve(x):\n    return x / 2\n")
    (repo / "net.py").write_text(UNCAPTURABLE)
    before = snapshot(repo)
    proc = kevin("extract", "net.py", "--module", "gate", "--device", "cpu", cwd=repo)
    refused(proc, "`gate` cannot be captured as a task", "`halve` from helpers", "`if x.sum() > 0:` (net.py, line 9)",
            "--class NAME")
    assert snapshot(repo) == before


def test_a_model_that_does_not_fit_the_device(repo):
    (repo / "huge.py").write_text("import torch\n\n\ndef get_model():\n    return torch.nn.Linear(1 << 23, 1 << 23)\n\n\n"
                                  "def get_inputs():\n    return [torch.randn(2, 1 << 23)]\n")
    before = snapshot(repo)
    proc = kevin("profile", "huge.py", "--device", "cpu", cwd=repo)
    refused(proc, "the model does not fit on cpu", "hint: make it smaller")
    assert snapshot(repo) == before


def fake_kernel(repo: Path, name: str = "mlp_block_act_kevin.py", module: str = "act") -> Path:
    """A delivered module's install line, which is all ``install`` reads (the kernel itself is
    installed for real in test_model_e2e)."""
    env = InstallEnvelope(model_file="mlp_block.py", module=module, class_name="TanhGELU", device="cpu",
                          training=False, signatures=["float32[4096,512]"],
                          recorded=[SignatureUse(key="float32[4096,512]", calls=1)])
    path = repo / name
    path.write_text(f'"""A kernel."""\n{line(INSTALL_PREFIX, env)}\n')
    return path


def test_install_shows_the_change_and_writes_it_only_when_asked(repo):
    fake_kernel(repo)
    before = snapshot(repo)
    shown = kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "+    from . import mlp_block_act_kevin\n" in shown.stdout and "+    import mlp_block_act_kevin\n" in shown.stdout
    assert "+    return mlp_block_act_kevin.install(MLPBlock(dim, hidden).eval())" in shown.stdout
    assert "-    return MLPBlock(dim, hidden).eval()" in shown.stdout
    assert snapshot(repo) == before
    # the person's uncommitted edit is theirs: --write refuses to write over it
    (repo / "mlp_block.py").write_text((repo / "mlp_block.py").read_text() + "\n# my edit\n")
    dirty = snapshot(repo)
    refused(kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--write", cwd=repo),
            "has uncommitted changes")
    assert snapshot(repo) == dirty
    subprocess.run(["git", "-C", repo, "checkout", "mlp_block.py"], check=True)
    written = kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--write", cwd=repo)
    assert written.returncode == 0, written.stderr
    text = (repo / "mlp_block.py").read_text()
    assert "    import mlp_block_act_kevin\n" in text and "return mlp_block_act_kevin.install(MLPBlock(dim, hidden).eval())" in text
    compile(text, "mlp_block.py", "exec")
    twice = kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--write", cwd=repo)
    assert twice.returncode == 0 and "already installs" in twice.stdout


def test_install_into_a_kernelbench_file_appends_a_block_that_builds_model_with_the_kernels(repo):
    shutil.copy(Path(__file__).parents[1] / "models" / "kb_minigpt_block.py", repo / "kb.py")
    subprocess.run(["git", "-C", repo, "add", "kb.py"], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "a KernelBench model"], check=True)
    fake_kernel(repo)
    before = snapshot(repo)
    shown = kevin("install", "kb.py", "--kernel", "mlp_block_act_kevin.py", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "+KevinOriginalModel = Model" in shown.stdout and "+class Model(KevinOriginalModel):" in shown.stdout
    assert "+        mlp_block_act_kevin.install(self)" in shown.stdout
    assert snapshot(repo) == before
    written = kevin("install", "kb.py", "--kernel", "mlp_block_act_kevin.py", "--write", cwd=repo)
    assert written.returncode == 0, written.stderr
    text = (repo / "kb.py").read_text()
    original = (Path(__file__).parents[1] / "models" / "kb_minigpt_block.py").read_text()
    assert text.startswith(original.rstrip("\n")) and text.count("    import mlp_block_act_kevin  # noqa: E402") == 1
    compile(text, "kb.py", "exec")
    # Model(*get_init_inputs()) gets the kernel: the block, run with a stand-in for the module
    namespace = {"Model": type("Model", (), {"__init__": lambda self, *a: setattr(self, "args", a)})}
    installed = []
    stand_in = type("K", (), {"install": staticmethod(installed.append)})
    block = text[text.index("KevinOriginalModel = Model"):]
    exec(compile(block.replace("import mlp_block_act_kevin  # noqa: E402", "pass"), "block", "exec"),
         {**namespace, "mlp_block_act_kevin": stand_in}, namespace)
    model = namespace["Model"](1, 2)
    assert installed == [model] and model.args == (1, 2) and namespace["KevinOriginalModel"] is not namespace["Model"]


def test_install_several_kernels_wraps_get_model_once_for_each(repo):
    fake_kernel(repo)
    fake_kernel(repo, "mlp_block_norm_kevin.py", module="norm")
    shown = kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--kernel",
                  "mlp_block_norm_kevin.py", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "+    from . import mlp_block_act_kevin, mlp_block_norm_kevin\n" in shown.stdout
    assert "+    import mlp_block_act_kevin\n+    import mlp_block_norm_kevin\n" in shown.stdout
    assert ("+    return mlp_block_norm_kevin.install(mlp_block_act_kevin.install(MLPBlock(dim, hidden).eval()))"
            in shown.stdout)
    twice = kevin("install", "mlp_block.py", "--kernel", "mlp_block_act_kevin.py", "--kernel", "mlp_block_act_kevin.py",
                  cwd=repo)
    refused(twice, "mlp_block_act_kevin: given twice")
