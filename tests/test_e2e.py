"""The real CLI, end to end on the CPU device: scripted responses, real compiles, real git.

The rmsnorm script walks through a parse error, a compile error, an incorrect kernel and
correct ones, so one run exercises every branch of the loop. Builds are cached across the
test session, so only the first run pays for compilation.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kevin_agent.delivery.kernel_module import read_claim

from .clihelp import REPO, kevin
from .conftest import git_init

pytestmark = pytest.mark.slow
TURNS = 5


def rmsnorm_repo(tmp_path):
    repo = git_init(tmp_path / "proj")
    shutil.copy(REPO / "examples" / "rmsnorm.py", repo / "rmsnorm.py")
    shutil.copy(REPO / "examples" / "rmsnorm.cpu.jsonl", repo / "responses.jsonl")
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my layer"], check=True)
    return repo


def run_args(*extra):
    return ["run", "rmsnorm.py", "--device", "cpu", "--backend", "scripted", "--responses", "responses.jsonl",
            "--turns", str(TURNS), "--headless", "--timed-runs", "10", "--confirm-rounds", "30", *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    repo = rmsnorm_repo(tmp_path_factory.mktemp("e2e"))
    proc = kevin(*run_args("--json", "summary.json", "--min-speedup", "0", "--junit", "junit.xml"), cwd=repo)
    return repo, proc


def test_exit_code_and_summary(finished):
    repo, proc = finished
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((repo / "summary.json").read_text())
    statuses = [t["status"] for t in summary["turns"]]
    assert statuses[:4] == ["parse_error", "compile_error", "incorrect", "correct"], statuses
    assert len(statuses) == TURNS
    assert summary["device"] == "cpu" and summary["backend"] == "scripted"
    assert "hand-written" in summary["model"]
    for t in summary["turns"]:
        assert t["feedback"]
        if t["status"] == "correct":
            assert t["speedup"] > 0 and t["runtime_ms"] > 0 and t["reference_ms"] > 0
        else:
            assert t["speedup"] is None
    best = summary["best"]
    # The winner and its numbers are the confirmation's: its median, not the best turn's own number.
    confirmed = best["confirmation"]
    low, high = confirmed["ci95"]
    assert low <= confirmed["speedup_median"] <= high and confirmed["runs"] >= 20
    assert best["speedup"] == confirmed["speedup_median"] != best["run_speedup"]
    kernels = summary["confirmation"]
    assert [(k["trajectory"], k["turn"]) for k in kernels] == [
        (t["trajectory"], t["turn"]) for t in sorted((t for t in summary["turns"] if t["speedup"]),
                                                     key=lambda t: -t["speedup"])][:3]
    assert all(k["verified"] for k in kernels)
    assert (best["turn"], best["speedup"]) == max(((k["turn"], k["speedup_median"]) for k in kernels),
                                                  key=lambda k: k[1])
    assert os.path.isfile(Path(summary["run_dir"]) / best["kernel_path"])  # relative, as in every record
    assert summary["commit"]
    # The commit message and the module's header quote the same median and interval.
    interval = f"95% interval {low:.2f}-{high:.2f}x"
    message = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%B"], capture_output=True, text=True).stdout
    assert f"{best['speedup']:.2f}x faster" in message and interval in message
    header = (repo / "rmsnorm_kevin.py").read_text().split('"""')[1]
    assert f"speedup vs eager PyTorch:  {best['speedup']:.2f}x ({interval}" in header
    assert read_claim(repo / "rmsnorm_kevin.py").confirmation.ci95 == [low, high]


def test_run_directory_holds_every_turn(finished):
    repo, _ = finished
    summary = json.loads((repo / "summary.json").read_text())
    run_dir = repo / ".kevin" / "runs" / summary["run_id"]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["best"]["turn"] == summary["best"]["turn"]
    assert info["versions"]["torch"]
    lines = [json.loads(x) for x in (run_dir / "turns.jsonl").read_text().splitlines()]
    assert [x["turn"] for x in lines] == list(range(1, TURNS + 1))
    compile_error = lines[1]
    assert compile_error["eval"]["compile_log"] and "error" in compile_error["eval"]["error"].lower()
    assert lines[0]["parse_error"] and lines[0]["code"] == ""
    assert all(x["prompt"] and x["response"] for x in lines)
    # Each later prompt carries the previous attempts' feedback, never their reasoning.
    assert lines[0]["feedback"] in lines[1]["prompt"]
    assert lines[1]["reasoning"] and lines[1]["reasoning"] not in lines[2]["prompt"]
    assert len(list((run_dir / "kernels").glob("*.py"))) == TURNS - 1


def test_commit_holds_only_the_tools_files(finished):
    repo, _ = finished
    names = subprocess.run(["git", "-C", repo, "show", "--name-only", "--format=%s%n%b", "HEAD"],
                           capture_output=True, text=True, check=True).stdout
    files = sorted(line for line in names.splitlines() if line.startswith("rmsnorm"))
    assert files == ["rmsnorm_kevin.py", "rmsnorm_kevin_report.json", "rmsnorm_kevin_report.md",
                     "rmsnorm_kevin_report.png"]
    assert "Kevin-Run:" in names
    status = subprocess.run(["git", "-C", repo, "status", "--porcelain"], capture_output=True, text=True).stdout
    assert ".kevin" not in status  # excluded through .git/info/exclude
    report = (repo / "rmsnorm_kevin_report.md").read_text()
    assert "rmsnorm_kevin_report.png" in report and "| " in report and "parse error" in report
    # The best kernel's timings against eager, and its correctness evidence.
    assert "| eager PyTorch |" in report and "median (ms)" in report and "trials passed: 5 / 5" in report
    confirmed = json.loads((repo / "summary.json").read_text())["best"]["confirmation"]
    low, high = confirmed["ci95"]
    assert f"**{confirmed['speedup_median']:.2f}x** (95% interval {low:.2f}x - {high:.2f}x)" in report
    assert "## Confirmation" in report and "on a second look: 5 / 5 more" in report
    assert (repo / "rmsnorm_kevin_report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((repo / "rmsnorm_kevin_report.json").read_text())
    assert json.dumps(data).count("median_ms") >= 2


def test_progress_lines_on_stderr(finished):
    _, proc = finished
    assert "[t0 turn 1/5] parse_error" in proc.stderr
    assert "[t0 turn 4/5] correct" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_show_and_history(finished):
    repo, _ = finished
    summary = json.loads((repo / "summary.json").read_text())
    hist = kevin("history", "--plain", cwd=repo)
    assert hist.returncode == 0 and summary["run_id"] in hist.stdout
    whole = kevin("show", summary["run_id"], cwd=repo)
    assert whole.returncode == 0 and "confirmed t0 turn" in whole.stdout and "95% interval" in whole.stdout
    show = kevin("show", summary["run_id"], "--turn", "2", cwd=repo)
    assert show.returncode == 0 and "compile_error" in show.stdout and "## kernel" in show.stdout


def test_below_min_speedup_exits_1_and_commits_nothing(tmp_path):
    repo = rmsnorm_repo(tmp_path)
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    proc = kevin(*run_args("--min-speedup", "1000", "--json", "s.json"), cwd=repo)
    assert proc.returncode == 1, proc.stderr
    assert "below --min-speedup" in proc.stderr
    assert json.loads((repo / "s.json").read_text())["commit"] is None
    assert subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head
    assert not (repo / "rmsnorm_kevin.py").exists()


def test_killed_run_resumes_without_losing_or_repeating_turns(tmp_path):
    repo = rmsnorm_repo(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_") or k == "KEVIN_CACHE_DIR"}
    env.update(CI="true")
    proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", *run_args("--no-commit", "--min-speedup", "0")], cwd=repo,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    runs = repo / ".kevin" / "runs"
    deadline = time.monotonic() + 600
    turns_file = None
    while time.monotonic() < deadline:
        found = list(runs.glob("*/turns.jsonl")) if runs.exists() else []
        if found and len(found[0].read_text().splitlines()) >= 3:
            turns_file = found[0]
            break
        time.sleep(0.2)
    assert turns_file is not None, "the run never got to turn 3"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    before = turns_file.read_text().splitlines()
    assert 3 <= len(before) < TURNS
    run_id = turns_file.parent.name
    info = json.loads((turns_file.parent / "run.json").read_text())
    assert info["status"] == "running"  # killed: nothing had a chance to mark it

    resumed = kevin("resume", run_id, "--headless", "--json", "r.json", "--no-commit", cwd=repo)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming after {len(before)} finished turns" in resumed.stderr
    after = turns_file.read_text().splitlines()
    assert after[: len(before)] == before  # finished turns untouched
    assert [json.loads(x)["turn"] for x in after] == list(range(1, TURNS + 1))
    statuses = [t["status"] for t in json.loads((repo / "r.json").read_text())["turns"]]
    assert statuses[:4] == ["parse_error", "compile_error", "incorrect", "correct"]


def test_junit_reporter_plugin(finished):
    import xml.etree.ElementTree as ET

    repo, _ = finished
    suite = ET.parse(repo / "junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == TURNS + 1  # one per turn, plus the best kernel as the suite's verdict
    assert cases[0].find("failure") is not None and cases[3].find("failure") is None
    assert "best" in cases[-1].get("name") and cases[-1].find("failure") is None


def test_every_file_written_for_tools_has_one_layout(finished, tmp_path):
    # The summary, the committed report, check --json and history --json: one schema, one model
    # each, and the same names for the same facts (a CI script reads one field in all of them).
    from kevin_agent.results.history import HistoryRecord
    from kevin_agent.results.records import SCHEMA, CheckRecord, ReportRecord, RunSummary

    repo, _ = finished
    summary = json.loads((repo / "summary.json").read_text())
    report = json.loads((repo / "rmsnorm_kevin_report.json").read_text())
    proc = kevin("history", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    history = json.loads(proc.stdout)
    kernel = Path(summary["run_dir"]) / summary["best"]["kernel_path"]
    assert kevin("check", repo / "rmsnorm.py", kernel, "--device", "cpu", "--timed-runs", "10", "--json",
                 tmp_path / "c.json").returncode == 0
    check = json.loads((tmp_path / "c.json").read_text())
    for data, model, kind in ((summary, RunSummary, "run-summary"), (report, ReportRecord, "report"),
                              (history, HistoryRecord, "history"), (check, CheckRecord, "check")):
        assert (data["schema"], data["kind"]) == (SCHEMA, kind)
        assert model.model_validate(data).model_dump(mode="json") == data  # nothing outside the model
    assert summary["turns"] == report["turns"] and len(summary["turns"]) == TURNS
    for field in ("trajectory", "turn", "speedup", "runtime_ms", "reference_ms", "confirmation", "kernel_path"):
        assert summary["best"][field] == report["best"][field], field
    assert history["runs"][0]["best_speedup"] == summary["best"]["speedup"] and history["runs"][0]["best_confirmed"]
    assert check["runtime_ms"] > 0 and check["speedup"] > 0 and set(check) >= {"runtime_ms", "reference_ms"}


def test_check_command_on_a_verified_and_a_cheating_candidate(finished, tmp_path):
    repo, _ = finished
    summary = json.loads((repo / "summary.json").read_text())
    best = Path(summary["run_dir"]) / summary["best"]["kernel_path"]
    proc = kevin("check", repo / "rmsnorm.py", best, "--device", "cpu", "--timed-runs", "10", "--compare-compile",
                 "--json", tmp_path / "c.json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "c.json").read_text())
    assert out["status"] == "correct" and out["correct"] is True
    assert out["speedup"] > 0 and out["runtime_ms"] > 0 and out["reference_ms"] > 0 and out["reasons"] == []
    assert out["speedup_vs_compile"] > 0  # torch.compile of the reference timed in the same worker
    cheat = tmp_path / "cheat.py"
    cheat.write_text(open(best).read() + "\n\ntry:\n    import os\nexcept ImportError:\n    os = None\n")
    proc = kevin("check", repo / "rmsnorm.py", cheat, "--device", "cpu", "--json", tmp_path / "d.json")
    assert proc.returncode == 1
    out = json.loads((tmp_path / "d.json").read_text())
    assert out["status"] == "check_failed" and any("no-try-except" in r for r in out["reasons"])


def test_a_better_committed_kernel_is_replaced_only_with_replace(finished):
    """A later delivery that is worse than the committed module on the same device is refused (exit 1)."""
    repo, _ = finished
    summary = json.loads((repo / "summary.json").read_text())
    module = repo / "rmsnorm_kevin.py"
    text = module.read_text()
    (claim_line,) = [line for line in text.splitlines() if line.startswith("# kevin-opt-kernel: ")]
    claim = json.loads(claim_line.split(": ", 1)[1])
    assert claim["speedup"] == summary["best"]["speedup"] and claim["run_id"] == summary["run_id"]
    better = text.replace(claim_line, "# kevin-opt-kernel: " + json.dumps({**claim, "speedup": 99.0,
                                                                          "run_id": "an-earlier-run"}))
    module.write_text(better)
    subprocess.run(["git", "-C", repo, "commit", "-qam", "a better kernel"], check=True)
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    # Resuming the finished run runs no turn: it delivers again.
    proc = kevin("resume", summary["run_id"], "--headless", "--json", "again.json", cwd=repo)
    assert proc.returncode == 1, proc.stderr
    assert "claims 99.00x" in proc.stderr and "pass --replace" in proc.stderr
    assert module.read_text() == better
    assert subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head
    again = json.loads((repo / "again.json").read_text())
    assert again["delivery"]["outcome"] == "refused"
    # The stored confirmation is of the same kernels with the same settings: reused, not timed again.
    assert "confirming the best" not in proc.stderr
    assert again["best"]["confirmation"] == summary["best"]["confirmation"]
    # Where the winner waits, and what delivers it.
    run_dir = Path(summary["run_dir"])
    kept = f"the winning kernel is kept in {run_dir / summary['best']['kernel_path']}"
    assert f"{kept}; kevin-opt resume {summary['run_id']} --replace delivers it" in proc.stderr, proc.stderr
    # An edit of the person's in the module: never overwritten, and said how to go on once it is put away.
    module.write_text(better + "# my own note\n")
    proc = kevin("resume", summary["run_id"], "--headless", "--replace", cwd=repo)
    assert proc.returncode == 1 and "uncommitted changes in rmsnorm_kevin.py" in proc.stderr, proc.stderr
    assert (f"kevin-opt resume {summary['run_id']} --replace delivers it once the changes there are committed, "
            "stashed or discarded") in proc.stderr
    assert module.read_text() == better + "# my own note\n"
    subprocess.run(["git", "-C", repo, "stash", "-q"], check=True)
    proc = kevin("resume", summary["run_id"], "--headless", "--replace", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "replaced rmsnorm_kevin.py, which claimed 99.00x" in proc.stderr
    assert read_claim(module).speedup == summary["best"]["speedup"]
