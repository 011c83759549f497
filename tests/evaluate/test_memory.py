"""Memory: the task's footprint, the evaluation's plan and peak, the fit check at the probe, and
whose an out-of-memory error is. The rules (``evaluate/memory.py``) are checked with the numbers
of the GPU they are for; the rest runs real workers on the cpu device."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from kevin_agent.errors import TaskError
from kevin_agent.evaluate import EvalSettings, LocalEvaluator
from kevin_agent.evaluate import memory
from kevin_agent.evaluate.memory import GiB, Footprint
from kevin_agent.evaluate.worker.taskcode import TaskProblem, call_factory
from kevin_agent.task import load_task

from ..clihelp import REPO, kevin
from ..evalfixtures import TASK_SOURCE, runtime_source, write_task

H200 = 139 * GiB
RELU_6GB = Footprint(input_bytes=4096 * 393216 * 4, output_bytes=4096 * 393216 * 4, peak_bytes=4096 * 393216 * 4)


def test_a_6gb_relu_is_planned_within_3x_its_footprint_and_fits_beside_a_process_holding_80_percent():
    assert RELU_6GB.total == 12 * GiB
    assert memory.planned(RELU_6GB) <= 3 * RELU_6GB.total
    free = H200 // 5  # another process holds 80%
    assert memory.fit_problem(RELU_6GB, free=free, total=H200, device_name="H200") is None
    # Beside it, one candidate is checked at a time; waiting workers hold only their context.
    busy, ready = memory.concurrency(RELU_6GB, free, workers=4)
    assert busy == 1 and ready >= 1
    assert memory.concurrency(RELU_6GB, H200, workers=4)[0] == 4


def test_confirmation_workers_run_at_once_only_as_many_as_fit_beside_the_waiting_ones():
    # KernelBench's 36_RMSNorm_ at its size (7 GiB in, 7 GiB out): four confirmation workers at once
    # ran an H200 out of memory (run 35); three fit, and one beside a process holding 80%.
    rmsnorm = Footprint(input_bytes=7 * GiB, output_bytes=7 * GiB, peak_bytes=7 * GiB)
    share = memory.confirming_worker(rmsnorm)
    assert 3 * share <= H200 - 2 * memory.idle_worker(rmsnorm) < 4 * share
    assert memory.confirmations_at_once(rmsnorm, H200, 4, ready=2) == 3
    assert memory.confirmations_at_once(rmsnorm, H200 // 5, 4, ready=1) == 1
    small = Footprint(input_bytes=2 << 20, output_bytes=2 << 20, peak_bytes=6 << 20)
    assert memory.confirmations_at_once(small, H200, 4, ready=8) == 4
    assert memory.confirmations_at_once(None, None, 4, ready=8) == 1  # no probe's numbers: one at a time


def test_a_confirmation_worker_that_ran_out_of_memory_beside_others_is_told_apart():
    from kevin_agent.evaluate.jobs import WorkerReply
    from kevin_agent.evaluate.parent.confirmation import _out_of_memory
    from kevin_agent.results import Confirmed

    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB"
    assert _out_of_memory((None, oom, None))
    assert not _out_of_memory((None, "the worker died with SIGSEGV during correctness", None))
    dropped = WorkerReply(ok=True, confirmed=[Confirmed(verified=True, speedup_median=2.0), Confirmed(error=oom)])
    assert _out_of_memory((dropped, "", None))
    wrong = WorkerReply(ok=True, confirmed=[Confirmed(error="trial 1 of 5 (seed 1000001): 7 elements differ")])
    assert not _out_of_memory((wrong, "", None))


def test_poisoning_takes_twice_the_outputs_and_never_more_than_half_of_what_is_left():
    assert memory.poison_bytes(RELU_6GB, None) == 12 * GiB + memory.POISON_MARGIN
    # Less room than twice the outputs: whole outputs' worth of poison, else no more than the margin
    # (a block the output does not fill would leave the reference's answer a segment of its own).
    assert memory.poison_bytes(RELU_6GB, 30 * GiB) == 12 * GiB + memory.POISON_MARGIN
    assert memory.poison_bytes(RELU_6GB, int(20.8 * GiB)) == RELU_6GB.output_bytes
    assert memory.poison_bytes(RELU_6GB, 10 * GiB) == memory.POISON_MARGIN
    assert memory.fit_poison(10 * GiB, 25 * GiB, 6 * GiB) == 10 * GiB
    assert memory.fit_poison(13 * GiB, 12 * GiB, 6 * GiB) == 12 * GiB
    assert memory.fit_poison(13 * GiB, 32 << 20, 6 * GiB) == 32 << 20
    assert memory.poison_bytes(RELU_6GB, 10 * GiB, lean=True) == memory.POISON_MARGIN
    assert memory.poison_bytes(None, None) == memory.POISON_MARGIN


def test_the_cuda_graph_column_and_the_timing_copies_stay_within_the_plan():
    relu = Footprint(input_bytes=6 * GiB, output_bytes=6 * GiB, peak_bytes=6 * GiB)
    affine = Footprint(param_bytes=64 << 10, input_bytes=256 << 20, output_bytes=256 << 20, peak_bytes=512 << 20)
    small = Footprint(input_bytes=2 << 20, output_bytes=2 << 20, peak_bytes=6 << 20)
    # The 6 GiB ReLU leaves no room for a captured call beside its inputs and the reference's answer.
    assert memory.graph_output_budget(relu, 1 * GiB) < relu.forward_bytes
    # The affine task's captured calls (each keeping the reference's peak, 512 MiB) fit twice.
    budget = memory.graph_output_budget(affine, 1 * GiB)
    assert 2 * affine.forward_bytes <= budget < 3 * affine.forward_bytes
    assert memory.graph_output_budget(small, 1 * GiB) == 1 * GiB  # capped by the caller's limit
    # Timing goes round placements of a small task; a large one is timed at one.
    assert memory.timing_placements(small) == memory.MAX_PLACEMENTS
    assert memory.timing_placements(relu) == memory.timing_placements(None) == 1
    assert memory.timing_placements(affine) == 1  # 768 MiB a placement: over the whole allowance
    for fp in (small, affine, relu, Footprint(input_bytes=24 << 20, output_bytes=24 << 20, peak_bytes=24 << 20)):
        n = memory.timing_placements(fp)
        assert n == 1 or n * memory.pool_bytes(fp.input_bytes + fp.forward_bytes) <= memory.TIMING_PLACEMENTS_BYTES
    # 24 MiB in, 24 MiB out: 50 MiB a placement, seven of them.
    assert memory.timing_placements(Footprint(input_bytes=24 << 20, output_bytes=24 << 20, peak_bytes=24 << 20)) == 7
    assert memory.pool_bytes(4096) == 2 << 20 and memory.pool_bytes(2 << 20) == 20 << 20
    assert memory.pool_bytes((10 << 20) + 1) == 12 << 20


def test_a_task_too_large_for_the_device_is_the_tasks_problem_and_one_crowded_out_is_the_environments():
    huge = Footprint(input_bytes=100 * GiB, output_bytes=100 * GiB, peak_bytes=100 * GiB)
    kind, message, hint = memory.fit_problem(huge, free=H200, total=H200, device_name="H200")
    assert kind == "task" and "H200 has 139.0 GiB in all" in message and "shrink get_inputs()" in hint
    kind, message, _ = memory.fit_problem(RELU_6GB, free=10 * GiB, total=H200, device_name="H200")
    assert kind == "environment" and "other processes hold 129.0 GiB" in message
    kind, message, _ = memory.fit_problem(RELU_6GB, free=H200, total=H200, device_name="H200", model_fraction=0.9)
    assert kind == "environment" and "the model will hold 90%" in message
    kind, message, hint = memory.fit_problem(RELU_6GB, free=H200, total=H200, device_name="H200", limit=8 * GiB)
    assert kind == "task" and "--eval-memory-gib allows 8.0 GiB" in message and "--eval-memory-gib" in hint


def test_out_of_memory_is_the_candidates_only_past_the_plan_or_with_its_room_free():
    plan, room = memory.planned(RELU_6GB), memory.entitled(RELU_6GB)
    assert memory.oom_fault(in_candidate=False, demand=plan + 1, planned_bytes=plan) == "candidate"
    assert memory.oom_fault(in_candidate=False, demand=plan // 2, planned_bytes=plan) == "harness"
    assert memory.oom_fault(in_candidate=True, demand=plan // 2, planned_bytes=plan, room=room // 2,
                            entitled_bytes=room) == "harness"
    assert memory.oom_fault(in_candidate=True, demand=plan // 2, planned_bytes=plan, room=2 * room,
                            entitled_bytes=room) == "candidate"
    message = "CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity of 139.81 GiB"
    assert memory.is_out_of_memory(message, "OutOfMemoryError") and memory.requested_bytes(message) == 6 * GiB


def _evaluator(tmp_path, source: str, **settings) -> LocalEvaluator:
    task = load_task(write_task(tmp_path / "task", source))
    chosen = {"warmup_runs": 2, "timed_runs": 5, "run_timeout_s": 240, **settings}
    return LocalEvaluator(task, EvalSettings(device="cpu", cache_dir=tmp_path / "builds", **chosen))


def test_a_reference_that_runs_out_of_memory_is_refused_at_the_probe(tmp_path):
    # A real allocation failure of the reference (a petabyte), not a simulated one.
    source = TASK_SOURCE.replace("return x * self.scale + 1.0", "return torch.empty(1 << 50) + x.sum()")
    evaluator = _evaluator(tmp_path, source)
    with pytest.raises(TaskError) as err:
        evaluator.probe()
    evaluator.close()
    assert err.value.exit_code == 2
    assert "the task ran out of memory" in err.value.message and "shrink get_inputs()" in err.value.hint


def test_inputs_that_run_out_of_memory_are_not_called_the_task_files_fault():
    """Drawn again inside a candidate's evaluation, a set that does not fit must reach the worker's
    out-of-memory handling (harness or candidate), not end the run as a broken task file."""
    job = SimpleNamespace(task_path="task.py")
    too_large = SimpleNamespace(get_inputs=lambda: [torch.empty(1 << 50)])  # a real allocation failure
    with pytest.raises(RuntimeError) as raised:
        call_factory(too_large, "get_inputs", job)
    assert memory.is_out_of_memory(str(raised.value), type(raised.value).__name__)
    broken = SimpleNamespace(get_inputs=lambda: [1 / 0])
    with pytest.raises(TaskProblem, match="get_inputs\\(\\) raised ZeroDivisionError"):
        call_factory(broken, "get_inputs", job)


def test_a_task_whose_workers_cannot_get_ready_ends_the_evaluation_and_blames_no_candidate(tmp_path):
    # The reference builds in the probe's process and in no other one: a task's failure that shows
    # only once a worker gets ready for a candidate.
    marker = tmp_path / "built-by"
    source = TASK_SOURCE.replace("        self.scale = scale\n", f"""        self.scale = scale
        import os, pathlib
        mark = pathlib.Path({str(marker)!r})
        if mark.exists() and mark.read_text() != str(os.getpid()):
            raise RuntimeError("built once already, by another process")
        mark.write_text(str(os.getpid()))
""")
    evaluator = _evaluator(tmp_path, source, op_audit=False)
    evaluator.probe()
    future = evaluator.submit(runtime_source("honest_python"))
    with pytest.raises(TaskError) as err:
        future.result(timeout=600)
    evaluator.close()
    assert err.value.exit_code == 2
    assert "building Model failed" in err.value.message and "built once already" in err.value.message


def test_a_run_whose_task_does_not_fit_the_memory_allowed_exits_2_before_any_turn(tmp_path):
    task = write_task(tmp_path, name="scale_task.py")
    script = tmp_path / "r.jsonl"
    script.write_text(json.dumps({"text": "<think>[hand-written test response]</think>never shown"}) + "\n")
    proc = kevin("run", task, "--device", "cpu", "--backend", "scripted", "--responses", script, "--turns", "1",
                 "--run-dir", tmp_path / "runs", "--json", tmp_path / "s.json", "--no-commit",
                 "--eval-memory-gib", "1")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "--eval-memory-gib allows 1.0 GiB" in proc.stderr and "the task needs ~1.6 GiB" in proc.stderr
    # No turn was generated, so nothing of it reached the model.
    assert not list((tmp_path / "runs").glob("*/turns.jsonl")) or all(
        not p.read_text().strip() for p in (tmp_path / "runs").glob("*/turns.jsonl"))


LARGE_TASK = TASK_SOURCE.replace("torch.randn(128, 512)", "torch.randn(1088, 65536)")  # 272 MiB per set


def test_inputs_too_large_to_store_are_drawn_per_set_and_answers_computed_again_within_the_plan(tmp_path):
    evaluator = _evaluator(tmp_path, LARGE_TASK, op_audit=False, correctness_trials=2, timed_runs=3, confirm_rounds=5)
    evaluator.probe()
    ref, fp = evaluator.reference, evaluator.footprint
    assert not ref.inputs_stored and not ref.answers_stored and ref.draw_s > 0
    assert fp.input_bytes == 1088 * 65536 * 4
    (result,) = evaluator.evaluate([runtime_source("honest_python")])
    # The end-of-run confirmation holds its fresh sets the same way: drawn again, answers computed again.
    confirmation = evaluator.confirm([runtime_source("honest_python")])
    evaluator.close()
    assert result.status.value == "correct", result.error
    (confirmed,) = confirmation.kernels
    assert confirmed.verified and confirmed.trials_passed == confirmed.trials > 0, confirmed.error
    use = result.memory
    assert use.planned_bytes == memory.planned(fp)
    # Six sets are drawn during the evaluation, on the host, which on cpu is the device: held one at a
    # time (two while the next is drawn). Resident memory also keeps what the C allocator retained of
    # freed temporaries (a set's worth or two here); a copy of every set, or two more copies of the
    # inputs and outputs per trial, would not fit.
    print(f"peak {use.peak_reserved_bytes / 2**20:.0f} MiB, plan {use.planned_bytes / 2**20:.0f} MiB, "
          f"footprint {fp.total / 2**20:.0f} MiB (reference peak {fp.peak_bytes / 2**20:.0f} MiB)")
    assert fp.input_bytes < use.peak_reserved_bytes <= use.planned_bytes + 4 * fp.input_bytes
    # The confirmation also holds the timing set for its rounds: one set more than an evaluation. Every
    # fresh set and its answer held at once (its first design) came to the plan plus eleven sets.
    held = confirmation.memory
    print(f"confirmation peak {held.peak_reserved_bytes / 2**20:.0f} MiB")
    assert fp.input_bytes < held.peak_reserved_bytes <= held.planned_bytes + 5 * fp.input_bytes


_COMPARE_SCRIPT = """
import torch
from kevin_agent.evaluate.worker import correctness, meter
correctness.COMPARE_CHUNK["cpu"] = 1 << 20  # 4 MiB pieces of float32
got = torch.rand(64 << 20)  # 256 MiB
want = got.clone()
want[12345] += 1.0
outcome = correctness.Outcome()
meter.start("cpu")
base = meter._resident()[0]
try:
    correctness.compare(got, want, 1e-4, 1e-4, outcome)
except correctness.Mismatch as exc:
    print("mismatch:", exc)
print("rise", meter._resident()[1] - base, "max_abs", outcome.max_abs_err)
"""


def test_comparing_a_large_output_holds_one_piece_at_a_time():
    import os
    import subprocess
    import sys

    # A fixed mmap threshold: each piece's temporaries go back to the system when freed, so the
    # high-water mark is what was live at once (glibc's moving threshold would keep freed pieces
    # on its heap and hide the difference).
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", _COMPARE_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "1 of 67108864 elements differ" in out.stdout
    words = out.stdout.split()
    rise, max_abs = int(words[words.index("rise") + 1]), float(words[words.index("max_abs") + 1])
    print(f"compare of 256 MiB in 4 MiB pieces: resident memory rose {rise / 2**20:.0f} MiB")
    # A handful of pieces' temporaries; keeping a view of each piece's differences (the largest
    # error's, as it once did) kept the whole output's worth of them (279 MiB against 39 MiB).
    assert rise < 128 << 20
    assert max_abs == pytest.approx(1.0, abs=1e-6)


def test_rescaled_inputs_are_scaled_in_place_only_where_nothing_else_can_see_them():
    from kevin_agent.evaluate.worker.taskcode import _rescale

    drawn = [torch.rand(1000), torch.arange(3)]
    alone, ints = drawn[0].data_ptr(), drawn[1].clone()
    expected = drawn[0].clone() * 0.37
    _rescale(drawn, 0.37)
    assert drawn[0].data_ptr() == alone and torch.equal(drawn[0], expected)  # in place, bitwise a copy's
    assert torch.equal(drawn[1], ints)  # integers are left as they are
    kept = [torch.rand(8)]  # a task that keeps its inputs (a module-level list)
    before = kept[0].clone()
    drawn = list(kept)
    _rescale(drawn, 2.0)
    assert torch.equal(kept[0], before) and torch.equal(drawn[0], before * 2.0)
    base = torch.rand(8)
    whole = base.clone()
    twice = torch.rand(4)
    drawn = [base[:4], twice, twice]
    del twice
    _rescale(drawn, 3.0)
    assert torch.equal(base, whole)  # a view's base is not scaled
    assert torch.equal(drawn[1], drawn[2]) and drawn[1].data_ptr() != drawn[2].data_ptr()  # once each


def test_the_recheck_lets_go_of_the_timed_inputs_before_its_ordinary_trial(tmp_path):
    import weakref

    from kevin_agent.evaluate.worker.candidate import recheck
    from kevin_agent.evaluate.worker.correctness import Outcome
    from kevin_agent.evaluate.worker.fingerprint import digests

    drawn: list[weakref.ref] = []

    class Sets:  # the reference data, as the re-check uses it
        @staticmethod
        def values(name):
            return [torch.full((1 << 16,), 2.0 if name == "recheck" else 3.0)]

        def draw(self, name):
            values = self.values(name)
            drawn.append(weakref.ref(values[0]))
            return values

        def digests(self, name):
            return digests(self.values(name))

        def expected(self, name, inputs):
            return inputs[0] * 2

        def poison_bytes(self):
            return 0

        def poison_unit(self):
            return 0

    timed = [torch.zeros(1 << 16)]
    timed_ref = weakref.ref(timed[0])
    alive_at_call: list[tuple[bool, ...]] = []

    def cand(x):
        alive_at_call.append(tuple(r() is not None for r in [timed_ref, *drawn]))
        return x * 2

    settings = EvalSettings(device="cpu", cache_dir=tmp_path)
    moved = recheck(settings, Sets(), cand, timed, Outcome())
    assert moved == 2 * (1 << 16) * 4 and timed == []
    # Call 1 runs on the timed tensor (the first draw written into it, then let go of); calls 2 and
    # 3 are the ordinary trial's, with nothing of the timed set left.
    assert alive_at_call[0] == (True, False)
    assert alive_at_call[1][:2] == (False, False) and alive_at_call[2][:2] == (False, False)
