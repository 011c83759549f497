"""Load a person's task file into a ``Task``.

The file follows the KernelBench convention: ``class Model(nn.Module)``, ``get_inputs()``
and ``get_init_inputs()``. Loading here is static (AST only): the person's module is
imported for real only inside evaluation workers, so the tool's own process never runs
their code or touches the GPU. Whether the inputs actually build is probed by the
evaluator (``Evaluator.probe``) before the first turn.
"""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from pathlib import Path

from pydantic import BaseModel

from .errors import TaskError

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")


class TensorSpec(BaseModel):
    shape: list[int]
    dtype: str


class TaskProbe(BaseModel):
    """What building the task for real showed (filled in by the evaluator)."""

    inputs: list[TensorSpec | str]
    """Forward inputs: tensors as shape/dtype, anything else as its repr."""
    outputs: list[TensorSpec | str]
    init_inputs: list[str]


class Task(BaseModel):
    path: Path
    """Absolute path of the task file."""
    name: str
    """Short name (the file stem)."""
    class_name: str
    """The reference class in the file; shown to the model as ``Model``."""
    source: str
    """The file as written."""
    model_source: str
    """The source as the model sees it: the reference class renamed to ``Model``."""
    probe: TaskProbe | None = None

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


def _problem(path: Path, what: str, hint: str) -> TaskError:
    return TaskError(f"{path}: {what}", hint=hint)


def top_level_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The classes a file defines at its top level, and every other name it binds there: its
    functions, and (so that `get_inputs = make_inputs` counts) its assignments and imports."""
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            functions.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            functions.update((a.asname or a.name).split(".")[0] for a in node.names)
    return classes, functions


def load_task(path: str | Path, class_name: str = "Model") -> Task:
    """Read and statically validate a task file; raise ``TaskError`` naming what is wrong."""
    p = Path(path).expanduser()
    if not p.exists():
        raise _problem(p, "no such file", "pass the path of a Python file that defines your module")
    if p.is_dir():
        raise _problem(p, "is a directory, not a task file", "pass a .py file")
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _problem(p, f"cannot be read ({exc})", "check the file's permissions and encoding") from None
    try:
        tree = ast.parse(source, filename=str(p))
    except SyntaxError as exc:
        raise _problem(
            p,
            f"syntax error at line {exc.lineno}: {exc.msg}",
            "the task file must be valid Python; run `python -m py_compile` on it",
        ) from None

    classes, functions = top_level_names(tree)

    if class_name not in classes:
        found = ", ".join(sorted(classes)) or "none"
        hint = (
            f"name your class with --class NAME (classes found: {found})"
            if classes
            else "define `class Model(nn.Module)` with the forward pass to optimize"
        )
        raise _problem(p, f"no class named {class_name!r} (classes found: {found})", hint)
    missing = [f for f in REQUIRED_FUNCTIONS if f not in functions]
    if missing:
        raise _problem(
            p,
            "missing " + " and ".join(f"`{m}()`" for m in missing),
            "define get_inputs() returning the forward inputs and get_init_inputs() returning "
            "the constructor arguments (a list, possibly empty)",
        )
    if "ModelNew" in classes:
        raise _problem(
            p,
            "already defines `ModelNew`, the name kevin-opt gives the generated class",
            "rename that class or pass the reference file, not a generated one",
        )
    return Task(
        path=p.resolve(),
        name=p.stem,
        class_name=class_name,
        source=source,
        model_source=rename_identifier(source, class_name, "Model") if class_name != "Model" else source,
    )


def rename_identifier(source: str, old: str, new: str) -> str:
    """Rename a Python identifier token by token (strings and comments stay as written)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    out = [
        tok._replace(string=new) if tok.type == tokenize.NAME and tok.string == old else tok
        for tok in tokens
    ]
    return tokenize.untokenize(out)
