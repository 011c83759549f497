"""Capture by source: the module's class as the model file writes it, with what it uses of
that file (other classes, functions, constants) and of the standard library and torch.

It applies when the class is defined in the model file, everything it reaches is there or
imported from torch or the standard library, and the model made the instance with arguments
that are Python literals (``ConstructorLog`` records them as the model is built).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys

import torch

from ...task import rename_identifier
from .loading import ModelProblem

ALLOWED_ROOTS = {"torch", *sys.stdlib_module_names}
RESERVED = {"get_model", "get_inputs", "get_init_inputs", "get_input_signatures"}


class NotCaptured(Exception):
    """This strategy cannot capture the module; the message names the construct."""


class ConstructorLog:
    """Records, on each instance of the model file's own ``nn.Module`` classes, the arguments
    its constructor was called with (``_kevin_init``)."""

    ATTR = "_kevin_init"

    def __init__(self, module) -> None:
        self.classes = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, torch.nn.Module)
                        and c.__module__ == module.__name__]
        self.saved = {c: c.__dict__.get("__init__") for c in self.classes}
        for cls in self.classes:
            if "__init__" in cls.__dict__:
                cls.__init__ = self._wrap(cls.__dict__["__init__"])

    def _wrap(self, init):
        attr = self.ATTR

        def recorded(obj, *args, **kwargs):
            init(obj, *args, **kwargs)
            # The outermost constructor finishes last: a subclass's arguments win over its base's.
            obj.__dict__[attr] = (type(obj), init, args, kwargs)

        recorded.__wrapped__ = init
        return recorded

    def restore(self) -> None:
        for cls, init in self.saved.items():
            if init is not None:
                cls.__init__ = init

    @classmethod
    def arguments(cls, obj: torch.nn.Module) -> list:
        """The instance's constructor arguments, positionally; raise NotCaptured when unknown."""
        entry = obj.__dict__.get(cls.ATTR)
        if entry is None:
            owner = next(c for c in type(obj).__mro__ if "__init__" in vars(c))
            if owner is torch.nn.Module:
                return []
            raise NotCaptured(f"the arguments {type(obj).__name__} was made with were not seen")
        _, init, args, kwargs = entry
        try:
            bound = inspect.signature(init).bind(obj, *args, **kwargs)
        except TypeError as exc:
            raise NotCaptured(f"{type(obj).__name__}'s constructor arguments cannot be bound: {exc}") from None
        params = list(bound.signature.parameters.values())[1:]
        if any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) and p.name in bound.arguments for p in params):
            raise NotCaptured(f"{type(obj).__name__} was made with keyword-only arguments")
        bound.apply_defaults()
        values = []
        for p in params:
            value = bound.arguments.get(p.name)
            values.extend(value if p.kind is p.VAR_POSITIONAL else [value])
        for value in values:
            if not _is_literal(value):
                raise NotCaptured(f"{type(obj).__name__} was made with a {type(value).__name__} argument, "
                                  "which a task file cannot write as a literal")
        return values


def _is_literal(value) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _bound_names(node: ast.AST) -> set[str]:
    """Names bound anywhere inside ``node`` (locals, arguments, loop and comprehension targets)."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, ast.arg):
            names.add(sub.arg)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub is not node:
            names.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in sub.names)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            names.add(sub.name)
    return names


def _free_names(node: ast.AST) -> set[str]:
    used = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)}
    return used - _bound_names(node) - set(dir(builtins)) - {"__class__"}


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def class_source(path: str, cls: type) -> tuple[list[str], str]:
    """(import lines, definitions) of ``cls`` and what it reaches in the file at ``path``, the class
    renamed ``Model``; raise NotCaptured naming what it needs from elsewhere."""
    text = open(path, encoding="utf-8").read()
    tree = ast.parse(text)
    lines = text.splitlines()
    defs: dict[str, ast.stmt] = {}
    imports: dict[str, tuple[ast.stmt, ast.alias]] = {}
    for node in tree.body:
        for name in _defined(node):
            defs[name] = node
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imports[(alias.asname or alias.name).split(".")[0]] = (node, alias)
    if cls.__name__ not in defs or not isinstance(defs[cls.__name__], ast.ClassDef):
        raise NotCaptured(f"{cls.__name__} is not defined at the top level of {path.rsplit('/', 1)[-1]}")
    wanted, used_imports, todo = set(), {}, [cls.__name__]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        for free in sorted(_free_names(defs[name])):
            if free in RESERVED:
                raise NotCaptured(f"{name} calls {free}(), the model file's own factory")
            if free in defs:
                todo.append(free)
            elif free in imports:
                node, alias = imports[free]
                root = (node.module or "" if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
                if isinstance(node, ast.ImportFrom) and node.level:
                    raise NotCaptured(f"{name} uses `{free}`, imported from a module beside the model file")
                if root not in ALLOWED_ROOTS:
                    raise NotCaptured(f"{name} uses `{free}` from {root}, outside the model file, torch and "
                                      "the standard library")
                used_imports[free] = (node, alias)
            else:
                raise NotCaptured(f"{name} uses `{free}`, which the model file does not define")
    import_lines = [_import_line(node, alias) for node, alias in used_imports.values()]
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body):
        import_lines.insert(0, "from __future__ import annotations")
    nodes = [n for n in tree.body if any(name in wanted for name in _defined(n))]
    parts = []
    for node in nodes:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        parts.append("\n".join(lines[first - 1:node.end_lineno]))
    body = "\n\n\n".join(parts)
    if cls.__name__ != "Model":
        if "Model" in wanted or "Model" in used_imports:
            raise NotCaptured(f"{cls.__name__} uses another class named Model")
        body = rename_identifier(body, cls.__name__, "Model")
    return sorted(dict.fromkeys(import_lines), key=_import_order), body


def _import_line(node: ast.stmt, alias: ast.alias) -> str:
    name = alias.name + (f" as {alias.asname}" if alias.asname else "")
    return f"from {node.module} import {name}" if isinstance(node, ast.ImportFrom) else f"import {name}"


def _import_order(line: str) -> tuple[int, str]:
    return (0 if line.startswith("from __future__") else 1 if line.startswith("import ") else 2, line)


def source_capture(path: str, module: torch.nn.Module) -> tuple[list[str], str, list]:
    """(imports, body, constructor arguments) of ``module`` by its source."""
    cls = type(module)
    if cls.__module__ != "kevin_model":
        raise NotCaptured(f"{cls.__name__} is defined in {cls.__module__}, not in the model file")
    init = ConstructorLog.arguments(module)
    imports, body = class_source(path, cls)
    if "import torch" not in imports:
        imports.insert(0 if not imports or not imports[0].startswith("from __future__") else 1, "import torch")
    return imports, body, init


__all__ = ["ConstructorLog", "ModelProblem", "NotCaptured", "source_capture"]
