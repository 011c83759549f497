"""Model backends: where responses come from.

``vllm`` runs the model in this process (the default, needs a GPU), ``openai`` talks to any
OpenAI-compatible server, ``scripted`` replays a JSONL of hand-written responses. Plugins add
more through the ``register_backends`` hook with the same factory signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..config import RunConfig
from ..errors import ConfigError
from ..protocols import Backend
from .openai import OpenAIBackend
from .scripted import ScriptedBackend
from .vllm import VLLMBackend


def _scripted(config: RunConfig, skip: int = 0) -> Backend:
    if config.responses is None:
        raise ConfigError(
            "the scripted backend needs a response file",
            'pass --responses PATH: a JSONL file with one {"text": ...} per line',
        )
    return ScriptedBackend(config.responses, skip=skip)


def _openai(config: RunConfig, skip: int = 0) -> Backend:
    return OpenAIBackend(config)


def _vllm(config: RunConfig, skip: int = 0) -> Backend:
    return VLLMBackend(config)


#: Backend name -> factory. Factories take the run's config; ``skip`` (responses already used by
#: a resumed run) matters only to backends that replay a fixed sequence.
BUILTIN_BACKENDS: dict[str, Callable[..., Backend]] = {
    "scripted": _scripted,
    "openai": _openai,
    "vllm": _vllm,
}


def make_backend(
    config: RunConfig,
    *,
    skip: int = 0,
    registry: dict[str, Callable[..., Backend]] | None = None,
) -> Backend:
    """Build the backend ``config.backend`` names.

    ``skip`` is the number of responses a resumed run has already consumed; ``registry`` adds
    plugin backends to the built-in ones.
    """
    factories = {**BUILTIN_BACKENDS, **(registry or {})}
    factory = factories.get(config.backend)
    if factory is None:
        raise ConfigError(
            f"unknown backend {config.backend!r}",
            f"choose one of: {', '.join(sorted(factories))}",
        )
    if _takes_skip(factory):
        return factory(config, skip=skip)
    return factory(config)


def _takes_skip(factory: Callable[..., Backend]) -> bool:
    """Plugin factories may take only the config; skip matters to replaying backends alone."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "skip" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


__all__ = [
    "BUILTIN_BACKENDS",
    "OpenAIBackend",
    "ScriptedBackend",
    "VLLMBackend",
    "make_backend",
]
