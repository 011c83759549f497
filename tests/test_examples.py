"""The shipped examples are real: task files build, response files parse, kernels work.

The few-shot examples in ``prompts/examples`` and the demo kernels in ``examples/`` are
compiled with the real toolchain. Every scripted response is compiled only when
KEVIN_TEST_ALL_RESPONSES=1 (about 20 builds); by default each example's final kernel is.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kevin_agent.engine.parsing import parse_response
from kevin_agent.task import load_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LABEL = "Hand-written demo response"

#: What each scripted CPU response is written to produce, turn by turn.
EXPECTED_CPU = {
    "rmsnorm": ["parse_error", "compile_error", "incorrect", "correct", "correct",
                "check_failed", "runtime_error", "correct"],
    "bias_gelu": ["parse_error", "compile_error", "incorrect", "correct", "correct",
                  "correct", "runtime_error", "correct"],
    "softmax": ["parse_error", "compile_error", "incorrect", "correct", "correct",
                "correct", "check_failed", "correct"],
}
NAMES = sorted(EXPECTED_CPU)
ALL_RESPONSES = os.environ.get("KEVIN_TEST_ALL_RESPONSES") == "1"
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def import_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def responses(name: str, device: str = "cpu") -> list[str]:
    lines = (EXAMPLES / f"{name}.{device}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()]


def build_models(task_module, candidate_module, device: str):
    """Both models from the same seed, as an evaluator builds them."""
    init = task_module.get_init_inputs()
    torch.manual_seed(1234)
    reference = task_module.Model(*init).to(device)
    torch.manual_seed(1234)
    candidate = candidate_module.ModelNew(*init).to(device)
    return reference, candidate


def assert_matches(task_module, reference, candidate, device: str, trials: int = 3) -> None:
    with torch.no_grad():
        for trial in range(trials):
            torch.manual_seed(trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task_module.get_inputs()]
            if trial == trials - 1:
                # A second input distribution: larger magnitudes.
                inputs = [x * 6 if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                          for x in inputs]
            kept = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            out = candidate(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            expected = reference(*inputs)
            assert out.shape == expected.shape and out.dtype == expected.dtype
            torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
            for before, after in zip(kept, inputs):
                if isinstance(before, torch.Tensor):
                    assert torch.equal(before, after), "the reference's inputs changed"


# --- task files ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_task_file_loads_and_builds_inputs(name):
    task = load_task(EXAMPLES / f"{name}.py")
    assert task.name == name and task.class_name == "Model"
    module = import_file(task.path, f"kevin_example_task_{name}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    assert inputs and all(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in inputs)
    with torch.no_grad():
        out = model(*inputs)
    assert out.shape == inputs[0].shape and torch.isfinite(out).all()


def test_readme_documents_every_example():
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in NAMES:
        assert f"{name}.py" in readme and f"{name}.cpu.jsonl" in readme and f"{name}.cuda.jsonl" in readme
        assert f"{name}.triton.jsonl" in readme
    assert "hand-written" in readme.lower()


# --- response files ---------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_cpu_responses_parse_as_scripted(name):
    texts = responses(name, "cpu")
    assert len(texts) == len(EXPECTED_CPU[name]) == 8
    for turn, (text, expected) in enumerate(zip(texts, EXPECTED_CPU[name]), start=1):
        parsed = parse_response(text)
        assert LABEL in parsed.reasoning, f"turn {turn} is not labelled"
        if expected == "parse_error":
            assert parsed.error is not None, f"turn {turn} should not parse"
            continue
        assert parsed.error is None, f"turn {turn}: {parsed.error}"
        assert parsed.summary, f"turn {turn} has no summary"
        assert "cpp_sources" in parsed.code and "cuda_sources" not in parsed.code
        if expected == "correct":
            tree = ast.parse(parsed.code)
            assert not any(isinstance(n, (ast.Try, ast.Pass)) for n in ast.walk(tree)), turn


#: The whole-model example's responses, one file per group, and what each turn is written to do.
LAYER_STACK = {"layers.0.norm": ["parse_error", "incorrect", "correct"],
               "layers.0.act": ["check_failed", "correct", "correct"]}


@pytest.mark.parametrize("group", sorted(LAYER_STACK))
def test_layer_stack_responses_are_labelled_and_parse_as_scripted(group):
    path = EXAMPLES / "layer_stack_responses" / f"{group}.jsonl"
    texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(texts) == len(LAYER_STACK[group])
    for turn, (text, expected) in enumerate(zip(texts, LAYER_STACK[group]), start=1):
        parsed = parse_response(text)
        assert LABEL in parsed.reasoning, f"turn {turn} is not labelled"
        assert (parsed.error is not None) == (expected == "parse_error"), f"turn {turn}: {parsed.error}"
        if parsed.error is None:
            assert "cpp_sources" in parsed.code and parsed.summary
    # the members the files are named by are modules of the model
    model = import_file(EXAMPLES / "layer_stack.py", "layer_stack_example").get_model()
    assert group in dict(model.named_modules())
    assert "layer_stack_responses" in (EXAMPLES / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", NAMES)
def test_cuda_responses_parse(name):
    texts = responses(name, "cuda")
    assert texts
    for turn, text in enumerate(texts, start=1):
        parsed = parse_response(text)
        assert LABEL in parsed.reasoning, f"turn {turn} is not labelled"
        assert parsed.error is None, f"turn {turn}: {parsed.error}"
        assert "__global__" in parsed.code and "cuda_sources" in parsed.code
        assert parsed.summary


def built_as_a_run_builds_it(code: str, device: str) -> Path | None:
    """The kernel built where a run of the same kernel looks for it (the session's build cache, by
    kevin-opt's fast build): once for this test and the demo runs of the other tests. The folder,
    or None when it does not build (this process's own build then says why)."""
    from kevin_agent.config import RunConfig
    from kevin_agent.evaluate.parent.builds import compile_in
    from kevin_agent.evaluate.toolchain import cache
    from kevin_agent.workers import scrubbed_env

    settings = RunConfig().eval_settings(device)
    folder = settings.cache_dir / cache.build_key(code, device, settings.fast_build)
    env = scrubbed_env({"TORCH_EXTENSIONS_DIR": str(folder), **cache.toolchain_env(device)})
    build = compile_in(folder, code, settings=settings, env=env, job={"settings": settings})
    return folder if build.ok else None


def compile_and_compare(name: str, turn: int, tmp_path: Path, device: str = "cpu") -> None:
    code = parse_response(responses(name, device)[turn - 1]).code
    path = tmp_path / f"{name}_{device}_turn{turn}.py"
    path.write_text(code, encoding="utf-8")
    task_module = import_file(EXAMPLES / f"{name}.py", f"kevin_example_ref_{name}")
    folder = built_as_a_run_builds_it(code, device) if device == "cpu" else None
    saved = os.environ.get("TORCH_EXTENSIONS_DIR")
    try:
        if folder is not None:
            # This process's load_inline finds the build up to date there, as a run's worker does.
            os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
        candidate_module = import_file(path, f"kevin_example_new_{name}_{device}_{turn}")
    finally:
        if folder is not None:
            if saved is None:
                os.environ.pop("TORCH_EXTENSIONS_DIR", None)
            else:
                os.environ["TORCH_EXTENSIONS_DIR"] = saved
    reference, candidate = build_models(task_module, candidate_module, device)
    assert_matches(task_module, reference, candidate, device)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_final_cpu_kernel_is_correct(name, tmp_path):
    compile_and_compare(name, len(EXPECTED_CPU[name]), tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not ALL_RESPONSES, reason="set KEVIN_TEST_ALL_RESPONSES=1 to build every response")
@pytest.mark.parametrize(
    ("name", "turn"),
    [(n, t) for n in NAMES for t, s in enumerate(EXPECTED_CPU[n], start=1)
     if s in ("compile_error", "incorrect", "correct", "runtime_error")],
)
def test_every_cpu_response_behaves_as_scripted(name, turn, tmp_path):
    expected = EXPECTED_CPU[name][turn - 1]
    if expected == "correct":
        compile_and_compare(name, turn, tmp_path)
        return
    with pytest.raises((RuntimeError, AssertionError)) as info:
        compile_and_compare(name, turn, tmp_path)
    text = str(info.value)
    if expected == "compile_error":
        assert "Error building extension" in text
    elif expected == "incorrect":
        assert isinstance(info.value, AssertionError) and "Mismatched elements" in text
    else:
        assert isinstance(info.value, RuntimeError) and "Error building" not in text


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", NAMES)
def test_final_cuda_kernel_is_correct(name, tmp_path, gpu_builds, monkeypatch):
    gpu_builds.use_plain(name, monkeypatch)  # built with the session's others, at once
    compile_and_compare(name, len(responses(name, "cuda")), tmp_path, device="cuda")


# --- the few-shot examples shown to the model ---------------------------------------------

def example_path(name: str) -> Path:
    from kevin_agent.engine.prompting import prompts_dir

    # Through prompts_dir: installed, the package's; on a GPU machine run from PYTHONPATH, the checkout's.
    return Path(str(prompts_dir().joinpath("examples", name)))


@pytest.mark.slow
def test_cpu_few_shot_example_compiles_and_adds():
    module = import_file(example_path("cpu_add.py"), "kevin_prompt_example_cpu_add")
    a, b = torch.randn(3, 1000), torch.randn(3, 1000)
    torch.testing.assert_close(module.ModelNew()(a, b), a + b, rtol=0, atol=0)


def test_cuda_few_shot_example_is_well_formed():
    source = example_path("cuda_add.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert any("__global__" in s for s in strings)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "load_inline"]
    assert calls and {"cpp_sources", "cuda_sources", "functions"} <= {k.arg for k in calls[0].keywords}
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


@pytest.mark.gpu
@needs_gpu
def test_cuda_few_shot_example_runs(gpu_builds, monkeypatch):
    gpu_builds.use_plain("cuda_add", monkeypatch)
    module = import_file(example_path("cuda_add.py"), "kevin_prompt_example_cuda_add")
    a, b = torch.randn(1, 4096, device="cuda"), torch.randn(1, 4096, device="cuda")
    torch.testing.assert_close(module.ModelNew()(a, b), a + b, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_static_checks_agree_with_the_script(name):
    from kevin_agent.checks import run_checks

    for turn, (text, expected) in enumerate(zip(responses(name, "cpu"), EXPECTED_CPU[name]), start=1):
        parsed = parse_response(text)
        if expected == "parse_error":
            continue
        result = run_checks(parsed.code, "cpu")
        assert result.passed == (expected != "check_failed"), f"turn {turn}: {result.summary()}"
    for turn, text in enumerate(responses(name, "cuda"), start=1):
        result = run_checks(parse_response(text).code, "cuda")
        assert result.passed, f"cuda turn {turn}: {result.summary()}"


# --- the whole-model example ----------------------------------------------------------------

def test_model_example_and_its_responses():
    """mlp_block.py is a model file (get_model, get_inputs), and its responses are for the task
    kevin-opt extract writes for its `act` module: labelled, parsed, a ModelNew with no arguments
    (the module's), turn 1 plain and turn 2 vectorized (the e2e test runs them for real)."""
    from kevin_agent.model.modelfile import load_model_file

    assert load_model_file(EXAMPLES / "mlp_block.py").convention == "get_model"
    texts = responses("mlp_block_act", "cpu")
    assert len(texts) == 2
    for turn, text in enumerate(texts, start=1):
        parsed = parse_response(text)
        assert LABEL in parsed.reasoning, f"turn {turn} is not labelled"
        assert parsed.error is None and parsed.summary and "cpp_sources" in parsed.code
        assert "def __init__(self):" in parsed.code
    assert "std::tanh" in parse_response(texts[0]).code and "omp simd" in parse_response(texts[1]).code
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert "mlp_block.py" in readme and "mlp_block_act.cpu.jsonl" in readme


# --- the Triton answers -------------------------------------------------------------------

#: What each scripted Triton response is written to produce.
EXPECTED_TRITON = {"rmsnorm": ["compile_error", "correct", "correct"], "bias_gelu": ["correct", "correct"],
                   "softmax": ["correct", "correct"]}
TRITON_CHECK = """
import importlib.util, json, sys, torch
from kevin_agent.evaluate.worker.interpreter_tuning import interpreter_autotune
interpreter_autotune()  # as the workers do: @triton.autotune has no GPU to time its configs on
task_path, code_path = sys.argv[1:3]
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
task, cand = load(task_path, "task"), load(code_path, "cand")
torch.manual_seed(0)
ref = task.Model(*task.get_init_inputs())
new = cand.ModelNew(*task.get_init_inputs())
new.load_state_dict(ref.state_dict())
x = [v[:4] for v in task.get_inputs()]  # four rows: the interpreter runs each program in Python
try:
    out = new(*x)
except Exception as exc:
    print(json.dumps({"status": "compile_error", "triton": type(exc).__module__.startswith("triton")}))
    raise SystemExit(0)
torch.testing.assert_close(out, ref(*x), atol=1e-4, rtol=1e-4)
print(json.dumps({"status": "correct"}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(("name", "turn"), [(n, t) for n, s in EXPECTED_TRITON.items() for t in range(1, len(s) + 1)])
def test_triton_responses_run_in_the_interpreter_as_scripted(name, turn, tmp_path):
    pytest.importorskip("triton")
    texts = responses(name, "triton")
    assert len(texts) == len(EXPECTED_TRITON[name])
    parsed = parse_response(texts[turn - 1], language="triton")
    assert LABEL in parsed.reasoning and parsed.error is None and parsed.summary
    assert "@triton.jit" in parsed.code and "load_inline" not in parsed.code
    path = tmp_path / f"{name}_triton_{turn}.py"
    path.write_text(parsed.code, encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", TRITON_CHECK, str(EXAMPLES / f"{name}.py"), str(path)], env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdict["status"] == EXPECTED_TRITON[name][turn - 1]
    if verdict["status"] == "compile_error":
        assert verdict["triton"]  # Triton's own error, not the answer's Python
