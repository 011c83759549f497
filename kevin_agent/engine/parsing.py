"""Split a model response into reasoning, code and summary.

Kevin thinks inside ``<think>…</think>``, then answers with one ```python block holding
the complete ``ModelNew`` and a few sentences summarizing the changes. Only the answer
is searched for code: the reasoning is full of drafts. A parse error's message goes back
to the model as the next turn's feedback, so it says what to do, not only what is wrong.
"""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

#: Fence languages that hold the answer's Python; other blocks (```cpp, ```cuda) are
#: kernel excerpts the model shows in prose and are skipped.
PYTHON_LANGS = {"", "python", "py", "python3"}

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*$", re.MULTILINE)
_MODEL_NEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)

FORMAT_HINT = (
    "After your reasoning, answer with the complete new architecture in one ```python code "
    "block that defines class ModelNew and builds its kernels with load_inline, then "
    "summarize your changes in a few sentences after the block."
)
TRITON_FORMAT_HINT = (
    "After your reasoning, answer with the complete new architecture in one ```python code "
    "block that defines @triton.jit kernels and class ModelNew whose forward launches them, then "
    "summarize your changes in a few sentences after the block."
)
#: Where the kernels live, per language: said when the block is not valid Python.
_KERNELS_WHERE = {"cuda": "with the kernel source in a string",
                  "triton": "with the kernels as @triton.jit functions"}


def format_hint(language: str = "cuda") -> str:
    return TRITON_FORMAT_HINT if language == "triton" else FORMAT_HINT


class ParsedResponse(BaseModel):
    reasoning: str
    """The chain of thought (kept on disk, never shown to the model again)."""
    code: str | None
    """The chosen code block; set even when ``error`` is (None only when there is none)."""
    summary: str
    """The text after the code block."""
    error: str | None
    """Why the response cannot be evaluated; None when it can."""


class _Block(BaseModel):
    lang: str
    body: str
    end: int
    """Offset in the answer just after the block (its closing fence)."""
    closed: bool


def _split_reasoning(text: str, reasoning: str) -> tuple[str, str, bool]:
    """(reasoning, answer, truncated_while_reasoning)."""
    open_at = text.find(THINK_OPEN)
    close_at = text.rfind(THINK_CLOSE)
    if close_at >= 0:
        # Chat templates often put <think> into the prompt, so the response may hold only
        # the closing tag; everything before it is then reasoning.
        start = open_at + len(THINK_OPEN) if 0 <= open_at < close_at else 0
        inner = text[start:close_at]
        answer = text[close_at + len(THINK_CLOSE) :]
        return "\n".join(p for p in (reasoning.strip(), inner.strip()) if p), answer, False
    if open_at >= 0:
        inner = text[open_at + len(THINK_OPEN) :]
        return "\n".join(p for p in (reasoning.strip(), inner.strip()) if p), "", True
    if reasoning.strip() and not text.strip():
        # A server that splits reasoning out returns an empty answer when generation was
        # cut off before the thinking ended.
        return reasoning.strip(), "", True
    return reasoning.strip(), text, False


def _blocks(answer: str) -> list[_Block]:
    blocks: list[_Block] = []
    pos = 0
    while True:
        opening = _FENCE.search(answer, pos)
        if opening is None:
            return blocks
        fence, lang = opening.group(1), opening.group(2).lower()
        body_start = opening.end() + 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        close = closing.search(answer, body_start)
        if close is None:
            blocks.append(_Block(lang=lang, body=answer[body_start:], end=len(answer), closed=False))
            return blocks
        blocks.append(_Block(lang=lang, body=answer[body_start : close.start()], end=close.end(), closed=True))
        pos = close.end()


def parse_response(text: str, reasoning: str = "", language: str = "cuda") -> ParsedResponse:
    """Find the reasoning, the last Python block that defines ``ModelNew``, and the summary.
    ``language`` (cuda or triton) only shapes what an error tells the model to do."""
    hint = format_hint(language)
    thought, answer, truncated = _split_reasoning(text, reasoning)
    if truncated:
        return ParsedResponse(
            reasoning=thought,
            code=None,
            summary="",
            error="the response ran out of tokens while reasoning: it ended inside <think> "
            "with no answer after it. Reason more briefly and leave room for the code. " + hint,
        )

    python_blocks = [b for b in _blocks(answer) if b.lang in PYTHON_LANGS]
    if not python_blocks:
        return ParsedResponse(
            reasoning=thought,
            code=None,
            summary="",
            error="no ```python code block was found in the answer. " + hint,
        )

    with_model = [b for b in python_blocks if _MODEL_NEW.search(b.body)]
    chosen = with_model[-1] if with_model else python_blocks[-1]
    code = chosen.body.rstrip() + "\n"
    summary = answer[chosen.end :].strip()
    error: str | None = None
    if not with_model:
        error = (
            "the code block does not define `class ModelNew`: name your optimized output "
            "architecture ModelNew and give the complete new architecture in one ```python block."
        )
    elif not chosen.closed:
        error = (
            "the ```python code block is never closed, so the response was probably cut off "
            "mid-code; write shorter code and close the block with ``` before the summary."
        )
    else:
        try:
            ast.parse(code)
        except SyntaxError as exc:
            error = (
                f"the code block is not valid Python (line {exc.lineno}: {exc.msg}); "
                f"put only Python in the ```python block, {_KERNELS_WHERE.get(language, _KERNELS_WHERE['cuda'])}."
            )
    return ParsedResponse(reasoning=thought, code=code, summary=summary, error=error)
