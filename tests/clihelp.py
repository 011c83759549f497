"""Run the real CLI in a subprocess, as a person or a CI job would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def kevin(*args, cwd: Path | None = None, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    # No terminal size from the test runner (pytest-xdist's workers set COLUMNS=80): the CLI's output
    # goes to a pipe, and it lays its tables out as it does for a CI job's log unless a test says.
    full_env = {k: v for k, v in os.environ.items()
                if (not k.startswith("KEVIN_") or k == "KEVIN_CACHE_DIR") and k not in ("COLUMNS", "LINES")}
    full_env.update({"CI": "true", "PYTHONUNBUFFERED": "1"})
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "kevin_agent.cli", *map(str, args)], cwd=cwd or REPO,
                          capture_output=True, text=True, env=full_env, timeout=timeout)
