"""Runs of the real CLI that need no compiler: every response fails before the build."""

from __future__ import annotations

import json
import subprocess

from ..clihelp import REPO, kevin

EX = REPO / "examples" / "softmax.py"
NO_CODE = {"text": "<think>[hand-written test response] thinking</think>I would fuse the ops."}
CHEAT = {"text": "<think>[hand-written test response]</think>\n```python\nimport torch\nimport torch.nn as nn\n"
                 "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n```\n"
                 "Used torch.softmax."}


def write_script(path, *responses):
    path.write_text("".join(json.dumps(r) + "\n" for r in responses))
    return path


def test_a_short_script_is_refused_before_the_run_and_running_out_later_keeps_finished_turns(tmp_path):
    script = write_script(tmp_path / "r.jsonl", NO_CODE, CHEAT)
    refused = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--responses", script, "--turns", "3",
                    "--run-dir", tmp_path / "runs", "--no-commit")
    assert refused.returncode == 2, refused.stderr
    assert f"the script {script} has 2 responses; 3 turns need 3" in refused.stderr
    assert "pass --turns 2 or fewer" in refused.stderr and not (tmp_path / "runs").exists()
    missing = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--responses", tmp_path / "nope.jsonl",
                    "--run-dir", tmp_path / "runs", "--no-commit")
    assert missing.returncode == 2 and "does not exist" in missing.stderr and not (tmp_path / "runs").exists()

    first = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--responses", script, "--turns", "2",
                  "--run-dir", tmp_path / "runs", "--json", tmp_path / "s.json", "--no-commit")
    assert first.returncode == 1, first.stderr
    run_id = json.loads((tmp_path / "s.json").read_text())["run_id"]
    # A resume asked for more turns than the script holds runs out at the turn it needs one more.
    proc = kevin("resume", run_id, "--turns", "3", "--run-dir", tmp_path / "runs", "--json", tmp_path / "s.json")
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


def test_what_the_delivery_would_refuse_is_said_before_the_first_turn(tmp_path):
    from kevin_agent.evaluate.toolchain.cache import cpu_name

    from ..conftest import git_init

    repo = git_init(tmp_path / "proj")
    (repo / "softmax.py").write_text(EX.read_text())
    better = (f'# kevin-opt-kernel: {{"speedup": 9.5, "device": "cpu", "device_name": {json.dumps(cpu_name())}, '
              '"run_id": "20250101-000000-softmax-0000", "trajectory": 0, "turn": 4}\nprint("an earlier kernel")\n')
    (repo / "softmax_kevin.py").write_text(better)
    subprocess.run(["git", "-C", repo, "add", "softmax.py", "softmax_kevin.py"], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "a layer and its kernel"], check=True)
    (repo / "softmax_kevin_report.md").write_text("my own notes\n")  # untracked, in the report's place
    script = write_script(tmp_path / "r.jsonl", NO_CODE)
    args = ("run", "softmax.py", "--device", "cpu", "--backend", "scripted", "--responses", script, "--turns", "1")
    proc = kevin(*args, cwd=repo)
    lines = proc.stderr.splitlines()
    first_turn = next(i for i, line in enumerate(lines) if line.startswith("[t0 turn 1/1]"))
    ahead = [line for line in lines[:first_turn] if "delivery:" in line]
    assert ahead == [
        "kevin-opt: warning: delivery: softmax_kevin_report.md exists and is not tracked by git: pass --replace to "
        "overwrite; without it the run goes on, and its kernels stay in its run directory",
        f"kevin-opt: warning: delivery: softmax_kevin.py claims 9.50x on {cpu_name()} (run "
        "20250101-000000-softmax-0000, turn 4): a kernel of this run replaces it only if it is faster, or with "
        "--replace",
    ], proc.stderr
    assert proc.returncode == 1 and (repo / "softmax_kevin_report.md").read_text() == "my own notes\n"
    # With --replace nothing would be refused for those, and nothing is said.
    proc = kevin(*args, "--replace", cwd=repo)
    assert "delivery:" not in proc.stderr, proc.stderr


def _strip_schema(run) -> None:
    """The run as a version before its files were numbered wrote it: no ``schema`` anywhere."""
    info = json.loads((run / "run.json").read_text())
    del info["schema"]
    (run / "run.json").write_text(json.dumps(info))
    lines = [json.loads(x) for x in (run / "turns.jsonl").read_text().splitlines()]
    (run / "turns.jsonl").write_text("".join(json.dumps({k: v for k, v in x.items() if k != "schema"}) + "\n"
                                             for x in lines))


def test_the_run_store_says_its_layout_and_resume_reads_the_ones_it_knows(tmp_path):
    script = write_script(tmp_path / "r.jsonl", NO_CODE, CHEAT)
    first = kevin("run", EX, "--device", "cpu", "--backend", "scripted", "--responses", script, "--turns", "2",
                  "--run-dir", tmp_path / "runs", "--json", tmp_path / "s.json", "--no-commit")
    assert first.returncode == 1, first.stderr
    run_id = json.loads((tmp_path / "s.json").read_text())["run_id"]
    run = tmp_path / "runs" / run_id
    assert json.loads((run / "run.json").read_text())["schema"] == 1
    assert [json.loads(x)["schema"] for x in (run / "turns.jsonl").read_text().splitlines()] == [1, 1]

    # A run written before the layout was numbered resumes as one of the first layout.
    _strip_schema(run)
    write_script(script, NO_CODE, CHEAT, NO_CODE)
    again = kevin("resume", run_id, "--turns", "3", "--run-dir", tmp_path / "runs", "--json", tmp_path / "s2.json")
    assert again.returncode == 1, again.stderr
    summary = json.loads((tmp_path / "s2.json").read_text())
    assert [t["status"] for t in summary["turns"]] == ["parse_error", "check_failed", "parse_error"]

    # A layout this version does not know is refused, naming it, and nothing is touched.
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "schema": 2}))
    before = (run / "turns.jsonl").read_text()
    refused = kevin("resume", run_id, "--run-dir", tmp_path / "runs")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "is of layout (schema) 2; this kevin-opt reads 1" in refused.stderr
    assert "a newer kevin-opt wrote it" in refused.stderr
    assert (run / "turns.jsonl").read_text() == before
