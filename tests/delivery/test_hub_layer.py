"""A delivered kernel for a transformers layer class (LlamaRMSNorm, marked
``@use_kernel_forward_from_hub("RMSNorm")``) offered as a Hugging Face ``kernels`` local layer
repository: the worker finds the layer's name and forward's parameters; the delivery writes the
repository beside the kernel module with the mapping in its header; ``kernelize`` under that mapping
swaps every RMSNorm's forward for the layer, which runs the real C++ kernel (load_inline) on each
module's own weight where it was verified and the original forward elsewhere, with the original's
outputs. ``kernels`` and transformers are test dependencies: kevin-opt never imports them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kevin_agent.delivery.hub_layer import layer_files, write_layer
from kevin_agent.delivery.kernel_module import render_kernel_module
from kevin_agent.model.marks import EXTRACTED_PREFIX, line, read_envelope
from kevin_agent.model.records import ExtractedTask, SignatureUse
from kevin_agent.model.worker.capture import forward_parameters, hub_layer_name
from kevin_agent.task import load_task

from ..run_records import correct, run_info

transformers = pytest.importorskip("transformers")
pytest.importorskip("kernels")

RESPONSE = Path(__file__).parents[1] / "model" / "hf_responses" / "LlamaRMSNorm.jsonl"
MEMBERS = ["layers.0.input_layernorm", "layers.0.post_attention_layernorm", "layers.1.input_layernorm",
           "layers.1.post_attention_layernorm", "norm"]

TASK = '''\
import torch
import torch.nn as nn


class LlamaRMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(64))
        self.variance_epsilon = 1e-6

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def get_inputs():
    return [torch.randn(2, 16, 64)]


def get_init_inputs():
    return []
'''


def test_the_worker_names_a_transformers_layer_and_its_forward_parameters():
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    # transformers 5 leaves its decorator inert without its pinned kernels: the name is read from the source
    assert hub_layer_name(LlamaRMSNorm) == "RMSNorm"
    assert forward_parameters(LlamaRMSNorm.forward) == ["hidden_states"]
    assert hub_layer_name(LlamaMLP) == "" and hub_layer_name(torch.nn.Linear) == ""

    class Marked(torch.nn.Module):
        kernel_layer_name = "Marked"

        def forward(self, x, y=None, /, z=2, *rest, w, **more):
            return x

    assert hub_layer_name(Marked) == "Marked"
    assert forward_parameters(Marked.forward) == ["x", "y=", "/", "z=", "*rest", "w", "**more"]


def builds() -> str:
    """The test's kernel builds once, in a folder of the shared build cache."""
    root = os.environ.get("KEVIN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kevin-opt")
    return os.path.join(root, "test-hub-layer")


CHECK = textwrap.dedent('''\
    import json, sys, time, torch
    import transformers
    from kernels import replace_kernel_forward_from_hub
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    import tiny_norm_kevin as kernel

    def tiny():
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
        torch.manual_seed(0)
        model = transformers.LlamaModel(config).eval()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, LlamaRMSNorm):
                    m.weight.uniform_(0.5, 1.5)  # each its own weight, not the ones the kernel is made with
        return model

    def ids(batch, seq):
        return torch.randint(0, 128, (batch, seq), generator=torch.Generator().manual_seed(1))

    def ms(model, x):
        with torch.no_grad():
            for _ in range(3):
                model(input_ids=x)
            t = time.perf_counter()
            for _ in range(30):
                model(input_ids=x)
        return (time.perf_counter() - t) / 30 * 1e3

    plain, installed = tiny(), kernel.install(tiny())
    replace_kernel_forward_from_hub(LlamaRMSNorm, "RMSNorm")  # what transformers' own decorator does
    model = tiny()
    snippet = kernel.__doc__.split("use it through Hugging Face's kernels")[1]
    code = "\\n".join(ln[4:] for ln in snippet.splitlines() if ln.startswith("    "))
    scope = {"model": model}
    exec(code, scope)  # the header's lines, as a person copies them
    model = scope["model"]
    out = {"swapped": sum(m.forward.__qualname__ == "RMSNorm.forward" for m in model.modules()
                          if isinstance(m, LlamaRMSNorm)), "shapes": []}
    for batch, seq in ((2, 16), (3, 11)):
        with torch.no_grad():
            want, got = plain(input_ids=ids(batch, seq)), model(input_ids=ids(batch, seq))
        out["shapes"].append({"calls": kernel.kernel_calls(model),
                              "max_abs": float((want.last_hidden_state - got.last_hidden_state).abs().max())})
    x = ids(2, 16)
    out["ms"] = {"original": ms(plain, x), "kernelize": ms(model, x), "install": ms(installed, x)}
    print("result " + json.dumps(out))
    ''')


@pytest.mark.slow
def test_kernelize_with_the_written_mapping_runs_the_kernel_in_every_rmsnorm(tmp_path):
    code = json.loads(RESPONSE.read_text().splitlines()[0])["text"].split("```python\n")[1].split("```")[0]
    meta = ExtractedTask(model_file="tiny.py", module=MEMBERS[0], members=MEMBERS, class_name="LlamaRMSNorm",
                         capture="source", training=False, signatures=[SignatureUse(key="float32[2,16,64]", calls=5)],
                         layer_name="RMSNorm", layer_parameters=["hidden_states"])
    task_path = tmp_path / "tiny_norm.py"
    task_path.write_text(line(EXTRACTED_PREFIX, meta) + "\n" + TASK)
    task = load_task(task_path, class_name="LlamaRMSNorm")
    kernel = tmp_path / "tiny_norm_kevin.py"
    kernel.write_text(render_kernel_module(task, correct(0, 1, 2.0, code=code), run_info(task), stem=kernel.stem))
    env = read_envelope(kernel)
    assert env.layer_name == "RMSNorm" and env.layer_parameters == ["hidden_states"]
    written = write_layer(kernel, env)
    assert written == layer_files(kernel) and all(f.is_file() for f in written)
    assert json.loads(written[2].read_text())["backend"] == {"type": "cpu"}
    # the layer needs torch and the kernel module beside it, nothing of kevin-opt's
    assert "kevin_agent" not in written[1].read_text()

    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TORCH_EXTENSIONS_DIR": builds(), "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("result "))[7:])
    print(result["ms"])
    assert result["swapped"] == 5
    verified, other = result["shapes"]
    # every RMSNorm ran the kernel at the verified shape, each on its own weight, the original's outputs
    assert verified["calls"] == {m: {"kernel": 1, "original": 0} for m in MEMBERS}, verified
    assert verified["max_abs"] < 1e-5
    # outside the envelope the original forward serves, as an installed kernel's guard does
    assert other["calls"] == {m: {"kernel": 1, "original": 1} for m in MEMBERS}, other
    assert other["max_abs"] == 0.0


def test_the_layers_forward_repeats_the_originals_parameters_and_passes_only_what_was_given():
    from kevin_agent.delivery.hub_layer import _forward_def

    signature, call = _forward_def(["x", "y=", "/", "z=", "*rest", "w", "**more"])
    assert signature == "self, x, y=_UNSET, /, z=_UNSET, *rest, w, **more"
    scope = {}
    exec(f"_UNSET = object()\n_run = lambda *a: a\ndef forward({signature}):\n    return {call}", scope)
    unset = scope["_UNSET"]
    assert scope["forward"]("m", 1, w=3) == ("m", (1, unset), {"z": unset, "w": 3}, (), {})
    assert scope["forward"]("m", 1, 2, 4, 5, w=3, k=6) == ("m", (1, 2), {"z": 4, "w": 3}, (5,), {"k": 6})
    # every argument always given by position: handed on as it came
    assert _forward_def(["hidden_states", "residual"]) == (
        "self, hidden_states, residual", "_kernel().layer_forward(self, hidden_states, residual)")
