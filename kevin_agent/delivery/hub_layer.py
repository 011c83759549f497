"""The delivered kernel offered as a Hugging Face ``kernels`` layer, for a module whose class is one
(transformers marks such classes ``@use_kernel_forward_from_hub("RMSNorm")``): a local layer
repository beside the kernel module, ``<stem>_layer/build/torch-universal/``, whose layer's
``forward`` calls the kernel module's ``layer_forward``, so that ``kernelize(model, ...)`` under the
mapping ``mapping_lines`` writes swaps every such layer's forward for the kernel, checked as an
installed kernel is (``model/worker/guard.py``: the module's own parameters, the original forward
outside the verified envelope).

The repository is plain files: kevin-opt never imports ``kernels``, and the layer needs torch, the
kernel module beside it, and ``kernels`` to be loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..model.records import InstallEnvelope

VARIANT = Path("build") / "torch-universal"


def layer_folder(kernel_path: Path) -> Path:
    """The repository's folder: ``<stem>_layer`` beside the kernel module (``mapping_lines`` names it)."""
    return kernel_path.with_name(f"{kernel_path.stem}_layer")


def layer_files(kernel_path: Path) -> list[Path]:
    variant = layer_folder(kernel_path) / VARIANT
    return [variant / "__init__.py", variant / "layers.py", variant / "metadata.json"]


def _forward_def(parameters: list[str]) -> tuple[str, str]:
    """The layer's ``def forward(...)`` parameters, and the call that hands them on: by position where
    they are always given (the guard's quick path), else by name; one left at its default is not
    passed, so the original's default applies."""
    params, positional, keywords, star, stars = ["self"], [], [], "", ""
    keyword_only = False
    for p in parameters:
        if p in ("*", "/"):
            params.append(p)
            keyword_only = keyword_only or p == "*"
        elif p.startswith("**"):
            params.append(p)
            stars = p[2:]
        elif p.startswith("*"):
            params.append(p)
            star, keyword_only = p[1:], True
        else:
            name = p.rstrip("=")
            params.append(f"{name}=_UNSET" if p.endswith("=") else name)
            by_position = "/" in parameters[parameters.index(p):] or not (keyword_only or p.endswith("="))
            (positional if by_position else keywords).append(name)
    if all(p.isidentifier() for p in parameters):  # every argument always given, by position: no sorting
        return ", ".join(params), f"_kernel().layer_forward({', '.join(['self', *positional])})"
    call = ["self", f"({', '.join(positional)}{',' if len(positional) == 1 else ''})",
            "{" + ", ".join(f"{n!r}: {n}" for n in keywords) + "}", star or "()", stars or "{}"]
    return ", ".join(params), f"_run({', '.join(call)})"


def render_layers(env: InstallEnvelope, stem: str) -> str:
    signature, call = _forward_def(env.layer_parameters)
    return f'''"""A Hugging Face ``kernels`` layer written by kevin-opt: `{env.layer_name}` ({env.class_name}) running the
kernel of {stem}.py (beside this repository's folder) where it was verified, the class's own forward
elsewhere. It holds no state: the kernel runs on the module's own parameters."""

import importlib.util
import sys
from pathlib import Path

import torch

_KERNEL_FILE = Path(__file__).resolve().parents[3] / "{stem}.py"
_UNSET = object()


_LOADED = []


def _kernel_module():
    """The kernel module beside the repository (the one already imported where it is that file),
    found on the first call."""
    if _LOADED:
        return _LOADED[0]
    for name in ("{stem}", "_kevin_layer_{stem}"):
        module = sys.modules.get(name)
        if module is not None and Path(getattr(module, "__file__", "") or "").resolve() == _KERNEL_FILE:
            break
    else:
        spec = importlib.util.spec_from_file_location("_kevin_layer_{stem}", _KERNEL_FILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    _LOADED.append(module)
    return module


def _kernel():
    return _LOADED[0] if _LOADED else _kernel_module()


def _run(module, positional, keywords, star, stars):
    given = {{k: v for k, v in keywords.items() if v is not _UNSET}}
    args = [v for v in positional if v is not _UNSET]
    return _kernel().layer_forward(module, *args, *star, **given, **stars)


class {env.layer_name}(torch.nn.Module):
    def forward({signature}):
        return {call}
'''


def mapping_lines(stem: str, env: InstallEnvelope) -> list[str]:
    """How a person runs the kernel of the module ``stem`` through ``kernels``' ``kernelize``."""
    folder = f"{stem}_layer"
    return [
        f"{folder}/ beside {stem}.py is a local Hugging Face kernels layer repository (kernels>=0.17): its",
        f"`{env.layer_name}` layer runs the kernel in every {env.class_name}'s forward where it was verified, the",
        "original forward elsewhere:",
        "",
        "    from pathlib import Path",
        "    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping",
        f"    import {stem}  # builds nothing",
        f"    folder = Path({stem}.__file__).with_name({folder!r})",
        f"    layer = LocalLayerRepository(repo_path=folder, layer_name={env.layer_name!r})",
        f"    with use_kernel_mapping({{{env.layer_name!r}: {{{env.device!r}: layer}}}}):",
        f"        model = kernelize(model, mode=Mode.INFERENCE, device={env.device!r})",
        "",
        "Where transformers leaves its kernels hook off (it pins one kernels version), first",
        f"kernels.replace_kernel_forward_from_hub({env.class_name}, {env.layer_name!r}).",
    ]


def write_layer(kernel_path: Path, env: InstallEnvelope) -> list[Path]:
    """The layer repository beside ``kernel_path`` for a kernel whose class is a ``kernels`` layer;
    returns the files written (none for any other kernel)."""
    if not env.layer_name:
        return []
    init, layers, metadata = layer_files(kernel_path)
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text("from . import layers\n\n__all__ = [\"layers\"]\n", encoding="utf-8")
    layers.write_text(render_layers(env, kernel_path.stem), encoding="utf-8")
    name = f"{kernel_path.stem}-layer".replace("_", "-")
    metadata.write_text(json.dumps({"id": name, "name": name, "version": 1, "license": "Apache-2.0",
                                    "python-depends": [], "backend": {"type": env.device}}, indent=2) + "\n",
                        encoding="utf-8")
    return [init, layers, metadata]
