"""Where the installed PyTorch keeps its headers, and ``load_inline``'s list-or-string arguments:
what the precompiled and the light header are both made from."""

from __future__ import annotations

from pathlib import Path


def torch_include() -> Path:
    import torch

    return Path(torch.__file__).parent / "include"


def as_list(value) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)
