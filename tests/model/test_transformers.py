"""transformers models through every command, on the CPU with tiny random-weight configs: a LLaMA
and a Qwen2 (decoders), a BERT (encoder), a ViT (vision), a LLaMA loaded with from_pretrained in
bfloat16. Called as people call them, with keyword arguments; their outputs are ModelOutputs
holding a cache object, carried between workers as tensors and paths and compared leaf by leaf.
transformers is a test dependency: kevin-opt itself never imports it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kevin_agent.config import EvalSettings
from kevin_agent.delivery.e2e import kernel_code
from kevin_agent.evaluate.toolchain import cache
from kevin_agent.evaluate.worker import Mismatch, Outcome
from kevin_agent.model.marks import read_envelope
from kevin_agent.model.worker import outputs
from kevin_agent.model.worker.identity import Reads, identity

from ..clihelp import kevin
from ..conftest import git_init

transformers = pytest.importorskip("transformers")

HERE = Path(__file__).parent
MODELS = HERE / "hf_models"
RESPONSES = HERE / "hf_responses"


def tiny_llama(use_cache: bool = True, layers: int = 2, attention: str = "sdpa"):
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                      max_position_embeddings=64, use_cache=use_cache)
    config._attn_implementation = attention
    torch.manual_seed(0)
    return transformers.LlamaModel(config).eval()


def _ids():
    return torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))


# --- outputs carried as tensors plus their paths -------------------------------------------------


def test_outputs_of_a_model_output_with_a_cache_round_trip_without_its_classes(tmp_path):
    model = tiny_llama()
    with torch.no_grad():
        out = model(input_ids=_ids())
    assert type(out).__name__ == "BaseModelOutputWithPast"
    path = str(tmp_path / "outputs.pt")
    outputs.save(out, path)
    # what torch.load refused before: the file holds tensors and text, no class of transformers
    saved = torch.load(path, weights_only=True)
    assert set(saved) == {"tensors", "structure"} and all(isinstance(t, torch.Tensor) for t in saved["tensors"])
    leaves = outputs.load(path)
    paths = [p for p, _ in leaves]
    assert paths[0] == "output.last_hidden_state"
    # the cache's tensors are leaves too, one key and one value per layer
    assert sum(".layers[" in p and p.endswith(".keys") for p in paths) == 2
    outcome = Outcome()
    with torch.no_grad():
        outputs.same_leaves(model(input_ids=_ids()), leaves, None, None, outcome)
    assert outcome.compared and outcome.max_abs_err == 0.0


def test_a_leaf_that_differs_is_named_by_its_path(tmp_path):
    model = tiny_llama()
    with torch.no_grad():
        out = model(input_ids=_ids())
    want = [(p, v.clone() if isinstance(v, torch.Tensor) else v) for p, v in outputs.flatten(out)]
    out.last_hidden_state[0, 0, 0] += 1.0
    with pytest.raises(Mismatch, match=r"^output\.last_hidden_state: "):
        outputs.same_leaves(out, want, None, None, Outcome())
    with pytest.raises(Mismatch, match=r"another structure: output\.\w+\.layers\[0\]\.keys is missing"):
        outputs.same_leaves({"last_hidden_state": out.last_hidden_state}, want, None, None, Outcome())


def test_the_attention_weights_eager_attention_returns_are_leaves_too():
    model = tiny_llama(attention="eager")
    with torch.no_grad():
        out = model(input_ids=_ids(), output_attentions=True)
    paths = [p for p, _ in outputs.flatten(out)]
    assert "output.attentions[0]" in paths and "output.attentions[1]" in paths


def test_nested_dicts_tuples_and_none_leaves():
    value = {"a": (torch.ones(2), None), "b": [{"c": 3}], 7: "x"}
    assert outputs.flatten(value) == [("output.a[0]", value["a"][0]), ("output.a[1]", "None"),
                                      ("output.b[0].c", "3"), ("output[7]", "'x'")]
    with pytest.raises(Mismatch, match=r"output\.b\[0\]\.c is 4, expected 3"):
        outputs.same_leaves({"a": (torch.ones(2), None), "b": [{"c": 4}], 7: "x"}, outputs.flatten(value), None,
                            None, Outcome())


def test_a_fault_of_the_workers_own_is_said_as_ours():
    from kevin_agent.errors import KevinError
    from kevin_agent.model.jobs import ModelReply
    from kevin_agent.model.modelfile import ModelError
    from kevin_agent.model.process import checked
    from kevin_agent.model.worker.main import internal_error

    try:
        outputs.load("/nonexistent/outputs.pt")
    except OSError as exc:
        error = internal_error("e2e", exc)
    assert error.startswith("kevin-opt's e2e worker failed (at ") and "FileNotFoundError" in error
    model_file = type("F", (), {"given": "model.py"})()
    with pytest.raises(KevinError) as raised:
        checked(ModelReply(ok=False, error_kind="internal", error=error), model_file)
    assert not isinstance(raised.value, ModelError)
    assert "not of model.py" in str(raised.value) and "run the file with python" not in str(raised.value.hint)


# --- eager and torch.compile, and which decides ------------------------------------------------------


def _measured(mode: str, eager: float, compiled: float | None, error: str = ""):
    from kevin_agent.delivery.e2e import _result
    from kevin_agent.model.jobs import E2ERun
    from kevin_agent.results.records import KernelEffect

    run = E2ERun(forward_ms=9.0, plain_ms=10.0, speedup=eager, compile_error=error)
    if compiled is not None:
        run = run.model_copy(update={"compiled_ms": 8.0, "compiled_kernel_ms": 8.0 / compiled,
                                     "compiled_speedup": compiled, "eager_over_compiled": 8.0 / 9.0})
    effect = KernelEffect(kernel_file="k_kevin.py", module="norm x9", members=["norm"], share=0.2, module_speedup=2.0)
    settings = EvalSettings(device="cpu", e2e_mode=mode)
    return _result(type("F", (), {"given": "m.py"})(), settings, None, [effect], [effect],
                   [E2ERun(forward_ms=10.0)], [run, run], 2, 1.0)


def test_the_mode_says_which_measurement_decides_and_a_loss_to_inductor_is_said():
    from kevin_agent.model.table import e2e_lines

    eager = _measured("eager", 1.10, 0.95)
    assert eager.mode == "eager" and eager.speedup == 1.10 and not eager.slower and eager.compiled_speedup == 0.95
    compiled = _measured("compile", 1.10, 0.95)
    assert compiled.mode == "compile" and compiled.speedup == 0.95 and compiled.slower
    assert compiled.eager_speedup == 1.10
    lines = e2e_lines(compiled)
    assert "the compile measurement decides (--mode eager|compile)" in lines
    assert "the kernels help in eager but lose to what Inductor fuses under torch.compile" in lines
    assert not any("lose to what Inductor" in line for line in e2e_lines(_measured("eager", 1.10, 1.04)))
    # a model that does not compile is decided in eager, and says why
    broken = _measured("compile", 1.10, None, "TypeError: no")
    assert broken.mode == "eager" and broken.speedup == 1.10 and broken.compiled_ms is None
    assert any("does not compile (TypeError: no)" in line for line in e2e_lines(broken))


# --- one computation, one group --------------------------------------------------------------------


def _attention_identities(model) -> list[str]:
    with Reads(model) as reads, torch.no_grad():
        model(input_ids=_ids())
    return [identity(layer.self_attn, reads) for layer in model.layers]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_attentions_are_one_computation_when_the_forward_reads_no_layer_idx(attention):
    # without a cache LlamaAttention never reads its layer_idx: the layers' attentions are alike
    first, second = _attention_identities(tiny_llama(use_cache=False, attention=attention))
    assert first == second
    # without the reads, every setting counts: layer_idx 0 and 1 tell them apart
    model = tiny_llama(use_cache=False)
    assert identity(model.layers[0].self_attn) != identity(model.layers[1].self_attn)


def test_attentions_that_read_their_layer_idx_stay_apart():
    # with a cache each attention writes its own layer of it: not one computation
    first, second = _attention_identities(tiny_llama(use_cache=True))
    assert first != second


def test_reads_puts_every_class_back():
    model = tiny_llama()
    classes = [type(m) for m in model.modules()]
    with Reads(model):
        assert type(model.layers[0].self_attn) is not transformers.models.llama.modeling_llama.LlamaAttention
    assert [type(m) for m in model.modules()] == classes


# --- the commands, in fresh workers ------------------------------------------------------------------

def _project(tmp: Path, *files: str) -> Path:
    repo = git_init(tmp / "proj")
    for name in files:
        shutil.copy(MODELS / name, repo / name)
    (repo / "responses").mkdir()
    for f in RESPONSES.iterdir():
        shutil.copy(f, repo / "responses" / f.name)
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my model"], check=True)
    return repo


def _profile(repo: Path, name: str) -> dict:
    proc = kevin("profile", name, "--device", "cpu", "--plain", "--json", "profile.json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((repo / "profile.json").read_text())


def _group(profile: dict, member: str) -> dict:
    return next(g for g in profile["groups"] if member in g["members"])


@pytest.mark.slow
@pytest.mark.parametrize("name, norm, members", [
    ("tiny_bert.py", "embeddings.LayerNorm",
     ["embeddings.LayerNorm", "encoder.layer.0.attention.output.LayerNorm", "encoder.layer.0.output.LayerNorm",
      "encoder.layer.1.attention.output.LayerNorm", "encoder.layer.1.output.LayerNorm"]),
    ("tiny_vit.py", "layers.0.layernorm_before",
     ["layers.0.layernorm_before", "layers.0.layernorm_after", "layers.1.layernorm_before",
      "layers.1.layernorm_after", "layernorm"]),
])
def test_an_encoder_and_a_vision_model_profile_and_extract(tmp_path, name, norm, members):
    repo = _project(tmp_path, name)
    profile = _profile(repo, name)
    # the layer norms are one row, the projections skipped as library GEMMs
    group = _group(profile, norm)
    assert sorted(group["members"]) == sorted(members) and group["rank"], group
    linear = [g for g in profile["groups"] if g["class_name"] == "Linear"]
    assert linear and all(g["library"] == "gemm" and g["rank"] is None for g in linear)
    proc = kevin("extract", name, "--module", norm, "-o", "norm_task.py", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"one task for {len(members)} identical modules" in proc.stdout
    assert "checked bit for bit against each of them" in proc.stdout


@pytest.mark.slow
def test_from_pretrained_in_bfloat16_profiles_and_extracts(tmp_path):
    repo = _project(tmp_path, "pretrained_llama.py")
    tiny_llama(layers=2).save_pretrained(repo / "tiny-llama")
    profile = _profile(repo, "pretrained_llama.py")
    norm = next(g for g in profile["groups"] if g["class_name"] == "LlamaRMSNorm")
    assert len(norm["members"]) == 5 and norm["rank"] and norm["signatures"][0]["key"] == "bfloat16[2,16,64]"
    proc = kevin("extract", "pretrained_llama.py", "--module", norm["members"][0], "-o", "norm_task.py", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "one task for 5 identical modules" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module, head", [
    ("layers.0", "def forward(self, hidden_states, attention_mask, position_ids, "),
    ("layers.0.self_attn", "def forward(self, hidden_states, position_embeddings, attention_mask, "),
])
def test_a_module_given_a_tuple_of_tensors_by_keyword_is_captured(tmp_path, module, head):
    # transformers passes position_embeddings, (cos, sin), by keyword to every attention and decoder
    # layer: the task's forward takes the module's own arguments, the tuple taken apart inside it
    repo = _project(tmp_path, "tiny_llama_prefill.py")
    proc = kevin("extract", "tiny_llama_prefill.py", "--module", module, "-o", "task.py", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "one task for 2 identical modules, by the export capture" in proc.stdout
    assert "checked bit for bit against each of them" in proc.stdout
    text = (repo / "task.py").read_text()
    assert head in text and "position_embeddings_0 = position_embeddings[0]" in text
    spec = importlib.util.spec_from_file_location("captured_task", repo / "task.py")
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    inputs = task.get_inputs()
    cos, sin = next(v for v in inputs if isinstance(v, tuple))
    assert cos.shape == sin.shape == (1, 12, 16)  # one row of positions, broadcast over the batch
    with torch.no_grad():
        out = task.Model(*task.get_init_inputs())(*inputs)
    assert (out[0] if isinstance(out, tuple) else out).shape == (2, 12, 64)


OPTIMIZE = ("--device", "cpu", "--backend", "scripted", "--responses", "responses", "--turns", "1",
            "--trajectories", "1", "--modules", "1", "--headless", "--json", "opt.json")

CHECK = textwrap.dedent("""
    import importlib.util, json, os, sys
    import torch

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    committed, original = load(sys.argv[1], "committed"), load(sys.argv[2], "original")
    torch.manual_seed(0)
    fast = committed.get_model()
    torch.manual_seed(0)
    plain = original.get_model()
    guards = [m.__dict__["forward"] for m in fast.modules() if hasattr(m.__dict__.get("forward"), "kernel_calls")]
    out = {"guards": len(guards), "shapes": []}
    # (batch, sequence length, compiled whole with fullgraph) per call; the profiled shape and another
    shapes = json.loads(sys.argv[3]) if len(sys.argv) > 3 else [[2, 16, False], [3, 11, False]]
    for batch, seq, compiled in shapes:
        os.environ["KEVIN_BATCH"], os.environ["KEVIN_SEQ"] = str(batch), str(seq)
        torch.manual_seed(1)
        inputs = original.get_inputs()
        for g in guards:
            g.kernel_calls = g.fallback_calls = 0
        model = torch.compile(fast, backend="aot_eager", fullgraph=True) if compiled else fast
        with torch.no_grad():
            a, b = model(**inputs), plain(**inputs)
        out["shapes"].append({"batch": batch, "seq": seq, "kernel_calls": sum(g.kernel_calls for g in guards),
                              "fallback_calls": sum(g.fallback_calls for g in guards),
                              "max_abs": float((a.last_hidden_state - b.last_hidden_state).abs().max())})
    print(json.dumps(out))
""")


KERNELIZE = textwrap.dedent("""
    import importlib, importlib.util, json, sys
    import torch
    from kernels import replace_kernel_forward_from_hub

    kernel = importlib.import_module(sys.argv[1])
    spec = importlib.util.spec_from_file_location("original", sys.argv[2])
    original = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(original)
    torch.manual_seed(0)
    plain = original.get_model()
    torch.manual_seed(0)
    model = original.get_model()
    for m in {type(m) for m in model.modules() if type(m).__name__.endswith("RMSNorm")}:
        replace_kernel_forward_from_hub(m, "RMSNorm")  # what transformers' decorator does with its kernels
    snippet = kernel.__doc__.split("use it through Hugging Face's kernels")[1]
    scope = {"model": model}
    exec("\\n".join(ln[4:] for ln in snippet.splitlines() if ln.startswith("    ")), scope)
    torch.manual_seed(1)
    inputs = original.get_inputs()
    with torch.no_grad():
        a, b = scope["model"](**inputs), plain(**inputs)
    print(json.dumps({"calls": kernel.kernel_calls(scope["model"]),
                      "max_abs": float((a.last_hidden_state - b.last_hidden_state).abs().max())}))
""")


@pytest.fixture(scope="module", params=["tiny_llama.py", "tiny_qwen2.py"])
def optimized(request, tmp_path_factory):
    name = request.param
    repo = _project(tmp_path_factory.mktemp(name.removesuffix(".py")), name)
    (repo / "original.py").write_text((repo / name).read_text())
    proc = kevin("optimize", name, *OPTIMIZE, cwd=repo)
    return name, repo, proc


@pytest.mark.slow
@pytest.mark.timing
def test_optimize_commits_the_norm_of_a_hidden_transformers_model(optimized):
    name, repo, proc = optimized
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((repo / "opt.json").read_text())
    (group,) = [g for g in record["groups"] if g["state"] == "kept"] or [record["groups"]]
    assert len(group["members"]) == 9, group  # the four layers' two norms and the final one
    e2e = record["e2e"]
    assert e2e["outputs_match"] and e2e["kernel_calls"] == 9 and e2e["fallback_calls"] == 0, e2e
    log = subprocess.run(["git", "-C", repo, "log", "--format=%s"], capture_output=True, text=True).stdout
    assert len(log.splitlines()) == 2, log  # the person's commit and one of kevin-opt's
    # the committed model file installs the kernel itself: against the original, at the profiled
    # shape (the kernel at every member) and at a batch and length it was never profiled at
    (kernel,) = repo.glob("*_kevin.py")
    # RMSNorm is a Hugging Face kernels layer: its local layer repository is committed beside the kernel
    committed = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True).stdout.split()
    layer = f"{kernel.stem}_layer/build/torch-universal/"
    assert {layer + f for f in ("__init__.py", "layers.py", "metadata.json")} <= set(committed), committed
    assert "class RMSNorm(torch.nn.Module)" in (repo / layer / "layers.py").read_text()
    assert "use_kernel_mapping({'RMSNorm': {'cpu': layer}})" in kernel.read_text()
    report = (repo / f"{Path(name).stem}_kevin_model_report.md").read_text()
    assert "## To use it through Hugging Face's kernels" in report and f"{kernel.stem}_layer" in report
    settings = EvalSettings(device="cpu")  # the run's build, where e2e finds it: nothing compiles here
    folder = settings.cache_dir / cache.build_key(kernel_code(kernel, read_envelope(kernel)), "cpu", settings.fast_build)
    check = subprocess.run([sys.executable, "-c", CHECK, str(repo / name), str(repo / "original.py")],
                           capture_output=True, text=True, cwd=repo, timeout=300,
                           env={**os.environ, "TORCH_EXTENSIONS_DIR": str(folder)})
    assert check.returncode == 0, check.stderr
    result = json.loads(check.stdout.splitlines()[-1])
    assert result["guards"] == 9
    profiled, other = result["shapes"]
    assert profiled["kernel_calls"] == 9 and profiled["fallback_calls"] == 0
    for shape in (profiled, other):
        assert shape["max_abs"] < 1e-4, shape
    assert other["kernel_calls"] + other["fallback_calls"] == 9
    # and through Hugging Face's kernels: the committed layer repository, by the header's own lines
    hub = subprocess.run([sys.executable, "-c", KERNELIZE, kernel.stem, str(repo / "original.py")],
                         capture_output=True, text=True, cwd=repo, timeout=300,
                         env={**os.environ, "TORCH_EXTENSIONS_DIR": str(folder)})
    assert hub.returncode == 0, hub.stderr
    result = json.loads(hub.stdout.splitlines()[-1])
    assert len(result["calls"]) == 9 and all(c == {"kernel": 1, "original": 0} for c in result["calls"].values())
    assert result["max_abs"] < 1e-4, result


@pytest.mark.slow
@pytest.mark.timing
def test_e2e_times_the_model_in_eager_and_compiled(optimized):
    name, repo, proc = optimized
    if name != "tiny_llama.py":
        pytest.skip("one compile is enough")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (kernel,) = repo.glob("*_kevin.py")
    run = kevin("e2e", name, "--kernel", kernel.name, "--device", "cpu", "--rounds", "1", "--compare-compile",
                "--mode", "compile", "--accept-slower", "--json", "e2e.json", cwd=repo)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads((repo / "e2e.json").read_text())
    assert result["mode"] == "compile" and not result["compile_error"], result
    assert result["compiled_outputs_match"] and result["kernel_calls"] == 9
    assert result["compiled_ms"] > 0 and result["compiled_kernel_ms"] > 0
    assert result["speedup"] == result["compiled_speedup"] and result["eager_speedup"] is not None
    assert "torch.compile:" in run.stdout and "the compile measurement decides" in run.stdout
