"""Render Kevin's prompts from the Jinja2 templates in ``prompts/``.

The layout is the one Kevin-32B was trained on (arXiv 2507.11948, Appendix D): the
reference architecture, the instruction, one inline-kernel example on the first turn
only, and on later turns the previous attempts (kernel, the model's own summary, one
feedback sentence) followed by the instruction to restart the reasoning. The model's
chain of thought is never carried over: that is what keeps long trajectories in context.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2
from pydantic import BaseModel

from ..errors import ConfigError
from ..results import Status
from ..task import Task

#: Error text fed back to the model is cut to this many lines and characters: a full
#: compiler log can run to thousands of lines, and the first errors are the ones to fix.
MAX_ERROR_LINES = 40
MAX_ERROR_CHARS = 4000

#: The few-shot example per device, and Triton's for every device (files in ``prompts/examples``,
#: compiled or run by the tests).
EXAMPLE_FILES = {"cuda": "cuda_add.py", "cpu": "cpu_add.py", "triton": "triton_add.py"}


class Attempt(BaseModel):
    """One earlier turn as the model sees it again."""

    code: str
    """The kernel it wrote ('' when nothing could be parsed)."""
    summary: str
    """Its own summary of the changes (never its reasoning)."""
    feedback: str
    """The one feedback sentence for that turn's outcome."""


class RenderedPrompt(BaseModel):
    text: str
    dropped: int
    """Earliest attempts left out so that the prompt fits the budget."""
    tokens: int
    """Tokens of ``text`` as counted by the backend."""


def prompts_dir():
    """The templates: the ``kevin_agent.prompts`` package of an install, or ``prompts/`` of a
    source checkout run through PYTHONPATH (as on a GPU machine where nothing is installed)."""
    try:
        return resources.files("kevin_agent.prompts")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "prompts"


class _PackageLoader(jinja2.BaseLoader):
    """Templates from the ``kevin_agent.prompts`` package, so a wheel install finds them."""

    def get_source(self, environment: jinja2.Environment, template: str):
        path = prompts_dir().joinpath(template)
        if not path.is_file():
            raise jinja2.TemplateNotFound(template)
        return path.read_text(encoding="utf-8"), None, lambda: True


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=_PackageLoader(),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def example_source(device: str, language: str = "cuda") -> str:
    """The few-shot example for ``device`` (Triton's one for every device), as shipped in
    ``prompts/examples``."""
    name = EXAMPLE_FILES.get("triton" if language == "triton" else device)
    if name is None:
        raise ConfigError(
            f"no prompt example for device {device!r}",
            f"known devices: {', '.join(sorted(EXAMPLE_FILES))}",
        )
    return prompts_dir().joinpath("examples", name).read_text(encoding="utf-8")


def trim_error(error: str) -> str:
    """Cut an error to its first lines: the model needs the first errors, not the whole log."""
    text = error.strip()
    if not text:
        return "(no error message)"
    lines = text.splitlines()
    cut = len(lines) > MAX_ERROR_LINES
    if cut:
        text = "\n".join(lines[:MAX_ERROR_LINES])
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS].rstrip()
        cut = True
    if cut:
        text += "\n... (error message truncated)"
    return text


def feedback_sentence(
    status: Status,
    *,
    error: str = "",
    speedup: float | None = None,
    flags: list[str] = [],  # noqa: B006 - never mutated
) -> str:
    """The one feedback sentence for a turn's outcome, in the words Kevin was trained on."""
    status = Status(status)
    if status is Status.CANCELLED:
        raise ValueError("a cancelled generation is never shown to the model: it has no feedback sentence")
    shown_speedup = f"{speedup:.2f}x" if speedup is not None else "unknown (timing did not finish)"
    text = _environment().get_template("feedback.j2").render(
        status=status.value,
        error=trim_error(error),
        speedup=shown_speedup,
        flags=list(flags),
    )
    return text.strip()


def _render(task: Task, device: str, device_name: str, attempts: list[Attempt], first: bool,
            language: str = "cuda") -> str:
    try:
        template = _environment().get_template("prompt.j2")
        return template.render(
            architecture=task.model_source.strip(),
            device=device,
            language=language,
            device_name=device_name,
            example=example_source(device, language).strip() if first else None,
            # Trailing blank lines would end up inside the code fence.
            attempts=[{**a.model_dump(), "code": a.code.rstrip()} for a in attempts],
        )
    except jinja2.TemplateNotFound as exc:
        raise ConfigError(
            f"no prompt template {exc.name!r} for device {device!r}",
            f"known devices: {', '.join(sorted(EXAMPLE_FILES))}",
        ) from None


def render_prompt(
    task: Task,
    *,
    device: str,
    device_name: str,
    attempts: list[Attempt],
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    language: str = "cuda",
) -> RenderedPrompt:
    """The prompt for the next turn, dropping the earliest attempts until it fits.

    ``budget_tokens`` is the context length minus the tokens kept for the response.
    With no attempts this is the first-turn prompt, which carries the example. ``language`` picks the
    instruction and the example: cuda's per device, or Triton's.
    """
    first = not attempts
    for dropped in range(len(attempts) + 1):
        text = _render(task, device, device_name, attempts[dropped:], first, language)
        tokens = count_tokens(text)
        if tokens <= budget_tokens:
            return RenderedPrompt(text=text, dropped=dropped, tokens=tokens)
    raise ConfigError(
        f"the context is too small for the task: the prompt alone takes {tokens} tokens "
        f"and only {budget_tokens} are left after reserving the response",
        "raise context_tokens (KEVIN_CONTEXT_TOKENS or context-tokens in [tool.kevin]), "
        "lower max_tokens (KEVIN_MAX_TOKENS), or shorten the task file",
    )
