"""The person's model file inside a worker: import it, build the model and its inputs on the
device, run it. Every failure becomes a ``ModelProblem`` naming the file's own line."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...config import EvalSettings
from ...evaluate.memory import is_out_of_memory, requested_bytes
from ...evaluate.worker import describe, import_file, to_device
from ...formatting import gib


class ModelProblem(Exception):
    """The model cannot be profiled, extracted from or run; ``kind`` is ``ModelReply.error_kind``."""

    def __init__(self, kind: str, message: str, hint: str = "", paths: list[str] | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.hint, self.paths = kind, message, hint, paths or []


@dataclass
class LoadedModel:
    module: object
    """The imported model file."""
    model: torch.nn.Module
    inputs: list
    """Positional arguments of the forward."""
    path: str
    device: str
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the forward (``get_inputs()`` returned a dict: ``model(input_ids=...)``)."""

    def call(self, model=None):
        """One call of ``model`` (the model itself by default) on the inputs, as the person calls it."""
        return (self.model if model is None else model)(*self.inputs, **self.kwargs)

    def tensors(self) -> list:
        return [*self.inputs, *self.kwargs.values()]


def _fit_problem(exc: BaseException, path: str, device: str) -> ModelProblem:
    lines = describe(exc, path).splitlines()
    asked = requested_bytes(str(exc))
    what = f"it asked for {gib(asked)} more" if asked else lines[-1][:300]
    where = f" ({lines[0].rstrip(':')})" if len(lines) > 1 else ""
    return ModelProblem("fit", f"the model does not fit on {device}: {what}{where}",
                        "make it smaller (get_model() or get_inputs()), or pick another --device")


def _call(path: str, device: str, what: str, fn):
    try:
        return fn()
    except ModelProblem:
        raise
    except Exception as exc:
        if is_out_of_memory(str(exc), type(exc).__name__):
            raise _fit_problem(exc, path, device) from None
        raise ModelProblem("model", f"{what} failed: {describe(exc, path)}") from None


def import_model_file(path: str):
    sys.path.insert(0, str(Path(path).parent))
    return _call(path, "cpu", "importing the model file", lambda: import_file(path, "kevin_model"))


def _factory(module, name: str, path: str, device: str, *, keywords: bool = False):
    values = _call(path, device, f"{name}()", getattr(module, name))
    if keywords and isinstance(values, dict):
        if not all(isinstance(k, str) for k in values):
            raise ModelProblem("model", f"{name}() returned a dict whose keys are not all argument names")
        return dict(values)
    if not isinstance(values, (list, tuple)):
        what = "a list (the forward's arguments in order) or a dict (its keyword arguments)" if keywords else "a list"
        raise ModelProblem("model", f"{name}() must return {what}, got {type(values).__name__}")
    return list(values)


def build_model(module, path: str, settings: EvalSettings) -> LoadedModel:
    """The model (``get_model()``, or ``Model(*get_init_inputs())``) and ``get_inputs()``, each made
    under the seed, on the device."""
    device = settings.device
    torch.manual_seed(settings.seed)
    if hasattr(module, "get_model"):
        model = _call(path, device, "get_model()", module.get_model)
    else:
        init = _factory(module, "get_init_inputs", path, device)
        model = _call(path, device, "building Model", lambda: module.Model(*init))
    if not isinstance(model, torch.nn.Module):
        raise ModelProblem("model", f"get_model() must return an nn.Module, got {type(model).__name__}")
    torch.manual_seed(settings.seed)
    given = _factory(module, "get_inputs", path, device, keywords=True)
    inputs, kwargs = ([], given) if isinstance(given, dict) else (given, {})
    model = _call(path, device, f"moving the model to {device}", lambda: model.to(device))
    inputs = _call(path, device, f"moving the inputs to {device}", lambda: to_device(inputs, device))
    kwargs = _call(path, device, f"moving the inputs to {device}",
                   lambda: {k: to_device(v, device) for k, v in kwargs.items()})
    return LoadedModel(module=module, model=model, inputs=inputs, path=path, device=device, kwargs=kwargs)


def forward(loaded: LoadedModel):
    """One forward, without autograd."""
    with torch.no_grad():
        return _call(loaded.path, loaded.device, "the model's forward", loaded.call)


def load(settings: EvalSettings, path: str) -> LoadedModel:
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise ModelProblem("environment", "no CUDA GPU is visible to torch", "pass --device cpu")
    return build_model(import_model_file(path), path, settings)
