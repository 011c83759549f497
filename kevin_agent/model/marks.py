"""The machine-readable comment lines of the files the whole-model commands write: an extracted
task's ``# kevin-opt-extracted: {json}`` and a delivered kernel's ``# kevin-opt-install: {json}``.
Read in the tool's own process, so without importing the file."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from .records import ExtractedTask, InstallEnvelope

EXTRACTED_PREFIX = "# kevin-opt-extracted: "
INSTALL_PREFIX = "# kevin-opt-install: "


def line(prefix: str, record: BaseModel) -> str:
    return prefix + json.dumps(record.model_dump(mode="json"), separators=(",", ":"))


def _find(text: str, prefix: str, model: type[BaseModel]):
    for ln in text.splitlines():
        if ln.startswith(prefix):
            try:
                return model.model_validate_json(ln[len(prefix):])
            except ValueError:
                return None
    return None


def extracted_from(task_source: str) -> ExtractedTask | None:
    """The metadata of a task file that ``kevin-opt extract`` wrote; None for any other."""
    return _find(task_source, EXTRACTED_PREFIX, ExtractedTask)


def read_envelope(path: Path) -> InstallEnvelope | None:
    """The envelope of a delivered kernel module; None for one that does not install itself."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return _find(text, INSTALL_PREFIX, InstallEnvelope)
