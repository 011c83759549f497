"""What a module instance computes, as a digest: two instances with the same digest (and called
at the same signatures) are one group (``model.groups``).

The digest covers, for the instance and every submodule under it: its path below the instance,
its class by name and by source (a class of the same name written differently is another
computation), its mode, and its settings, the plain values it holds (``eps``, ``in_features``,
a function it calls through an attribute, by its code); then every parameter's and buffer's
name, shape, dtype and device. Not the values of the weights: each member runs the kernel on
its own. Only the settings the recorded forward read count (``Reads``): each ``LlamaAttention``
holds its own ``layer_idx``, which its forward reads only with a cache, so without one every
layer's attention is one computation.
"""

from __future__ import annotations

import hashlib
import inspect
import types
from functools import lru_cache

import torch

PLAIN = (bool, int, float, str, type(None), torch.dtype)


@lru_cache(maxsize=None)
def _class_digest(cls: type) -> str:
    """The class and its bases up to ``nn.Module`` (torch's own by name alone): each one's source
    and its methods' compiled code (a class defined twice under one name has one source that
    ``inspect`` finds, but each definition's own code)."""
    parts = []
    for klass in cls.__mro__:
        if klass in (torch.nn.Module, object):
            break
        name = f"{klass.__module__}.{klass.__qualname__}"
        if klass.__module__.startswith("torch."):
            parts.append(name)
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            source = ""
        methods = [f"{key} {_code_digest(fn.__code__)}" for key, fn in sorted(vars(klass).items())
                   if isinstance(fn, types.FunctionType)]
        parts.append("\n".join([name, source, *methods]))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _code_digest(code: types.CodeType) -> str:
    consts = [_code_digest(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return hashlib.sha256(code.co_code + repr((consts, code.co_names)).encode()).hexdigest()


def _plain(value) -> str | None:
    """A setting's text, or None for what is not a setting (tensors, modules, objects)."""
    if isinstance(value, PLAIN):
        return repr(value)
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return None if any(i is None for i in items) else f"{type(value).__name__}({', '.join(items)})"
    if isinstance(value, types.FunctionType):
        return f"function {value.__qualname__} {_code_digest(value.__code__)}"
    return None


_TRACING: dict[type, type] = {}
_ACTIVE: list[dict[int, set[str]]] = []
"""The reads being noted (the innermost ``Reads`` block's), per module id."""


def _tracing(cls: type) -> type:
    """``cls`` with every read of an instance attribute noted while a ``Reads`` block is open."""
    if cls not in _TRACING:
        get = cls.__getattribute__

        def __getattribute__(obj, name):
            if name[0] != "_" and _ACTIVE:
                mine = _ACTIVE[-1].get(id(obj))
                if mine is not None and name in object.__getattribute__(obj, "__dict__"):
                    mine.add(name)
            return get(obj, name)

        _TRACING[cls] = type(cls.__name__, (cls,), {"__getattribute__": __getattribute__,
                                                     "__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return _TRACING[cls]


class Reads:
    """Within the block, which of its own attributes each module's code reads (by the module's
    ``id``): every module's class is swapped for a subclass that notes each read of an attribute
    in the instance's ``__dict__``, and swapped back on exit. A module whose class cannot be
    swapped is not in ``read`` (every setting of it counts)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.modules = list({id(m): m for m in model.modules()}.values())
        self.read: dict[int, set[str]] = {}
        self._swapped: list[tuple[torch.nn.Module, type]] = []

    def __enter__(self) -> Reads:
        for module in self.modules:
            cls = type(module)
            try:
                module.__class__ = _tracing(cls)
            except TypeError:
                continue
            self.read[id(module)] = set()
            self._swapped.append((module, cls))
        _ACTIVE.append(self.read)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self.read)
        for module, cls in self._swapped:
            module.__class__ = cls


def _settings(module: torch.nn.Module, read: set[str] | None = None) -> str:
    found = []
    for key, value in sorted(vars(module).items()):
        if key.startswith("_") or key == "training" or (read is not None and key not in read):
            continue
        text = _plain(value)
        if text is not None:
            found.append(f"{key}={text}")
    return ", ".join(found)


def identity(module: torch.nn.Module, reads: Reads | None = None) -> str:
    """The module's digest; with ``reads``, only the settings its recorded forward read count."""
    h = hashlib.sha256()
    for name, sub in module.named_modules():
        read = reads.read.get(id(sub)) if reads is not None else None
        h.update(f"{name}|{_class_digest(type(sub))}|{sub.training}|{_settings(sub, read)}\n".encode())
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        h.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|{tensor.device.type}\n".encode())
    return h.hexdigest()[:20]
