"""``kevin-opt install``: the change to the person's model file that puts delivered kernels in.

For a ``get_model()`` file the change is an import of the kernel modules and the returned model
wrapped in each module's ``install``::

    if __package__:  # imported as part of a package: the kernel modules are beside it in the package
        from . import mlp_block_act_kevin
    else:  # run as a script, or imported from its own folder
        import mlp_block_act_kevin
    ...
    return mlp_block_act_kevin.install(MLPBlock(128, 512).eval())

The import works both ways a model file is used (``python model.py`` and ``import pkg.model``), and
builds nothing: a kernel module builds its kernel on the kernel's first call.

A KernelBench-format file (``class Model``, ``get_init_inputs()``, no ``get_model()``) is built by
whoever imports it (KernelBench's harness: ``Model(*get_init_inputs())``), so the change is a block
appended at its end: the kernel modules imported, the original class kept as
``KevinOriginalModel``, and ``Model`` bound to a subclass that installs every kernel when it is
built. Adding kernels later rewrites that block with all of them.

It is shown as a diff; only ``--write`` writes it, and never into a file with uncommitted changes
(those are the person's) unless ``--replace`` is given, nor into a file whose ``get_model()`` has
more than one return.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..model.groups import group_name
from ..model.marks import read_envelope
from ..model.modelfile import ModelError, ModelFile
from . import gitops

BLOCK_START = "# --- kevin-opt: the kernels installed into Model "
BLOCK_END = "# --- end of the kernels kevin-opt installed ---"
ORIGINAL = "KevinOriginalModel"


@dataclass
class Change:
    kernels: list[Path]
    stems: list[str]
    """The kernel modules' import names, in the order given."""
    modules: list[str]
    """What each goes into (a group's name for a kernel installed at several modules)."""
    new_text: str | None
    """The model file with the change (None where there is nothing to change, or no way to)."""
    diff: str
    already: list[str] = field(default_factory=list)
    """The stems the model file installs already."""
    why_not: str = ""
    """Why the change cannot be written (shown beside the lines to add by hand)."""

    @property
    def stem(self) -> str:
        return ", ".join(self.stems)

    @property
    def module(self) -> str:
        return ", ".join(self.modules)

    @property
    def done(self) -> bool:
        """Every kernel is installed by the file already."""
        return len(self.already) == len(self.stems)

    def usage(self) -> list[str]:
        """The lines a person adds where the model is built, when no diff can be made."""
        lines = import_lines(self.stems)
        return lines + [f"model = {stem}.install(model)   # model: your built model" for stem in self.stems]


def import_lines(stems: list[str], *, indent: str = "", noqa: bool = False) -> list[str]:
    """The import of the kernel modules beside the model file, that works where the file is run as a
    script or imported from its folder (a bare import) and where it is imported as part of a
    package (a relative one)."""
    tag = "  # noqa: E402" if noqa else ""
    return [f"{indent}if __package__:  # imported as part of a package: the kernel modules are beside it there",
            f"{indent}    from . import {', '.join(stems)}{tag}",
            f"{indent}else:  # run as a script, or imported from its own folder",
            *[f"{indent}    import {stem}{tag}" for stem in stems]]


_IMPORTED = re.compile(r"^\s*import (\w+)")


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


def _envelopes(kernels: list[Path]):
    envs = []
    for kernel in kernels:
        env = read_envelope(kernel)
        if env is None:
            raise ModelError(f"{kernel}: is not a kernel module that installs itself",
                             "pass the *_kevin.py delivered by a run on a task that kevin-opt extract wrote")
        envs.append(env)
    stems = [k.stem for k in kernels]
    twice = next((s for s in stems if stems.count(s) > 1), None)
    if twice:
        raise ModelError(f"{twice}: given twice", "pass each kernel module once")
    return envs


def plan_change(model_file: ModelFile, kernels: Path | list[Path]) -> Change:
    kernels = [kernels] if isinstance(kernels, Path) else list(kernels)
    envs = _envelopes(kernels)
    text = model_file.path.read_text(encoding="utf-8")
    stems = [k.stem for k in kernels]
    change = Change(kernels=kernels, stems=stems, modules=[group_name(e.paths) for e in envs], new_text=None,
                    diff="", already=[s for s in stems if f"{s}.install(" in text])
    if change.done:
        return change
    tree = ast.parse(text)
    if model_file.convention == "kernelbench":
        new = _kernelbench_text(text, [s for s in stems if s not in change.already])
    else:
        ret = _return_of_get_model(tree)
        if isinstance(ret, str):
            change.why_not = ret
            return change
        new = _get_model_text(text, tree, ret, [s for s in stems if s not in change.already])
    lines = text.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    change.new_text = new
    change.diff = "".join(difflib.unified_diff(lines, new_lines, fromfile=f"a/{model_file.name}",
                                               tofile=f"b/{model_file.name}"))
    away = [k.name for k in kernels if k.resolve().parent != model_file.path.parent]
    if away:
        change.why_not = (f"{', '.join(away)} {'is' if len(away) == 1 else 'are'} not beside {model_file.name}: the "
                          "import finds a kernel module only where Python's path reaches it; move it there first")
    return change


def _get_model_text(text: str, tree: ast.Module, ret: ast.Return, stems: list[str]) -> str:
    """The file with ``import`` lines for ``stems`` and get_model()'s return wrapped in their installs."""
    lines = text.splitlines(keepends=True)
    value = ret.value
    head = "".join(lines[:value.lineno - 1]) + lines[value.lineno - 1][:_col(lines[value.lineno - 1], value.col_offset)]
    tail_line = lines[value.end_lineno - 1]
    end = _col(tail_line, value.end_col_offset)
    expr = ast.get_source_segment(text, value)
    tail = tail_line[end:] + "".join(lines[value.end_lineno:])
    for stem in stems:
        expr = f"{stem}.install({expr})"
    new_lines = (head + expr + tail).splitlines(keepends=True)
    at = _import_line_index(tree)
    new_lines[at:at] = [ln + "\n" for ln in import_lines(stems)]
    return "".join(new_lines)


def _kernelbench_text(text: str, stems: list[str]) -> str:
    """The file with the installation block at its end, or, where the file has one already, that
    block written again in its place with its kernels and ``stems``."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith(BLOCK_START)), None)
    if start is None:
        return "".join(lines).rstrip("\n") + "\n\n\n" + _block(stems)
    end = next((i for i, ln in enumerate(lines) if i > start and ln.startswith(BLOCK_END)), len(lines) - 1)
    before = list(dict.fromkeys(m[1] for ln in lines[start:end] if (m := _IMPORTED.match(ln))))
    return "".join(lines[:start]) + _block(before + [s for s in stems if s not in before]) + "".join(lines[end + 1:])


def _block(stems: list[str]) -> str:
    installs = "".join(f"        {stem}.install(self)\n" for stem in stems)
    return (
        BLOCK_START + "-" * max(0, 99 - len(BLOCK_START)) + "\n"
        "# Model is the original class with these kernels installed when it is built, each guarded to the\n"
        "# signatures it was verified at, so that Model(*get_init_inputs()) runs them; the original class\n"
        f"# is {ORIGINAL}. `kevin-opt install` writes this block again when kernels are added.\n"
        + "".join(ln + "\n" for ln in import_lines(stems, noqa=True))
        + f"\n{ORIGINAL} = Model\n\n\n"
        f"class Model({ORIGINAL}):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        super().__init__(*args, **kwargs)\n"
        + installs
        + BLOCK_END + "\n"
    )


def _col(line: str, byte_offset: int) -> int:
    """ast's column offsets count UTF-8 bytes; the character index they mean."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def write_change(model_file: ModelFile, change: Change, *, replace: bool = False, to: Path | None = None) -> None:
    """Write the change into the model file (or into ``to``, a new file beside it: ``delivery.original``);
    raise ``ModelError`` where it must not be written."""
    if change.done:
        return
    if change.new_text is None or change.why_not:
        raise ModelError(f"{model_file.given}: the change cannot be written: {change.why_not}",
                         "add the lines shown by hand where your model is built")
    with gitops.opened(model_file.path) as repo:
        modified = repo is not None and gitops.path_states(repo, [model_file.path])[model_file.path] == "modified"
    if modified and not replace:
        raise ModelError(f"{model_file.given}: has uncommitted changes; they are yours and stay untouched",
                         "commit or stash them, then run kevin-opt install --write again (or pass --replace to "
                         "write the change into the file as it is now)")
    (to or model_file.path).write_text(change.new_text, encoding="utf-8")
