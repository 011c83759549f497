"""Groups found by real model workers: ``kevin-opt profile`` shows identical instances as one row
with their summed share, tells apart instances that differ in shapes, source or signatures, and
``kevin-opt extract`` writes one task for a group from any member, checked against each."""

from __future__ import annotations

import json

import pytest

from kevin_agent.model.marks import extracted_from

from ..clihelp import kevin

NET = '''
import torch
import torch.nn as nn


class Norm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


FirstNorm = Norm


class Layer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = FirstNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.fc(self.norm(x))


class Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = torch.tensor(s)  # a plain tensor attribute: not a parameter, not a buffer

    def forward(self, x):
        return x * self.s


class Norm(nn.Module):  # the same name, written otherwise: another computation
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return 2 * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(64), Layer(64)])
        self.wide = FirstNorm(128)     # the same class at other shapes
        self.other = Norm(64)          # the other Norm
        self.scales = nn.ModuleList([Scale(2.0), Scale(3.0)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        y = self.wide(torch.cat([x, x], dim=-1))
        return self.scales[1](self.scales[0](self.other(x))) + y[:, :64]


def get_model():
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        for layer in model.layers:
            layer.norm.weight.uniform_(0.5, 1.5)
    return model


def get_inputs():
    return [torch.randn(512, 64)]
'''


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grouping")
    (folder / "net.py").write_text(NET)
    proc = kevin("profile", "net.py", "--device", "cpu", "--json", "profile.json", "--plain", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return folder, proc, json.loads((folder / "profile.json").read_text())


def test_the_layers_norms_are_one_group_with_their_summed_share(net):
    _, proc, data = net
    groups = {g["name"]: g for g in data["groups"]}
    norms = groups["layers.*.norm x2"]
    assert norms["members"] == ["layers.0.norm", "layers.1.norm"] and norms["calls"] == 2
    modules = {m["path"]: m for m in data["modules"]}
    assert norms["share"] == pytest.approx(modules["layers.0.norm"]["share"] + modules["layers.1.norm"]["share"])
    assert modules["layers.0.norm"]["group"] == modules["layers.1.norm"]["group"] == "layers.*.norm x2"
    assert modules["layers.0.norm"]["identity"] == modules["layers.1.norm"]["identity"]
    assert norms["signatures"][0]["key"] == "float32[512,64]" and norms["signatures"][0]["calls"] == 2
    # the table prints the group as one row
    assert any(line.split()[1:4] == ["layers.*.norm", "x2", "Norm"] for line in proc.stdout.splitlines()), proc.stdout
    assert "layers.0.norm " not in proc.stdout.split("signatures (calls per forward):")[0]


def test_other_shapes_or_another_source_are_other_groups(net):
    _, _, data = net
    groups = {g["name"]: g for g in data["groups"]}
    # FirstNorm at 128 (other parameter shapes, another signature), the other Norm (its own source)
    assert groups["wide"]["members"] == ["wide"] and groups["other"]["members"] == ["other"]
    modules = {m["path"]: m for m in data["modules"]}
    assert len({modules[p]["identity"] for p in ("layers.0.norm", "wide", "other")}) == 3
    # the Linear layers are one group too, and library GEMMs
    assert groups["layers.*.fc x2"]["library"] == "gemm"
    assert groups["layers.* x2"]["members"] == ["layers.0", "layers.1"]


def test_extract_any_member_writes_the_groups_task_checked_against_each(net):
    folder, _, _ = net
    proc = kevin("extract", "net.py", "--module", "layers.1.norm", "--device", "cpu", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    task = folder / "net_layers_norm.py"
    meta = extracted_from(task.read_text())
    assert meta.module == "layers.1.norm" and meta.members == ["layers.0.norm", "layers.1.norm"]
    assert [(s.key, s.calls) for s in meta.signatures] == [("float32[512,64]", 2)]
    assert "one task for 2 identical modules" in proc.stdout
    assert "checked bit for bit against each of them (layers.0.norm, layers.1.norm)" in proc.stdout
    assert "def get_input_signatures():\n" in task.read_text() and "return [(2, _inputs_0)]" in task.read_text()
    again = kevin("extract", "net.py", "--module", "layers.0.norm", "--device", "cpu", cwd=folder)
    assert again.returncode == 2 and "net_layers_norm.py: already exists" in again.stderr


def test_a_member_the_task_does_not_reproduce_is_left_out_with_the_reason(net):
    folder, _, data = net
    # Scale(2.0) and Scale(3.0) look the same to the profile (a plain tensor attribute is not a
    # parameter); the task captured from scales.1 holds 3.0, so scales.0 keeps its own forward
    assert {g["name"]: g for g in data["groups"]}["scales.* x2"]["members"] == ["scales.0", "scales.1"]
    proc = kevin("extract", "net.py", "--module", "scales.1", "-o", "scale_task.py", "--device", "cpu", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    meta = extracted_from((folder / "scale_task.py").read_text())
    assert meta.paths == ["scales.1"] and list(meta.not_members) == ["scales.0"]
    assert "left out: scales.0 looks the same but the task does not reproduce it (at float32[512,64]" in proc.stdout
