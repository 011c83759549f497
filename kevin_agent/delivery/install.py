"""``kevin-opt install``: the change to the person's model file that puts a delivered kernel in.

The change is one import and one wrapped return in ``get_model()``::

    import mlp_block_act_kevin
    ...
    return mlp_block_act_kevin.install(MLPBlock(128, 512).eval())

It is shown as a diff; only ``--write`` writes it, and never into a file with uncommitted changes
(those are the person's) or a file whose ``get_model()`` has more than one return.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path

from ..model.marks import read_envelope
from ..model.modelfile import ModelError, ModelFile
from . import gitops


@dataclass
class Change:
    kernel: Path
    stem: str
    module: str
    new_text: str | None
    """The model file with the change (None where there is no get_model() to change)."""
    diff: str
    already: bool = False
    why_not: str = ""
    """Why the change cannot be written (shown beside the lines to add by hand)."""

    def usage(self) -> list[str]:
        """The lines a person adds where the model is built, when no diff can be made."""
        return [f"import {self.stem}", f"model = {self.stem}.install(model)   # model: your built model"]


def _return_of_get_model(tree: ast.Module) -> ast.Return | str:
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_model"), None)
    if fn is None:
        return "the model file has no get_model() to change"
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    nested = {id(r) for inner in ast.walk(fn) if inner is not fn
              and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for r in ast.walk(inner)}
    returns = [r for r in returns if id(r) not in nested]
    if len(returns) != 1:
        return f"get_model() has {len(returns)} return statements; the change needs exactly one"
    return returns[0]


def _import_line_index(tree: ast.Module) -> int:
    """The line (0-based) after the last top-level import, or after the module docstring."""
    last = 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            last = node.end_lineno
        elif last == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            last = node.end_lineno
    return last


def plan_change(model_file: ModelFile, kernel: Path) -> Change:
    env = read_envelope(kernel)
    if env is None:
        raise ModelError(f"{kernel}: is not a kernel module that installs itself",
                         "pass the *_kevin.py delivered by a run on a task that kevin-opt extract wrote")
    stem = kernel.stem
    text = model_file.path.read_text(encoding="utf-8")
    change = Change(kernel=kernel, stem=stem, module=env.module, new_text=None, diff="")
    if f"{stem}.install(" in text:
        change.already = True
        return change
    tree = ast.parse(text)
    ret = _return_of_get_model(tree)
    if isinstance(ret, str):
        change.why_not = ret
        return change
    lines = text.splitlines(keepends=True)
    value = ret.value
    head = "".join(lines[:value.lineno - 1]) + lines[value.lineno - 1][:_col(lines[value.lineno - 1], value.col_offset)]
    tail_line = lines[value.end_lineno - 1]
    end = _col(tail_line, value.end_col_offset)
    expr = ast.get_source_segment(text, value)
    tail = tail_line[end:] + "".join(lines[value.end_lineno:])
    new = head + f"{stem}.install({expr})" + tail
    new_lines = new.splitlines(keepends=True)
    at = _import_line_index(tree)
    new_lines.insert(at, f"import {stem}\n")
    change.new_text = "".join(new_lines)
    change.diff = "".join(difflib.unified_diff(lines, new_lines, fromfile=f"a/{model_file.name}",
                                               tofile=f"b/{model_file.name}"))
    if kernel.resolve().parent != model_file.path.parent:
        change.why_not = (f"{kernel.name} is not beside {model_file.name}: the import finds it only where "
                          "Python's path reaches it; move it there first")
    return change


def _col(line: str, byte_offset: int) -> int:
    """ast's column offsets count UTF-8 bytes; the character index they mean."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def write_change(model_file: ModelFile, change: Change) -> None:
    """Write the change into the model file; raise ``ModelError`` where it must not be written."""
    if change.already:
        return
    if change.new_text is None or change.why_not:
        raise ModelError(f"{model_file.given}: the change cannot be written: {change.why_not}",
                         "add the lines shown by hand where your model is built")
    with gitops.opened(model_file.path) as repo:
        modified = repo is not None and gitops.path_states(repo, [model_file.path])[model_file.path] == "modified"
    if modified:
        raise ModelError(f"{model_file.given}: has uncommitted changes; they are yours and stay untouched",
                         "commit or stash them, then run kevin-opt install --write again")
    model_file.path.write_text(change.new_text, encoding="utf-8")
