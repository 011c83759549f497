"""--language triton end to end on the CPU device: the real CLI, the scripted Triton answers of
examples/rmsnorm.triton.jsonl run in Triton's interpreter, real git, the delivered module imported.

The task is examples/rmsnorm.py with 8 rows instead of 512: the interpreter runs each program of a
launch in Python, so the example's full size would take minutes per turn.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .clihelp import REPO, kevin
from .conftest import git_init

pytest.importorskip("triton")
pytestmark = pytest.mark.slow
RESPONSES = REPO / "examples" / "rmsnorm.triton.jsonl"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    repo = git_init(tmp_path_factory.mktemp("e2e-triton") / "proj")
    source = (REPO / "examples" / "rmsnorm.py").read_text(encoding="utf-8")
    assert "batch_size = 512\n" in source
    (repo / "rmsnorm.py").write_text(source.replace("batch_size = 512\n", "batch_size = 8\n"), encoding="utf-8")
    shutil.copy(RESPONSES, repo / "responses.jsonl")
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my layer"], check=True)
    proc = kevin("run", "rmsnorm.py", "--device", "cpu", "--language", "triton", "--backend", "scripted",
                 "--responses", "responses.jsonl", "--turns", "3", "--headless", "--timed-runs", "3",
                 "--correctness-trials", "3", "--confirm-rounds", "5", "--min-speedup", "0", "--json", "summary.json",
                 cwd=repo)
    return repo, proc


def test_the_triton_turns_compile_verify_and_time_in_the_interpreter(finished):
    repo, proc = finished
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((repo / "summary.json").read_text())
    assert summary["language"] == "triton" and summary["device"] == "cpu"
    turns = summary["turns"]
    assert [t["status"] for t in turns] == ["compile_error", "correct", "correct"], proc.stderr
    # Turn 1's kernel does not compile: Triton says so at the first call, the compile stage.
    assert "arange" in turns[0]["feedback"] and "first call" in turns[0]["feedback"]
    assert "Triton's interpreter" in proc.stderr  # the times are labelled the interpreter's
    run = json.loads((Path(summary["run_dir"]) / "run.json").read_text())
    assert run["config"]["language"] == "triton"
    show = kevin("show", summary["run_id"], cwd=repo)
    assert show.returncode == 0 and "Triton kernels" in show.stdout


def test_the_delivered_triton_module_needs_torch_and_triton_alone(finished, tmp_path):
    repo, _ = finished
    summary = json.loads((repo / "summary.json").read_text())
    module = Path(summary["kernel_module"])
    text = module.read_text(encoding="utf-8")
    assert "Triton kernels are compiled at their first call" in text and "load_inline" not in text
    report = module.parent / f"{module.stem}_report.md"
    assert "kernel language | Triton" in report.read_text(encoding="utf-8")
    program = (
        "import sys, torch\n"
        f"sys.path[:0] = [{str(module.parent)!r}, {str(repo)!r}]\n"
        f"from {module.stem} import ModelNew\n"
        "import rmsnorm\n"
        "torch.manual_seed(0)\n"
        "ref = rmsnorm.Model(64)\n"
        "new = ModelNew(64)\n"
        "new.load_state_dict(ref.state_dict())\n"
        "x = torch.randn(5, 64)\n"
        "torch.testing.assert_close(new(x), ref(x), atol=1e-5, rtol=1e-5)\n"
        "print('same', sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy'))[:1])\n"
    )
    done = subprocess.run([sys.executable, "-c", program], env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same" in done.stdout


def test_check_takes_language(finished, tmp_path):
    repo, _ = finished
    summary = json.loads((repo / "summary.json").read_text())
    best = Path(summary["run_dir"]) / summary["best"]["kernel_path"]
    proc = kevin("check", repo / "rmsnorm.py", best, "--device", "cpu", "--language", "triton", "--timed-runs", "3",
                 "--json", tmp_path / "c.json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "c.json").read_text())
    assert out["status"] == "correct" and out["runtime_ms"] > 0
    assert any("Triton's interpreter" in r for r in out["reasons"])
    # The same Triton answer where CUDA is asked for: refused before anything runs.
    proc = kevin("check", repo / "rmsnorm.py", best, "--device", "cpu", "--json", tmp_path / "d.json")
    assert proc.returncode == 1
    out = json.loads((tmp_path / "d.json").read_text())
    assert out["status"] == "check_failed" and any("uses-load-inline" in r for r in out["reasons"])
