"""Trim compiler output and crash logs to what a person (or the model) needs to read."""

from __future__ import annotations

import re

_ERROR_LINE = re.compile(r"(\berror\b|undefined reference|fatal)", re.IGNORECASE)
_COMMAND_LINE = re.compile(r"^\s*(\[\d+/\d+\]\s)?(/\S*/)?(c\+\+|g\+\+|gcc|clang\+\+|nvcc|ninja)\b")


def tail(text: str, lines: int = 20, chars: int = 2000) -> str:
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out[-chars:]


def trim_compile_error(log: str, build_dir: str | None = None, max_errors: int = 5,
                       context: int = 3, chars: int = 2500) -> str:
    """The first compiler errors with a few lines of context each, not the whole log."""
    if build_dir:
        log = log.replace(build_dir.rstrip("/") + "/", "")
    lines = [ln for ln in log.splitlines() if not _COMMAND_LINE.match(ln) and len(ln) < 2000]
    picked: list[str] = []
    errors = 0
    i = 0
    while i < len(lines) and errors < max_errors:
        line = lines[i]
        if _ERROR_LINE.search(line) and not line.startswith("FAILED:") and "Error building" not in line:
            errors += 1
            picked.extend(lines[i : i + 1 + context])
            i += 1 + context
            continue
        i += 1
    text = "\n".join(picked) if picked else tail("\n".join(lines), 30)
    return text[:chars]
