"""Plugins: the registry of built-ins, installed entry points and the ``plugins/`` folder.

Every backend, device, search, check and reporter, built-in (``builtin``) or not, comes in through
the hooks of ``hookspecs``, and everything that picks one by name (``--backend``, ``--device``)
looks here; each table holds factories of the interface ``protocols`` declares for it. A plugin
that fails to import is skipped and recorded in ``Registry.load_errors`` for the CLI to report on
stderr; the engine itself never prints.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import pluggy

from ..config import EvalSettings, RunConfig
from ..errors import ConfigError
from ..protocols import Backend, Evaluator, Reporter, Search
from ..results import CheckResult, Violation
from ..task import Task
from . import hookspecs

ENTRY_POINT_GROUP = "kevin_opt"
F = TypeVar("F")


class BackendFactory(Protocol):
    """``factory(config)``; one registered with ``replays=True`` is called ``factory(config, skip=n)``."""

    def __call__(self, config: RunConfig, /, **replay: int) -> Backend: ...


DeviceFactory = Callable[[Task, EvalSettings], Evaluator]
SearchFactory = Callable[[RunConfig], Search]
CheckFn = Callable[[ast.Module, str, str], list[Violation]]
"""``check(tree, source, device)``: the rules a candidate's source breaks. A check that also takes
``language`` (cuda or triton) gets it; one that does not sees only CUDA answers' sources."""


@dataclass
class CheckRule:
    name: str
    description: str
    check: CheckFn


@dataclass
class Registry:
    backends: dict[str, BackendFactory] = field(default_factory=dict)
    replaying: set[str] = field(default_factory=set)
    """Backends registered with ``replays=True``: their factories take ``skip``."""
    devices: dict[str, DeviceFactory] = field(default_factory=dict)
    searches: dict[str, SearchFactory] = field(default_factory=dict)
    checks: dict[str, CheckRule] = field(default_factory=dict)
    reporters: dict[str, Reporter] = field(default_factory=dict)
    load_errors: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)

    def make_backend(self, config: RunConfig, *, skip: int = 0) -> Backend:
        """The backend ``config.backend`` names. ``skip`` is the number of responses a resumed run
        has already used; only backends that replay a fixed sequence take it."""
        factory = self.backend_factory(config.backend)
        return factory(config, skip=skip) if config.backend in self.replaying else factory(config)

    def make_search(self, config: RunConfig) -> Search:
        """The search strategy ``config.search`` names (``--search``)."""
        return self.search_factory(config.search)(config)

    def search_factory(self, name: str) -> SearchFactory:
        return _lookup(self.searches, "search", name)

    def backend_factory(self, name: str) -> BackendFactory:
        """The registered factory for ``name``; a clear error listing the names otherwise."""
        return _lookup(self.backends, "backend", name)

    def device_factory(self, name: str) -> DeviceFactory:
        return _lookup(self.devices, "device", name)

    def make_evaluator(self, task: Task, settings: EvalSettings) -> Evaluator:
        return self.device_factory(settings.device)(task, settings)

    def check(self, source: str, device: str, language: str = "cuda") -> CheckResult:
        """Every registered rule on one candidate source; a syntax error stops at the first rule
        that reports it, since the others read the syntax tree. A rule that takes no ``language``
        is a CUDA rule: a Triton answer is checked by the rules that take it."""
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            from ..checks import syntax_violation

            return CheckResult(passed=False, violations=[syntax_violation(exc)])
        violations: list[Violation] = []
        for rule in self.checks.values():
            if _takes_language(rule.check):
                violations.extend(rule.check(tree, source, device, language=language))
            elif language == "cuda":
                violations.extend(rule.check(tree, source, device))
        return CheckResult(passed=not violations, violations=violations)


def _takes_language(check: CheckFn) -> bool:
    try:
        return "language" in inspect.signature(check).parameters
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return False


def _folder_modules(folder: Path) -> list[tuple[str, Path]]:
    return [(p.stem, p) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def build_registry(extra_dirs: list[Path] | None = None) -> Registry:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    reg = Registry()

    from . import builtin

    pm.register(builtin, name="builtin")

    # The repository's plugins/ folder ships as the package kevin_agent.plugins.
    if _has_shipped_plugins():
        shipped = importlib.import_module("kevin_agent.plugins")
        for info in pkgutil.iter_modules(shipped.__path__):
            module_name = f"kevin_agent.plugins.{info.name}"
            _register_module(pm, reg, module_name, lambda m=module_name: importlib.import_module(m))

    try:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    except Exception as exc:  # a broken installed plugin must not stop the tool
        reg.load_errors.append(f"entry point plugin failed to load: {exc.__class__.__name__}: {exc}")

    dirs = list(extra_dirs or [])
    if os.environ.get("KEVIN_PLUGINS_DIR"):
        dirs += [Path(p) for p in os.environ["KEVIN_PLUGINS_DIR"].split(os.pathsep) if p]
    for folder in dirs:
        for name, path in _folder_modules(folder):
            _register_module(pm, reg, f"kevin_user_plugin_{name}", lambda p=path, n=name: _import_path(n, p), label=str(path))

    hook = pm.hook

    def register_backend(name: str, factory: BackendFactory, *, replays: bool = False) -> None:
        reg.backends[name] = factory
        (reg.replaying.add if replays else reg.replaying.discard)(name)

    hook.register_backends(register=register_backend)
    hook.register_searches(register=lambda name, factory: reg.searches.__setitem__(name, factory))
    hook.register_devices(register=lambda name, factory: reg.devices.__setitem__(name, factory))
    hook.register_checks(
        register=lambda rule, description, check: reg.checks.__setitem__(rule, CheckRule(rule, description, check))
    )
    hook.register_reporters(register=lambda name, reporter: reg.reporters.__setitem__(name, reporter))
    reg.plugins = [name for name, _ in pm.list_name_plugin()]
    return reg


def _has_shipped_plugins() -> bool:
    return importlib.util.find_spec("kevin_agent.plugins") is not None


def _import_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(f"kevin_user_plugin_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _register_module(pm: pluggy.PluginManager, reg: Registry, name: str, load, label: str | None = None) -> None:
    try:
        module = load()
    except Exception as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        reg.load_errors.append(f"plugin {label or name} failed to import and was skipped: {last}")
        return
    if pm.get_plugin(name) is None:
        pm.register(module, name=name)


def _lookup(table: dict[str, F], what: str, name: str) -> F:
    if name not in table:
        raise ConfigError(f"unknown {what} {name!r}", f"choose one of: {', '.join(sorted(table))} "
                          f"(plugins can register more)")
    return table[name]
