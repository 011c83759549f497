"""A person's model file, read statically: the tool's own process never imports it.

Two conventions: ``get_model()`` (the ``nn.Module``, weights and all) with ``get_inputs()``; or
KernelBench's whole-model files, ``class Model`` with ``get_init_inputs()`` and ``get_inputs()``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pydantic import BaseModel

from ..errors import KevinError
from ..task import top_level_names


class ModelError(KevinError):
    """The model file, a module path in it, or its capture is not usable (exit 2)."""


class ModelFile(BaseModel):
    path: Path
    """Absolute path."""
    given: str
    """The path as the person wrote it."""
    convention: str
    """``get_model`` or ``kernelbench``."""

    @property
    def name(self) -> str:
        return self.path.name


def load_model_file(path: str | Path) -> ModelFile:
    """Check that ``path`` is a model file; raise ``ModelError`` naming what is missing."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelError(f"{p}: no such file" if not p.exists() else f"{p}: is not a file",
                         "pass the Python file that defines get_model() and get_inputs()")
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"{p}: cannot be read ({exc})") from None
    except SyntaxError as exc:
        raise ModelError(f"{p}: syntax error at line {exc.lineno}: {exc.msg}",
                         "the model file must be valid Python; run `python -m py_compile` on it") from None
    classes, functions = top_level_names(tree)
    if "get_model" in functions:
        convention = "get_model"
    elif "Model" in classes and "get_init_inputs" in functions:
        convention = "kernelbench"
    else:
        raise ModelError(f"{p}: defines neither get_model() nor a KernelBench-style Model with get_init_inputs()",
                         "define get_model() returning your nn.Module and get_inputs() returning its forward "
                         "inputs (a list)")
    if "get_inputs" not in functions:
        raise ModelError(f"{p}: missing get_inputs()", "define get_inputs() returning the forward inputs (a list)")
    return ModelFile(path=p.resolve(), given=str(path), convention=convention)
