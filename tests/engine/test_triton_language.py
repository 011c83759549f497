"""--language triton up to the evaluator: the setting, its flags, the prompt, the parser, the example.

The few-shot example is a real module: it passes the static checks for Triton and runs in Triton's
interpreter on CPU tensors (a subprocess, since TRITON_INTERPRET is read when triton is imported).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.checks import run_checks
from kevin_agent.cli import build_parser
from kevin_agent.config import load_config
from kevin_agent.engine import prompting
from kevin_agent.engine.parsing import parse_response
from kevin_agent.engine.prompting import render_prompt
from kevin_agent.errors import ConfigError
from kevin_agent.registry import build_registry
from kevin_agent.task import load_task

GOLDEN = Path(__file__).parents[1] / "golden"
EXAMPLE = Path(__file__).parents[2] / "prompts" / "examples" / "triton_add.py"


def words(text: str) -> int:
    return len(text.split())


def test_language_defaults_to_cuda_and_comes_from_flag_env_or_pyproject(tmp_path, monkeypatch):
    assert load_config({}).language == "cuda"
    assert load_config({"language": "triton"}).language == "triton"
    monkeypatch.setenv("KEVIN_LANGUAGE", "triton")
    assert load_config({}).language == "triton"
    monkeypatch.delenv("KEVIN_LANGUAGE")
    (tmp_path / "pyproject.toml").write_text('[tool.kevin]\nlanguage = "triton"\n')
    config = load_config({}, project_dir=tmp_path)
    assert config.language == "triton"
    # Recorded in run.json, and what every worker gets.
    assert config.public_dict()["language"] == "triton"
    assert config.eval_settings("cpu").language == "triton"
    with pytest.raises(ConfigError, match="language"):
        load_config({"language": "opencl"})


@pytest.mark.parametrize("argv", [["run", "task.py"], ["check", "ref.py", "cand.py"],
                                  ["optimize", "model.py"], ["bench", "level1"]])
def test_every_command_that_evaluates_takes_language(argv):
    parser = build_parser(build_registry())
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    args = sub.choices[argv[0]].parse_args(argv[1:] + ["--language", "triton"])
    assert args.language == "triton"
    assert sub.choices[argv[0]].parse_args(argv[1:]).language is None  # unset: the config's default
    with pytest.raises(SystemExit):
        sub.choices[argv[0]].parse_args(argv[1:] + ["--language", "opencl"])


@pytest.mark.parametrize(("device", "where"), [("cuda", "have to be on CUDA device"),
                                               ("cpu", "have to be on CPU device (the kernels run in Triton's "
                                                       "interpreter)")])
def test_the_triton_prompt_asks_for_triton_kernels_with_the_triton_example(device, where):
    task = load_task(GOLDEN / "layernorm_task.py")
    out = render_prompt(task, device=device, device_name="NVIDIA H200", attempts=[], budget_tokens=100_000,
                        count_tokens=words, language="triton")
    text = out.text
    assert task.model_source.strip() in text
    for phrase in ("custom Triton kernels", "@triton.jit", "kernel[grid](...)", "name your optimized output "
                   "architecture ModelNew", "every computation happens in your Triton kernels", where,
                   "summarize your changes in a few sentences"):
        assert phrase in text, phrase
    assert EXAMPLE.read_text(encoding="utf-8").strip() in text
    assert "load_inline" not in text and "raw CUDA kernels" not in text
    # cuda stays as it was: its own instruction and example.
    cuda = render_prompt(task, device=device, device_name="NVIDIA H200", attempts=[], budget_tokens=100_000,
                         count_tokens=words)
    assert "@triton.jit" not in cuda.text and prompting.example_source(device).strip() in cuda.text


def test_the_triton_example_passes_the_triton_checks_and_not_the_cuda_ones():
    source = EXAMPLE.read_text(encoding="utf-8")
    assert run_checks(source, "cuda", "triton").passed
    assert run_checks(source, "cpu", "triton").passed
    refused = run_checks(source, "cuda")
    assert {v.rule for v in refused.violations} == {"uses-load-inline"}


def test_the_triton_example_adds_in_the_interpreter():
    program = (
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('ex', {str(EXAMPLE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "a, b = torch.randn(3000), torch.randn(3000)\n"
        "out = m.ModelNew()(a, b)\n"
        "assert torch.equal(out, a + b), (out - a - b).abs().max()\n"
        "print('added', out.numel())\n"
    )
    done = subprocess.run([sys.executable, "-c", program], env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "added 3000" in done.stdout


def test_parse_errors_tell_a_triton_model_to_write_triton():
    no_block = parse_response("<think>x</think>\nI would write a kernel.", language="triton")
    assert "@triton.jit kernels" in no_block.error and "load_inline" not in no_block.error
    bad = parse_response("```python\nclass ModelNew(:\n```\n", language="triton")
    assert "@triton.jit functions" in bad.error
    assert "load_inline" in parse_response("<think>x</think>\nno code").error  # cuda's words stay
    good = parse_response("```python\n" + EXAMPLE.read_text(encoding="utf-8") + "```\nAdded.", language="triton")
    assert good.error is None and "@triton.jit" in good.code and good.summary == "Added."
