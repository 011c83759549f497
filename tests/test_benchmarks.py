"""The benchmark scripts run (on the cpu device, in their quick form); their numbers are for
people to read, so only the shape of the output is checked here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_turn_benchmark_runs_on_the_cpu(tmp_path):
    out = tmp_path / "turn.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "turn.py"), "--device", "cpu", "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| turn wall (s) |" in proc.stdout and "bare `python -c \"import torch\"`" in proc.stdout
    data = json.loads(out.read_text())
    statuses = sorted(r["status"] for r in data["warm"]["rows"])
    assert statuses == ["compile_error", "correct", "correct", "correct", "incorrect", "timeout"]
    assert all(r["cached"] for r in data["warm"]["rows"] if r["status"] == "correct")
    assert data["warm"]["device_p50_s"] > 0 and data["bare_import_s"] and data["marginal"]["turn_s"]


@pytest.mark.slow
def test_confirm_benchmark_runs_on_the_cpu(tmp_path):
    out = tmp_path / "confirm.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "confirm.py"), "--device", "cpu", "--times", "2",
                           "--rounds", "20", "--tasks", "rmsnorm", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| task | its turn | #1 median (95% interval) | #2 median (95% interval) | (max-min)/median |" in proc.stdout
    (res,) = json.loads(out.read_text())
    assert res["task"] == "rmsnorm" and len(res["rows"]) == 2 and res["spread_pct"] >= 0
    for row in res["rows"]:
        low, high = row["ci95"]
        assert row["verified"] and low <= row["median"] <= high and 20 >= row["runs"] > 0
