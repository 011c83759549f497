"""A light header for candidates' CUDA sources: the tensor API they use, not the C++ frontend.

``load_inline`` starts the ``.cu`` file with ``#include <torch/types.h>`` and candidates add
``<torch/extension.h>`` (often ``<ATen/cuda/CUDAContext.h>`` too); together they bring all of
ATen's operators, autograd, ``torch::nn``, ``torch::optim``, pybind11 and the CUDA libraries'
headers, which nvcc parses three times. The light header is ``ATen/core/Tensor.h``
(``torch::Tensor`` and its methods), ``ATen/Dispatch.h``, the tensor factories kernels call
(``torch::empty``, ``torch::zeros_like``, ...) and the ``torch`` namespace's own aliases
(``torch::kFloat32``, ...). A folder whose ``torch/types.h`` and ``torch/extension.h`` include
it, for nvcc only (``__CUDACC__``), goes on ``CPATH``; beside them a light
``ATen/cuda/CUDAContext.h`` (the CUDA context's functions and ``c10::cuda``'s streams and error
checks, without cuBLAS, cuSPARSE and cuSOLVER), and for each factory a light ``ATen/ops/<op>.h``
(the operator's declaration and its ``at::`` functions, without ``ATen/Context.h`` and the rest
the generated header pulls in).

It is generated from this PyTorch's own headers, so that what compiles means what it means
with the full headers:
- the ``at::`` functions and the factories are copied from ``ATen/ops/<op>.h`` and
  ``variable_factories.h`` (same overloads, same handling of ``requires_grad``), with
  ``autograd::make_variable`` reduced to what it does for a fresh tensor; the CUDA context's
  declarations are copied from ``CUDAContextLight.h``, less those that name a library's types;
- the factories left out, and the namespaces the full headers declare directly in ``torch``
  (``torch::cuda``, ``torch::nn``, ...), are declared as empty names here, so that using one fails
  (and the build runs again with the full headers) instead of reaching an ``at::`` namesake through
  ``torch``'s ``using namespace at``;
- a source that includes other ``torch/`` headers, or pybind11, is built plainly.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from .cache import FAST_PATH_VERSION as VERSION
from .headers import torch_include

FACTORIES = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "from_blob", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "eye", "linspace",
})
"""Factories the light header defines; the other ``torch::`` factories fail there."""

_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
_SHIMMED = {"torch/extension.h", "torch/types.h"}
_BLOCK = re.compile(r"^inline at::Tensor (\w+)\(.*?^\}$", re.MULTILINE | re.DOTALL)
_NAMESPACES = (re.compile(r"namespace\s+torch::(\w+)"), re.compile(r"namespace\s+torch\s*\{\s*namespace\s+(\w+)"))
_OWN_ERROR = r"/[\w/]+\.h(\(\d+\)|:\d+:\d+):? (fatal )?error"
"""An error inside one of the overlay's own headers (the overlay folder's path precedes it)."""
_INCLUDED_OP = re.compile(r"^#include <ATen/ops/(\w+)\.h>$", re.MULTILINE)


def refusal(cuda_sources: list[str]) -> str | None:
    """Why these CUDA sources are built with the full headers (None: the light one may do)."""
    text = "\n".join(cuda_sources)
    for name in _INCLUDE.findall(text):
        if name.startswith("torch/") and name not in _SHIMMED:
            return f"includes <{name}>"
        if name.startswith("pybind11") or name == "Python.h":
            return f"includes <{name}>"
    for word in ("PYBIND11_MODULE", "TORCH_LIBRARY"):
        if word in text:
            return f"uses {word}"
    return None


def _include_root() -> Path:
    return torch_include()


def header_text(root: Path) -> str:
    """The light header for the PyTorch whose headers are under ``root``."""
    factories = (root / "torch/csrc/autograd/generated/variable_factories.h").read_text()
    types = (root / "torch/csrc/api/include/torch/types.h").read_text()
    start, end = types.index("namespace torch {"), types.index("} // namespace torch")
    torch_block = types[start:end + len("} // namespace torch")]

    blocks: dict[str, list[str]] = {}
    for m in _BLOCK.finditer(factories):
        blocks.setdefault(m.group(1), []).append(m.group(0))
    kept, ops, left_out = [], [], []
    for name, bodies in sorted(blocks.items()):
        op = name.removesuffix("_symint")
        usable = all("autograd::make_variable(" in b and "detail::" not in b for b in bodies)
        if op in FACTORIES and usable and (root / "ATen/ops" / f"{op}.h").is_file():
            kept += [b.replace("autograd::make_variable(", "kevin_light::make_variable(") for b in bodies]
            ops.append(op)
        else:
            left_out.append(name)
    usings = [ln for ln in factories.splitlines() if ln.startswith("using ")]

    namespaces: set[str] = set()
    for path in (root / "torch").rglob("*.h"):
        text = path.read_text(errors="replace")
        if "namespace torch" in text:
            for pattern in _NAMESPACES:
                namespaces.update(pattern.findall(text))
    namespaces.discard("kevin_light")

    lines = [
        f"// Generated by kevin-opt (kevin_agent/evaluate/toolchain/light.py, version {VERSION}) from this PyTorch's headers.",
        "#pragma once",
        "#include <functional>",
        "#include <ATen/core/Tensor.h>",
        "#include <ATen/Dispatch.h>",
        "#include <ATen/TracerMode.h>",
        "#include <ATen/core/LegacyTypeDispatch.h>",
        *[f"#include <ATen/ops/{op}.h>" for op in sorted(set(ops))],
        "",
        "namespace torch::kevin_light {",
        "// autograd::make_variable of a tensor nothing else refers to yet.",
        "inline at::Tensor make_variable(at::Tensor data, bool requires_grad) {",
        "  if (requires_grad) data.set_requires_grad(true);",
        "  return data;",
        "}",
        "} // namespace torch::kevin_light",
        "",
        "namespace torch {",
        *usings,
        *kept,
        "} // namespace torch",
        "",
        torch_block,
        "",
        "// Declared directly in torch by the full headers: here only names, so that a use fails",
        "// rather than finding an at:: namesake through `using namespace at`.",
        "namespace torch {",
        *[f"namespace {n} {{}}" for n in sorted(namespaces)],
        *[f"struct {n};" for n in left_out],
        "} // namespace torch",
        "",
    ]
    return "\n".join(lines)


def ops_text(root: Path, op: str) -> str | None:
    """A light ``ATen/ops/<op>.h`` for nvcc: the operator's declaration (``<op>_ops.h``) and the
    ``at::`` functions of the generated header, copied, without its other includes. None when the
    header is not a generated one (it includes no ``_ops.h``: it is light already)."""
    real = (root / "ATen/ops" / f"{op}.h").read_text()
    marker = f"#include <ATen/ops/{op}_ops.h>"
    if marker not in real or "#else" not in real:
        return None
    body = real[real.index(marker) + len(marker):real.rindex("#else")]
    return (f"#pragma once\n#if defined(__CUDACC__)\n#include <ATen/core/Tensor.h>\n{marker}\n{body}"
            f"\n#else\n#include_next <ATen/ops/{op}.h>\n#endif\n")


_LIBRARY_TYPES = re.compile(r"cusparse|cublas|cusolver|cudss|Workspace|USE_CUDSS|USE_ROCM", re.IGNORECASE)


def cuda_context_text(root: Path) -> str:
    """A light ``ATen/cuda/CUDAContext.h`` for nvcc: the declarations of ``CUDAContextLight.h`` that
    name no CUDA library's types, and the headers the real one includes for streams and errors."""
    real = (root / "ATen/cuda/CUDAContextLight.h").read_text()
    start = real.index("namespace at::cuda {")
    end = real.index("} // namespace at::cuda", start)
    kept, skipping = [], 0
    for line in real[start:end].splitlines()[1:]:
        if skipping:  # the rest of a struct that holds a library's workspaces
            skipping += line.count("{") - line.count("}")
            continue
        if line.startswith("struct ") and _LIBRARY_TYPES.search(line):
            skipping = line.count("{") - line.count("}")
            continue
        if line.startswith("#") or _LIBRARY_TYPES.search(line):
            continue
        kept.append(line)
    return "\n".join([
        "#pragma once",
        "#if defined(__CUDACC__)",
        "#include <cstdint>",
        "#include <cuda_runtime_api.h>",
        "#include <c10/core/Allocator.h>",
        "#include <c10/cuda/CUDAFunctions.h>",
        "#include <c10/cuda/CUDAStream.h>",
        "#include <c10/cuda/CUDAException.h>",
        "#include <c10/util/Logging.h>",
        "namespace at::cuda {",
        *kept,
        "} // namespace at::cuda",
        "#else",
        "#include_next <ATen/cuda/CUDAContext.h>",
        "#endif",
        "",
    ])


def _shim(name: str) -> str:
    return (f"#pragma once\n#if defined(__CUDACC__)\n#include \"../kevin_light.h\"\n"
            f"#else\n#include_next <torch/{name}.h>\n#endif\n")


def overlay(shared: Path) -> Path | None:
    """The include folder with the light header for this PyTorch (made on first use); None
    when it cannot be made or a build found it broken."""
    root = _include_root()
    sources = [root / "torch/csrc/autograd/generated/variable_factories.h",
               root / "torch/csrc/api/include/torch/types.h", root / "ATen/cuda/CUDAContextLight.h"]
    identity = f"{VERSION}|{root}|" + "|".join(str(p.stat().st_mtime_ns) for p in sources)
    folder = shared / f"light-{hashlib.sha256(identity.encode()).hexdigest()[:20]}"
    if (folder / "broken.log").is_file():
        return None
    if (folder / "kevin_light.h").is_file():
        return folder
    tmp = shared / f".{folder.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "torch").mkdir(parents=True)
    (tmp / "ATen" / "ops").mkdir(parents=True)
    (tmp / "ATen" / "cuda").mkdir(parents=True)
    text = header_text(root)
    (tmp / "kevin_light.h").write_text(text)
    for name in ("extension", "types"):
        (tmp / "torch" / f"{name}.h").write_text(_shim(name))
    for op in _INCLUDED_OP.findall(text):
        if (light_op := ops_text(root, op)) is not None:
            (tmp / "ATen" / "ops" / f"{op}.h").write_text(light_op)
    (tmp / "ATen" / "cuda" / "CUDAContext.h").write_text(cuda_context_text(root))
    try:
        os.rename(tmp, folder)
    except OSError:  # made meanwhile by another build
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def note_failure(log: str, shared: Path) -> None:
    """A build whose errors are in the light headers themselves marks them broken for good."""
    for folder in shared.glob("light-*"):
        if re.search(re.escape(str(folder)) + _OWN_ERROR, log):
            (folder / "broken.log").write_text(log[-20000:])
