"""Runs of the real CLI that need no compiler: every response fails before the build."""

from __future__ import annotations

import json

from .clihelp import REPO, kevin

EX = REPO / "examples" / "softmax.py"
NO_CODE = {"text": "<think>[hand-written test response] thinking</think>I would fuse the ops."}
CHEAT = {"text": "<think>[hand-written test response]</think>\n```python\nimport torch\nimport torch.nn as nn\n"
                 "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n```\n"
                 "Used torch.softmax."}


def write_script(path, *responses):
    path.write_text("".join(json.dumps(r) + "\n" for r in responses))
    return path


def test_script_running_out_keeps_finished_turns_and_exits_3(tmp_path):
    script = write_script(tmp_path / "r.jsonl", NO_CODE, CHEAT)
    proc = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--responses", script, "--turns", "3",
                 "--run-dir", tmp_path / "runs", "--json", tmp_path / "s.json", "--no-commit")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "2 finished turns are saved" in proc.stderr and "kevin-opt resume" in proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert [t["status"] for t in summary["turns"]] == ["parse_error", "check_failed"]
    assert summary["reason"] == "failed" and summary["best"] is None
    assert "no-torch-compute" in summary["turns"][1]["feedback"]
    # The rejection reached the model's next prompt.
    run = tmp_path / "runs" / summary["run_id"]
    lines = [json.loads(x) for x in (run / "turns.jsonl").read_text().splitlines()]
    assert lines[0]["feedback"] in lines[1]["prompt"]
    assert "Restart your reasoning" in lines[1]["prompt"]


def test_no_verified_kernel_exits_1_and_show_prints_the_turn(tmp_path):
    script = write_script(tmp_path / "r.jsonl", CHEAT, NO_CODE)
    step_summary = tmp_path / "step-summary.md"
    step_summary.write_text("earlier step\n")
    proc = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--responses", script, "--turns", "2",
                 "--run-dir", tmp_path / "runs", "--json", tmp_path / "s.json",
                 env={"GITHUB_STEP_SUMMARY": str(step_summary)})
    assert proc.returncode == 1, proc.stderr
    assert "no turn produced a verified kernel: nothing written, nothing committed" in proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["delivery"]["outcome"] == "nothing" and summary["exit_code"] == 1
    # CI sees what happened in the job summary, appended after what was there.
    text = step_summary.read_text()
    assert text.startswith("earlier step\n# kevin-opt report: softmax") and "| 1 | check failed |" in text
    assert "![" not in text  # the chart cannot be shown there
    run_id = json.loads((tmp_path / "s.json").read_text())["run_id"]
    show = kevin("show", run_id, "--turn", "1", "--run-dir", tmp_path / "runs")
    assert show.returncode == 0
    assert "check_failed" in show.stdout and "torch.softmax" in show.stdout and "## static checks" in show.stdout
    missing = kevin("show", run_id, "--turn", "7", "--run-dir", tmp_path / "runs")
    assert missing.returncode == 2 and "no turn 7" in missing.stderr
