"""What a module instance computes, as a digest: two instances with the same digest (and called
at the same signatures) are one group (``model.groups``).

The digest covers, for the instance and every submodule under it: its path below the instance,
its class by name and by source (a class of the same name written differently is another
computation), its mode, and its settings, the plain values it holds (``eps``, ``in_features``,
a function it calls through an attribute, by its code); then every parameter's and buffer's
name, shape, dtype and device. Not the values of the weights: each member runs the kernel on
its own.
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


def _settings(module: torch.nn.Module) -> str:
    found = []
    for key, value in sorted(vars(module).items()):
        if key.startswith("_") or key == "training":
            continue
        text = _plain(value)
        if text is not None:
            found.append(f"{key}={text}")
    return ", ".join(found)


def identity(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, sub in module.named_modules():
        h.update(f"{name}|{_class_digest(type(sub))}|{sub.training}|{_settings(sub)}\n".encode())
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        h.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|{tensor.device.type}\n".encode())
    return h.hexdigest()[:20]
