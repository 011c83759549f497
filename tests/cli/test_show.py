"""`kevin-opt show`: a run's turns with what went wrong in each, and one turn in full."""

from __future__ import annotations

from kevin_agent.cli import main
from kevin_agent.formatting import stage_times
from kevin_agent.results import StageTimes, Status, TurnRecord
from kevin_agent.store import RunStore

from ..tui_support import beam_run, build_store, confirmed_run, correct_eval, fixed_info, fixed_records

RUN_ID = "20250101-120000-affine-0001"


def show(capsys, *args: str) -> str:
    assert main(["show", *args]) == 0
    return capsys.readouterr().out


def test_show_run_prints_each_error_itself_not_the_sentence_around_it(tmp_path, capsys):
    root = build_store(tmp_path / "runs")
    out = show(capsys, RUN_ID, "--run-dir", str(root))
    lines = {line.split("]")[0].strip(" ["): line for line in out.splitlines() if line.startswith("  [")}
    assert "compile_error 'n' was not declared in this scope" in lines["t1 turn 2"]
    assert "parse_error   no ```python code block in the answer" in lines["t0 turn 1"]
    assert "check_failed  [torch-compute] ModelNew.forward computes with torch operators" in lines["t1 turn 1"]
    assert "incorrect     max abs error 1.0e+00 over tolerance" in lines["t1 turn 3"]
    assert "correct       2.00x" in lines["t0 turn 3"]
    assert "Your kernel" not in out and "Your answer" not in out


def test_show_run_lists_a_cancelled_generation_before_its_turn(tmp_path, capsys):
    root = tmp_path / "runs"
    store = RunStore.create(root, fixed_info(RUN_ID, status="stopped", created_at="2025-01-01T12:00:00+00:00"))
    store.append(TurnRecord(trajectory=0, turn=1, status=Status.CANCELLED,
                            feedback="the generation was cancelled; it is not shown to the model and the turn is "
                                     "generated again"))
    store.append(fixed_records()[2].model_copy(update={"turn": 1}))
    out = show(capsys, RUN_ID, "--run-dir", str(root))
    turns = [line for line in out.splitlines() if line.startswith("  [t0 turn 1]")]
    assert turns[0].startswith("  [t0 turn 1] cancelled     the generation was cancelled")
    assert turns[1].startswith("  [t0 turn 1] correct       1.25x")


def test_show_turn_prints_the_error_and_the_stage_times(tmp_path, capsys):
    root = build_store(tmp_path / "runs")
    out = show(capsys, RUN_ID, "--run-dir", str(root), "--turn", "2", "--trajectory", "1")
    assert "status compile_error" in out and "\n## error\n'n' was not declared in this scope\n" in out
    assert "time compile 12.0 s" in out
    # An evaluation that times every stage: each one, in the order they run.
    rec = fixed_records()[4].model_copy(update={
        "generate_s": 12.0,
        "eval": correct_eval(0.125).model_copy(update={"stage_s": StageTimes(
            queue=0.25, compile=31.5, load=1.2, correctness=0.8, timing=2.1)}),
    })
    assert [name for name, _ in stage_times(rec)] == ["generation", "queue", "compile", "load", "correctness", "timing"]
    correct = show(capsys, RUN_ID, "--run-dir", str(root), "--turn", "3")
    assert "speedup 2.00x" in correct and "## error" not in correct and "time compile 31.5 s" in correct


def test_show_run_draws_which_turn_continued_which(tmp_path, capsys):
    """A beam run: each line says where a turn came from, and the tree marks the winner's path."""
    root = tmp_path / "runs"
    beam_run(root, RUN_ID, {(1, 2): 0, (1, 3): 1, (0, 3): 0})  # t0: turns 1-3, t1: turns 1-3
    out = show(capsys, RUN_ID, "--run-dir", str(root))
    assert "  [t1 turn 2] (from t0 turn 1) compile_error" in out
    tree = out.split("* marks the winner's path):\n")[1].splitlines()
    assert tree[0].startswith("  t0  1:") and tree[0].endswith("3:2.00x*")
    assert tree[1].startswith("    t1 (from t0 turn 1)  2:compile error")
    assert tree[2].startswith("  t1  1:")
    turn = show(capsys, RUN_ID, "--run-dir", str(root), "--turn", "2", "--trajectory", "1")
    assert "continued trajectory 0 after its turn 1" in turn


def test_show_and_history_say_which_number_is_confirmed(tmp_path, capsys):
    root = build_store(tmp_path / "runs")
    run = confirmed_run(root).name
    lines = show(capsys, run, "--run-dir", str(root)).splitlines()
    best = next(line for line in lines if line.startswith("  [t0 turn 3]"))
    assert best.startswith("  [t0 turn 3] correct       2.00x")
    assert best.endswith("-> confirmed 2.70x (95% interval 2.60-2.80x, 100 rounds) head to head")
    dropped = next(line for line in lines if line.startswith("  [t0 turn 2]"))
    assert dropped.endswith("-> dropped on a second look: trial 2 of 5 (seed 1000001): max abs error 3.1e-01 over "
                            "tolerance")
    assert "  [t1 turn 3] incorrect" in "\n".join(lines) and "->" not in next(
        line for line in lines if line.startswith("  [t1 turn 3]"))
    assert lines[-1] == ("best 2.70x (95% interval 2.60-2.80x, 100 rounds) confirmed (trajectory 0, turn 3; "
                         "its turn measured 2.00x)")
    turn = show(capsys, run, "--run-dir", str(root), "--turn", "3").splitlines()
    assert "speedup 2.00x (this turn's own measurement)" in turn
    assert "confirmed 2.70x (95% interval 2.60-2.80x, 100 rounds) head to head" in turn
    # The BEST column holds both kinds of number: each says which it is.
    assert main(["history", "--plain", "--run-dir", str(root)]) == 0
    table = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert " 2.70x confirmed " in table[run]
    assert " 2.00x unconfirmed " in table[RUN_ID]


def long_run(root):
    """A run with far more turns than a pipe holds lines of `show` (64 KiB)."""
    store = RunStore.create(root, fixed_info(RUN_ID, status="completed", created_at="2025-01-01T12:00:00+00:00",
                                             turns=2000))
    record = fixed_records()[3]
    for turn in range(1, 2001):
        store.append(record.model_copy(update={"turn": turn}))
    return root


def test_show_and_history_end_quietly_when_the_reader_of_their_output_leaves(tmp_path):
    import subprocess
    import sys

    root = long_run(tmp_path / "runs")
    for args in (["show", RUN_ID], ["history", "--plain"]):
        script = (f"{sys.executable} -m kevin_agent.cli {' '.join(args)} --run-dir {root} 2> {tmp_path}/err "
                  f"| head -1; echo ${{PIPESTATUS[0]}} > {tmp_path}/status")
        subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, check=True)
        err = (tmp_path / "err").read_text()
        assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
        assert (tmp_path / "status").read_text().strip() in ("0", "141")
    # The reader gone before a line is written: the write itself fails, every time.
    for args in (["show", RUN_ID], ["history", "--plain"]):
        proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", *args, "--run-dir", str(root)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 141, err
        assert err == "", err
