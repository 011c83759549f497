"""Extraction into task files, in real model workers: the extracted ``Model``, loaded with the real
module's weights, gives the real module's outputs bit for bit on every input the model passed it
(checked here, in the test's own process, apart from the worker's own check), for every module of
the example model and of a KernelBench level-3 model, and its factories draw every signature."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kevin_agent.config import EvalSettings
from kevin_agent.model.extract import extract_tasks
from kevin_agent.model.marks import extracted_from
from kevin_agent.model.modelfile import load_model_file
from kevin_agent.model.worker.guard import bound_arguments, call_signature
from kevin_agent.task import load_task

from ..conftest import EXAMPLES

MODELS = Path(__file__).parents[1] / "models"
SETTINGS = EvalSettings(device="cpu")


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def real_model(path: Path):
    """The model and its inputs, built as the worker builds them (under seed 0)."""
    module = _import(path, f"real_{path.stem}")
    torch.manual_seed(0)
    model = module.get_model() if hasattr(module, "get_model") else module.Model(*module.get_init_inputs())
    torch.manual_seed(0)
    return model, module.get_inputs()


def recorded_calls(model, inputs, path: str) -> list[tuple[str, list, object]]:
    """(signature, inputs, outputs) of every call the model makes to the module at ``path``."""
    calls, pending = [], []
    sub = model.get_submodule(path)

    def before(m, args, kwargs):
        values = bound_arguments(m.forward, args, kwargs)
        pending.append((call_signature(values), _copy(values)))

    def after(m, args, kwargs, out):
        key, values = pending.pop()
        calls.append((key, values, _copy(out)))

    handles = [sub.register_forward_pre_hook(before, with_kwargs=True), sub.register_forward_hook(after, with_kwargs=True)]
    with torch.no_grad():
        model(*inputs)
    for h in handles:
        h.remove()
    return calls


def _copy(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    return type(value)(_copy(v) for v in value) if isinstance(value, (list, tuple)) else value


def same(got, want) -> bool:
    """Bit for bit, through tuples and lists."""
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want)
    if isinstance(want, (list, tuple)):
        return type(got) is type(want) and len(got) == len(want) and all(same(a, b) for a, b in zip(got, want))
    return got == want


def check_reproduces(source: str, model_path: Path, path: str, tmp_path: Path) -> None:
    """The task reproduces the module at ``path`` and, for a group's task, every member, each on its
    own weights; its signatures and their calls are the members' together."""
    task_file = tmp_path / f"task_{path.replace('.', '_') or 'model'}.py"
    task_file.write_text(source)
    load_task(task_file)  # a valid task file as kevin-opt loads one
    task = _import(task_file, f"extracted_{task_file.stem}")
    model, inputs = real_model(model_path)
    meta = extracted_from(source)
    assert path in meta.paths
    covered = {s.key for s in meta.signatures}
    calls = []
    for member in meta.paths:
        sub = model.get_submodule(member)
        extracted = task.Model(*task.get_init_inputs())
        extracted.load_state_dict(sub.state_dict())
        for name, buf in sub.named_buffers():
            extracted.get_buffer(name).copy_(buf)
        every = recorded_calls(model, inputs, member)
        assert every, f"{member} is never called"
        assert {key for key, _, _ in every} == covered | {s.key for s in meta.left_out}
        mine = [c for c in every if c[0] in covered]
        for key, values, out in mine:
            with torch.no_grad():
                got = extracted(*values)
            assert same(got, out), f"{member} at {key}: the extracted Model differs"
        calls += mine
    keys = {key for key, _, _ in calls}
    drawn = [(count, call_signature(factory())) for count, factory in task.get_input_signatures()]
    assert {k for _, k in drawn} == keys
    counts = {k: sum(1 for key, _, _ in calls if key == k) for k in keys}
    assert [c for c, _ in drawn] == sorted(counts.values(), reverse=True)
    assert all(counts[k] == c for c, k in drawn)
    assert call_signature(task.get_inputs()) == drawn[0][1]


def called_paths(model_path: Path) -> list[str]:
    model, inputs = real_model(model_path)
    seen = []
    handles = [m.register_forward_pre_hook(lambda m, a, name=name: seen.append(name))
               for name, m in model.named_modules()]
    with torch.no_grad():
        model(*inputs)
    for h in handles:
        h.remove()
    return list(dict.fromkeys(seen))


@pytest.mark.parametrize("model_path", [EXAMPLES / "mlp_block.py", MODELS / "kb_minigpt_block.py"], ids=lambda p: p.stem)
def test_every_module_is_extracted_and_reproduced_bit_for_bit(model_path, tmp_path):
    paths = called_paths(model_path)
    assert len(paths) >= 5
    tasks = extract_tasks(load_model_file(model_path), paths, SETTINGS)
    assert [t.module for t in tasks] == paths
    captures = {}
    for task in tasks:
        assert task.source, f"{task.module!r}: {task.error}"
        meta = extracted_from(task.source)
        assert meta.module == task.module and meta.model_file == model_path.name
        captures[task.module] = meta.capture
        check_reproduces(task.source, model_path, task.module, tmp_path)
    # the model's own classes by their source; torch's (LayerNorm, Linear, Dropout) through a graph
    if model_path.stem == "kb_minigpt_block":
        assert captures["attn"] == captures["mlp.act"] == captures[""] == "source"
        assert captures["ln_1"] == captures["attn.c_attn"] == "fx"
    else:
        assert captures["act"] == captures["norm"] == "source" and captures["up"] == "fx"


SIGNATURES_MODEL = '''
import torch
import torch.nn as nn
from helpers import shift_of


class Scale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x, shift=None):
        return x * self.weight + (0.0 if shift is None else shift_of(shift))


class Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return shift_of(x)
        return -x


class Head(nn.Module):
    """Reads its mode through its dropout: made in eval mode in the task, as the model runs it."""

    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head(8)
        self.scale = Scale(8)
        self.drop = nn.Dropout(0.5)
        self.gate = Gate()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        a = self.scale(x) + self.scale(x)
        b = self.scale(x[:2])
        c = self.scale(x.t().contiguous().t())
        y = self.attn(x[None], x[None], x[None], need_weights=False)[0][0]
        return self.drop(a + c + self.scale(x, shift=2)) + b.sum() + self.gate(x) + y + self.head(x)


def get_model():
    return Net().eval()


def get_inputs():
    return [torch.randn(4, 8)]
'''


@pytest.fixture
def signatures_model(tmp_path):
    (tmp_path / "helpers.py").write_text("def shift_of(v):\n    return v * 0.5\n")
    path = tmp_path / "net.py"
    path.write_text(textwrap.dedent(SIGNATURES_MODEL))
    return path


def test_signatures_strides_keywords_and_the_ways_of_capture(signatures_model, tmp_path):
    tasks = {t.module: t for t in extract_tasks(load_model_file(signatures_model),
                                                ["scale", "drop", "gate", "attn", "head"], SETTINGS)}
    # scale: called at four signatures; its source needs helpers.py, so it is captured by fx, whose
    # graph holds shift at the headline's None: the call with shift=2 is left to the original forward
    scale = tasks["scale"]
    assert scale.source, scale.error
    meta = extracted_from(scale.source)
    assert meta.capture == "fx"
    assert [(s.key, s.calls) for s in meta.signatures] == [
        ("float32[4,8], None", 2), ("float32[2,8], None", 1), ("float32[4,8]@1,4, None", 1)]
    assert [(s.key, s.calls) for s in meta.left_out] == [("float32[4,8], 2", 1)]
    check_reproduces(scale.source, signatures_model, "scale", tmp_path)
    # the model runs Dropout in eval mode: the graph holds it as the identity it is there
    assert extracted_from(tasks["drop"].source).training is False
    check_reproduces(tasks["drop"].source, signatures_model, "drop", tmp_path)
    # Head by its source, made in eval mode (in training its dropout would differ from the model's)
    head = tasks["head"]
    assert extracted_from(head.source).capture == "source" and "self.eval()" in head.source
    assert "def get_init_inputs():\n    return [8]" in head.source
    check_reproduces(head.source, signatures_model, "head", tmp_path)
    # nn.MultiheadAttention: torch's source, untraceable by fx (it branches on its inputs), exported
    assert tasks["attn"].source, tasks["attn"].error
    assert extracted_from(tasks["attn"].source).capture == "export"
    check_reproduces(tasks["attn"].source, signatures_model, "attn", tmp_path)


def test_a_module_that_cannot_be_captured_names_the_construct(signatures_model):
    (gate,) = extract_tasks(load_model_file(signatures_model), ["gate"], SETTINGS)
    assert not gate.source
    # its source needs helpers.py; fx and export stop at the branch on a tensor's value
    assert "`shift_of` from helpers" in gate.error
    line = textwrap.dedent(SIGNATURES_MODEL).splitlines().index("        if x.sum() > 0:") + 1
    assert gate.error.count(f"`if x.sum() > 0:` (net.py, line {line})") == 2, gate.error


def test_a_capture_that_computes_something_else_is_not_kept():
    """The worker's own check, run here: a task file whose Model differs from the module in its
    last bit, or whose factories draw another signature, is refused with what differs."""
    from kevin_agent.model.worker import capture
    from kevin_agent.model.worker.loading import load

    loaded = load(SETTINGS, str(EXAMPLES / "mlp_block.py"))
    calls = capture.record_module(loaded, ["act"])
    task = capture.capture(loaded, "act", ["act"], calls, "mlp_block.py", seed=0)
    act = [(loaded.model.act, calls["act"])]
    assert capture.validate(task.source, act, "cpu", 0) == [""]
    off_by_a_bit = task.source.replace("return 0.5 * x *", "return 0.5000001 * x *")
    assert off_by_a_bit != task.source
    assert capture.validate(off_by_a_bit, act, "cpu", 0)[0].startswith(
        "at float32[4096,512]: output differs (max abs difference")
    other_shape = task.source.replace("_draw((4096, 512),", "_draw((4096, 256),")
    assert "draws inputs of signature float32[4096,256]" in capture.validate(other_shape, act, "cpu", 0)[0]

REGIONS_MODEL = '''
import torch
import torch.nn as nn
from region_helpers import widened


class Rotary(nn.Module):
    """As transformers writes its rotary embedding: a no_grad forward, an autocast region switched
    off around the float32 products. Its source needs region_helpers.py and fx stops at the autocast's
    device, so export captures it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)), persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = widened(self.inv_freq)[None, :, None].expand(position_ids.shape[0], -1, 1)
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(x.dtype), sin.to(x.dtype)


class Lowered(nn.Module):
    """An autocast region switched on: its dtypes are the region's, which a task file does not hold."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            return self.fc(widened(x)).float()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Rotary()
        self.low = Lowered()

    def forward(self, x):
        cos, sin = self.rotary(x, torch.arange(x.shape[1]).unsqueeze(0))
        return self.low(x * cos + x * sin)


def get_model():
    return Net().eval()


def get_inputs():
    return [torch.randn(1, 6, 8)]
'''


def test_no_grad_and_switched_off_autocast_regions_are_written_inline(tmp_path):
    (tmp_path / "region_helpers.py").write_text("def widened(t):\n    return t.float()\n")
    path = tmp_path / "regions.py"
    path.write_text(textwrap.dedent(REGIONS_MODEL))
    tasks = {t.module: t for t in extract_tasks(load_model_file(path), ["rotary", "low"], SETTINGS)}
    rotary = tasks["rotary"]
    assert rotary.source, rotary.error
    assert extracted_from(rotary.source).capture == "export"
    assert "wrap_with" not in rotary.source and "submod" not in rotary.source
    check_reproduces(rotary.source, path, "rotary", tmp_path)
    # a region under autocast that is on: said, and the other module extracted all the same
    assert not tasks["low"].source
    assert "torch.autocast('cpu', torch.bfloat16)" in tasks["low"].error, tasks["low"].error


def test_a_capture_that_fails_in_kevin_opts_own_code_gives_way_to_the_next(monkeypatch):
    """One way of capture raising in kevin-opt's own code (not a NotCaptured) neither ends the
    worker nor the module's extraction: the next way captures it, and where none does, the module's
    error says whose fault it was."""
    from kevin_agent.model.worker import capture
    from kevin_agent.model.worker.loading import load

    loaded = load(SETTINGS, str(EXAMPLES / "mlp_block.py"))
    calls = capture.record_module(loaded, ["act"])

    def broken(*args, **kwargs):
        raise RuntimeError("a writer that meets a graph it does not know")

    monkeypatch.setattr(capture, "source_capture", broken)
    task = capture.capture(loaded, "act", ["act"], calls, "mlp_block.py", seed=0)
    assert task.source and extracted_from(task.source).capture == "fx"
    monkeypatch.setattr(capture, "fx_graph", broken)
    monkeypatch.setattr(capture, "export_graph", broken)
    task = capture.capture(loaded, "act", ["act"], calls, "mlp_block.py", seed=0)
    assert not task.source
    assert task.error.count("a fault of kevin-opt's") == 3 and "RuntimeError: a writer that meets" in task.error
