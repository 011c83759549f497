"""What the command line and the terminal UI print on stderr, written once for both: errors
with their hints, and whether to open the terminal UI at all."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from .errors import KevinError

if TYPE_CHECKING:
    from pydantic import BaseModel


def print_error(exc: KevinError, stream: TextIO | None = None) -> int:
    """``kevin-opt: error: ...`` and its hint; returns the error's exit code."""
    out = stream or sys.stderr
    print(f"kevin-opt: error: {exc.message}", file=out)
    if exc.hint:
        print(f"  hint: {exc.hint}", file=out)
    return exc.exit_code


def note(text: str, stream: TextIO | None = None) -> None:
    print(f"kevin-opt: {text}", file=stream or sys.stderr, flush=True)


def interactive(args) -> bool:
    """Open the terminal UI: a terminal on both ends, not --headless, not CI."""
    if getattr(args, "headless", False):
        return False
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        return False
    return sys.stdout.isatty() and sys.stdin.isatty()


def write_json(path: Path, record: BaseModel) -> None:
    """A ``--json`` file: one of ``results.records``' records, through its one serializer."""
    from .results.records import to_json

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_json(record), encoding="utf-8")
    except OSError as exc:
        raise KevinError(f"cannot write {path} ({exc.strerror})", "pass a writable --json path") from None
