"""The delivered module of a Triton kernel: what its header says differently from a CUDA one.

The module itself is written as every kernel module is (``kernel_module``): the header, the claim,
the verified source unchanged, and for a task extracted from a model the code that installs it. A
Triton source needs no compiler at import: its kernels compile at their first launch, for the
argument types and constants of that launch, and Triton caches them; the module needs torch and
triton alone. This module only rewrites the header's paragraph on how the kernel is built.
"""

from __future__ import annotations

from ..results import RunInfo

_BUILD_OPENING = "The inline kernel is compiled on first import"


def triton_build_note(device: str) -> list[str]:
    where = ("a GPU that Triton supports (NVIDIA or AMD)" if device == "cuda"
             else "Triton's interpreter (TRITON_INTERPRET=1) on the CPU, as it was verified")
    return [
        "The Triton kernels are compiled at their first call (@triton.jit, for the argument types and",
        "constants of that call; @triton.autotune tunes its configs then) and cached by Triton afterwards.",
        f"The module needs torch and triton alone, and runs on {where}.",
    ]


def triton_lines(lines: list[str], info: RunInfo) -> list[str]:
    """``lines`` (a kernel module's header) with the build paragraph said for Triton: the paragraph
    from its load_inline sentence to the next blank line, where it is; added after them otherwise."""
    start = next((i for i, line in enumerate(lines) if line.startswith(_BUILD_OPENING)), None)
    if start is None:
        return [*lines, "", *triton_build_note(info.device)]
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    # The paragraph's last sentence (verified shapes) still holds: keep what follows "It was verified".
    paragraph = " ".join(lines[start:end])
    kept = paragraph[paragraph.find("It was verified"):] if "It was verified" in paragraph else ""
    return [*lines[:start], *triton_build_note(info.device), *([kept] if kept else []), *lines[end:]]
