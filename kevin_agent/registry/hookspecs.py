"""Plugin hooks. A plugin is a module with functions marked ``@hookimpl``.

Each hook gets a ``register`` callback; the built-ins are registered through the very same
hooks (``kevin_agent.registry.builtin``), so a plugin can do anything a built-in does.
"""

from __future__ import annotations

import pluggy

PROJECT = "kevin_opt"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_backends(register):
    """``register(name, factory, *, replays=False)``; ``factory(config: RunConfig) -> Backend``.
    ``replays=True`` declares a backend that replays a fixed sequence of responses: its factory is
    called as ``factory(config, skip=n)`` with the responses a resumed run has used already; one
    made once and given to several runs also has ``cue(names, skip)`` (``protocols.Replaying``)."""


@hookspec
def register_devices(register):
    """``register(name, factory)``; ``factory(task: Task, settings: EvalSettings) -> Evaluator``."""


@hookspec
def register_searches(register):
    """``register(name, factory)``; ``factory(config: RunConfig) -> Search`` (``--search NAME``)."""


@hookspec
def register_checks(register):
    """``register(rule, description, check)``; ``check(tree: ast.Module, source: str, device: str)``
    returns a list of ``Violation``. Every registered check runs on every candidate."""


@hookspec
def register_reporters(register):
    """``register(name, reporter)``; a reporter has ``cli_option`` (e.g. ``"--junit"``), ``help``
    and ``write(path, info, records, best)``; it runs when its option is given a path."""
