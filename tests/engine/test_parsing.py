"""Splitting responses into reasoning, code and summary; parse errors that teach."""

from __future__ import annotations

from kevin_agent.engine.parsing import ParsedResponse, parse_response

KERNEL = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = "torch::Tensor f(torch::Tensor x) { return x; }"
ext = load_inline(name="f", cpp_sources=source, functions=["f"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
'''


def answer(code: str = KERNEL, lang: str = "python", summary: str = "Fused it.") -> str:
    return f"Here is the kernel:\n\n```{lang}\n{code}```\n\n{summary}\n"


def test_think_code_summary():
    parsed = parse_response("<think>\nplan: fuse\n</think>\n\n" + answer(summary="Fused the ops.\nTwo lines."))
    assert isinstance(parsed, ParsedResponse)
    assert parsed.error is None
    assert parsed.reasoning == "plan: fuse"
    assert parsed.code == KERNEL
    assert parsed.summary == "Fused the ops.\nTwo lines."


def test_code_in_reasoning_is_ignored():
    draft = "```python\nclass ModelNew:\n    draft = True\n```"
    parsed = parse_response(f"<think>{draft}</think>" + answer())
    assert parsed.code == KERNEL and "draft" in parsed.reasoning


def test_only_closing_think_tag():
    # Chat templates that open <think> in the prompt leave only the closing tag.
    parsed = parse_response("thinking here\n</think>\n" + answer())
    assert parsed.reasoning == "thinking here" and parsed.code == KERNEL and parsed.error is None


def test_reasoning_passed_separately():
    parsed = parse_response(answer(), reasoning="split out by the server")
    assert parsed.reasoning == "split out by the server" and parsed.code == KERNEL


def test_no_think_tags_at_all():
    parsed = parse_response(answer())
    assert parsed.reasoning == "" and parsed.code == KERNEL and parsed.summary == "Fused it."


def test_last_block_defining_model_new_wins():
    first = KERNEL.replace("ext.f(x)", "ext.f(x)  # first")
    text = answer(first, summary="") + answer(KERNEL, summary="Second one.") + "```python\nprint('usage')\n```\n"
    parsed = parse_response(text)
    assert parsed.code == KERNEL
    # The summary is what follows the chosen block, trailing blocks included.
    assert parsed.summary.startswith("Second one.")


def test_py_and_bare_fences():
    assert parse_response(answer(lang="py")).code == KERNEL
    assert parse_response(answer(lang="")).code == KERNEL


def test_other_languages_are_not_code():
    parsed = parse_response(answer(code="__global__ void k() {}\n", lang="cuda"))
    assert parsed.code is None
    assert parsed.error is not None and parsed.error.startswith("no ```python code block")


def test_no_code_block_error_is_instructive():
    parsed = parse_response("<think>ok</think>I would fuse the two ops into one kernel.")
    assert parsed.code is None and parsed.summary == ""
    assert "no ```python code block" in parsed.error
    assert "class ModelNew" in parsed.error and "load_inline" in parsed.error
    assert "summarize" in parsed.error


def test_code_without_model_new():
    parsed = parse_response(answer(KERNEL.replace("ModelNew", "FastModel")))
    assert parsed.code is not None and "FastModel" in parsed.code
    assert "does not define `class ModelNew`" in parsed.error


def test_truncated_inside_think():
    parsed = parse_response("<think>\nlet me think about tiling " * 3)
    assert parsed.code is None
    assert "ran out of tokens while reasoning" in parsed.error
    assert "let me think" in parsed.reasoning


def test_truncated_when_server_splits_reasoning():
    parsed = parse_response("", reasoning="a long chain of thought")
    assert "ran out of tokens while reasoning" in parsed.error
    assert parsed.reasoning == "a long chain of thought"


def test_unclosed_code_block():
    parsed = parse_response("<think>x</think>```python\n" + KERNEL)
    assert parsed.code == KERNEL
    assert "never closed" in parsed.error


def test_syntax_error_is_a_parse_error():
    bad = KERNEL.replace("def forward(self, x):", "def forward(self, x)")
    parsed = parse_response(answer(bad))
    assert parsed.code == bad
    assert "not valid Python" in parsed.error and "line 10" in parsed.error


def test_longer_fences_and_backticks_inside_strings():
    code = KERNEL + 'doc = """use ``` fences"""\n'
    parsed = parse_response(f"````python\n{code}````\nDone.")
    assert parsed.error is None and parsed.code == code and parsed.summary == "Done."
