"""Timing, the rule for hidden asynchronous work, the physical floor, the CUDA-graph column and the
tolerance presets, on the CPU (tests/evaluate/test_gpu.py covers the cuda side on a GPU)."""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

from ..clihelp import REPO, kevin  # noqa: E402
from ..run_records import correct, run_info, write_task  # noqa: E402

from kevin_agent.cli import build_parser  # noqa: E402
from kevin_agent.config import given_settings  # noqa: E402
from kevin_agent.config import load_config  # noqa: E402
from kevin_agent.evaluate.worker.correctness import Mismatch, Outcome, compare, set_reference_tf32, tolerance  # noqa: E402
from kevin_agent.evaluate.plausibility import BANDWIDTH_HEADROOM, implausibility, runtime_floor  # noqa: E402
from kevin_agent.evaluate.worker.runs import (HIDDEN_ABS_MS, HIDDEN_REL, Runs, hidden_work,  # noqa: E402
                                              hidden_work_refusal)
from kevin_agent.evaluate.worker.placements import Placements  # noqa: E402
from kevin_agent.evaluate.worker.graphs import NotCapturable, graph_calls, graph_column, graph_time  # noqa: E402
from kevin_agent.evaluate.worker.timing import Timer  # noqa: E402
from kevin_agent.formatting import fmt_graph, fmt_tolerance  # noqa: E402
from kevin_agent.delivery.kernel_module import header_lines  # noqa: E402
from kevin_agent.registry import build_registry  # noqa: E402
from kevin_agent.delivery.report import build_report_data, render_markdown  # noqa: E402
from kevin_agent.results import GraphTiming, SyncCheck  # noqa: E402

GB_S = 1e6  # bytes per ms in one GB/s


# --- the physical floor ------------------------------------------------------------------
def test_floor_is_bytes_over_bandwidth_with_headroom():
    floor = runtime_floor(8_000_000, 4000 * GB_S)  # 8 MB at 4 TB/s: 2 us, less the headroom
    assert floor.floor_ms == pytest.approx(0.002 / BANDWIDTH_HEADROOM["cuda"])
    assert runtime_floor(8_000_000, 4000 * GB_S, device="cpu").floor_ms == pytest.approx(0.002 / 4)
    assert floor.bandwidth_gb_s == pytest.approx(4000) and floor.bytes == 8_000_000 and floor.flops is None
    # Where the work that cannot be avoided is known, the slower of the two bounds is the floor.
    with_flops = runtime_floor(8_000_000, 4000 * GB_S, flops=2e12, flops_per_ms=1e12)
    assert with_flops.floor_ms == pytest.approx(2.0 / 1.25) and with_flops.flop_rate_tflop_s == pytest.approx(1000)
    assert runtime_floor(8_000_000, 4000 * GB_S, flops=1.0, flops_per_ms=1e12).floor_ms == floor.floor_ms


def test_honest_large_speedup_is_not_flagged_and_a_kernel_below_the_floor_is():
    # A C++ row sum of a 4096 x 4096 float32 matrix against a reference that loops over the rows
    # in Python: 114x faster, and physics allows it (64 MiB in, 16 KiB out, at 20 GB/s measured).
    moved = 4096 * 4096 * 4 + 4096 * 4
    floor = runtime_floor(moved, 20 * GB_S, device="cpu")
    kernel_ms, reference_ms = 6.0, 684.0
    assert reference_ms / kernel_ms == pytest.approx(114)
    assert implausibility(kernel_ms, floor) is None
    # rmsnorm 512 x 1024 on an H200 (4.8 TB/s): 5.4 us is plausible, 0.5 us is not.
    h200 = runtime_floor(2 * 512 * 1024 * 4, 4800 * GB_S)
    assert implausibility(0.0054, h200) is None
    flag = implausibility(0.0005, h200)
    assert flag is not None and flag.startswith("implausible runtime 0.0005 ms")
    assert "4194304 bytes" in flag and "4800 GB/s" in flag and f"{h200.floor_ms:.4g} ms" in flag


def test_the_floor_says_whether_its_bandwidth_was_measured_or_given():
    assert "4800 GB/s measured" in implausibility(0.0005, runtime_floor(2 * 512 * 1024 * 4, 4800 * GB_S))
    given = runtime_floor(2 * 512 * 1024 * 4, 4800 * GB_S, bandwidth_source="given")
    assert "4800 GB/s given" in implausibility(0.0005, given) and given.bandwidth_source == "given"


# --- hidden asynchronous work ------------------------------------------------------------
def _runs(stream_ms: float, after_ms: float, n: int = 21) -> Runs:
    # A little spread, so the medians are what the rule reads.
    jitter = [(i - n // 2) * 1e-4 for i in range(n)]
    return Runs([stream_ms + j for j in jitter], [stream_ms + after_ms + 2 * j for j in jitter])


def test_hidden_work_rule():
    overhead = 0.017
    honest = hidden_work(_runs(0.0054, overhead + 0.002), overhead)
    assert honest.hidden_ms == pytest.approx(0.002) and honest.limit_ms == HIDDEN_ABS_MS
    assert hidden_work_refusal(honest, _runs(0.0054, 0.019).stream) is None
    assert honest.synced.median_ms == pytest.approx(0.0054 + 0.019)
    # The side-stream trick: 2 ms of spinning that the stream time does not see.
    side = hidden_work(_runs(0.02, overhead + 2.0), overhead)
    error = hidden_work_refusal(side, _runs(0.02, overhead + 2.0).stream)
    assert error is not None and error.startswith("[no-streams] work ran outside the stream")
    assert "2 ms of work the timer did not see" in error and "0.017 ms" in error
    # A long kernel: the limit grows with its time, so noise of a few percent never trips it.
    long = hidden_work(_runs(3.0, overhead + 0.2), overhead)
    assert long.limit_ms == pytest.approx(HIDDEN_REL * 3.0)
    assert hidden_work_refusal(long, _runs(3.0, 0.2).stream) is None


def test_a_speedup_is_the_median_of_the_rounds_ratios_and_rounds_interleave():
    from kevin_agent.evaluate.worker.runs import speedup_of

    # Round by round: 10/1, 10/5, 30/3. The median of the ratios (10) is not the ratio of the
    # medians (10/3): a slow round slows both sides and cancels out of its own ratio.
    assert speedup_of(Runs([10.0, 10.0, 30.0], [0, 0, 0]), Runs([1.0, 5.0, 3.0], [0, 0, 0])) == 10.0
    order = []
    timer = Timer("cpu")
    first, second = timer.rounds([lambda: order.append("a"), lambda: order.append("b")], Placements([[]]), warmup=1, rounds=3)
    assert order == ["a", "b", "a", "b", "a", "b", "a", "b"]  # warm-up of each, then a, b per round
    assert len(first.stream_ms) == len(second.stream_ms) == 3


def test_graph_calls_fill_the_target_within_the_memory_budget():
    assert graph_calls(0.0021, 4 << 20) == 50
    assert graph_calls(0.5, 4 << 20) == 4
    assert graph_calls(30.0, 4 << 20) == 1
    assert graph_calls(0.001, 512 << 20) == 2


# --- the timer on the cpu ----------------------------------------------------------------
def test_cpu_timer_measures_wall_time():
    timer = Timer("cpu")
    calls = []
    runs = timer.runs(lambda: (calls.append(1), time.sleep(0.002)), (), warmup=2, runs=5)
    assert len(calls) == 7 and runs.stream.runs == 5
    assert runs.stream_ms == runs.synced_ms and runs.after_ms == 0.0
    assert all(t >= 2.0 for t in runs.stream_ms)
    assert timer.time(time.sleep, (0.001,), warmup=0, runs=3).min_ms >= 1.0
    assert timer.sync_overhead_ms(5) == 0.0
    with pytest.raises(NotCapturable, match="cuda device only"):
        graph_time(timer, lambda: None, (), calls=2, replays=2)


def test_graph_column_on_the_cpu_says_why_it_is_empty():
    x = [torch.randn(4, 8)]
    column = graph_column(Timer("cpu"), torch.nn.ReLU(), torch.nn.ReLU(), x, candidate_ms=0.01, replays=3)
    assert column.runtime is None and column.reference is None and column.speedup is None
    assert column.runtime_note == column.reference_note == "not capturable: CUDA graphs exist on the cuda device only"
    assert column.calls == 50


# --- tolerance presets -------------------------------------------------------------------
def test_presets_per_dtype_and_explicit_overrides():
    assert tolerance(torch.float32, None, None) == (1e-4, 1e-4)
    assert tolerance(torch.float32, None, None, "kernelbench") == (1e-2, 1e-2)
    assert tolerance(torch.float64, None, None, "kernelbench") == (1e-2, 1e-2)
    assert tolerance(torch.bfloat16, None, None, "kernelbench") == (2e-2, 2e-2)  # never tighter than strict
    assert tolerance(torch.float32, 1e-3, None, "kernelbench") == (1e-3, 1e-2)
    assert tolerance(torch.int32, None, None, "kernelbench") == (0.0, 0.0)
    ref = torch.linspace(-3, 3, 100)
    off = ref + 1e-3
    with pytest.raises(Mismatch, match="atol=0.0001"):
        compare(off, ref, None, None, Outcome())
    outcome = Outcome()
    compare(off, ref, None, None, outcome, "kernelbench")
    assert (outcome.atol, outcome.rtol) == (1e-2, 1e-2) and outcome.max_abs_err == pytest.approx(1e-3, rel=1e-2)
    with pytest.raises(Mismatch):
        compare(off, ref, 1e-4, 1e-4, Outcome(), "kernelbench")


def test_reference_tf32_is_an_explicit_switch():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        set_reference_tf32(True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        set_reference_tf32(False)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_tolerance_flags_reach_the_worker_settings():
    parser = build_parser(build_registry())
    args = parser.parse_args(["check", "ref.py", "cand.py", "--tolerance", "kernelbench", "--reference-tf32",
                              "--atol", "0.001"])
    settings = load_config(given_settings(args)).eval_settings("cpu")
    assert (settings.tolerance, settings.reference_tf32, settings.atol, settings.rtol) == ("kernelbench", True,
                                                                                            1e-3, None)
    default = load_config({}).eval_settings("cuda")
    assert (default.tolerance, default.reference_tf32) == ("strict", False)
    with pytest.raises(SystemExit):
        parser.parse_args(["check", "ref.py", "cand.py", "--tolerance", "loose"])


# --- the views -----------------------------------------------------------------------------
def _cuda_record():
    rec = correct(0, 1, 7.2)
    graph = GraphTiming(calls=50, runtime=rec.eval.runtime.model_copy(update={"median_ms": 0.0021}),
                        reference_note="not capturable: RuntimeError: operation not permitted when stream is capturing")
    sync = SyncCheck(synced=rec.eval.runtime, overhead_ms=0.017, hidden_ms=0.001, limit_ms=0.008)
    ev = rec.eval.model_copy(update={"device": "cuda", "graph": graph, "sync": sync, "tolerance": "kernelbench",
                                     "atol": 1e-2, "rtol": 1e-2, "reference_tf32": False,
                                     "floor": runtime_floor(4 << 20, 4800 * GB_S)})
    return rec.model_copy(update={"eval": ev})


def test_report_header_and_json_show_the_graph_column_and_the_tolerance(tmp_path):
    task = write_task(tmp_path)
    rec = _cuda_record()
    info = run_info(task, device="cuda")
    md = render_markdown(info, [rec])
    assert "| kernel in a CUDA graph (per call, 50 per graph) | 0.002100 |" in md
    assert ("| eager PyTorch in a CUDA graph (per call) | not capturable: RuntimeError: operation not permitted "
            "when stream is capturing |") in md
    assert "Times are the GPU's own time for each call" in md and "the host's launch speed is not in it" in md
    assert "- tolerance: kernelbench (atol 0.01, rtol 0.01), reference TF32 off" in md
    assert "- work off the stream: 1.0 µs" in md and "- physical floor: " in md and "implausible" not in md
    best = build_report_data(info, [rec]).model_dump(mode="json")["best"]
    assert best["cuda_graph"]["runtime"]["median_ms"] == 0.0021 and best["cuda_graph"]["reference"] is None
    assert best["correctness"]["tolerance"] == "kernelbench" and best["correctness"]["reference_tf32"] is False
    assert best["implausible"] is False and best["sync_check"]["overhead_ms"] == 0.017
    header = "\n".join(header_lines(task, rec, info))
    assert "in a CUDA graph: kernel 2.1 µs, eager not capturable: RuntimeError" in header
    assert "tolerance: kernelbench (atol 0.01, rtol 0.01), reference TF32 off" in header
    assert "the call queued whole before the start event" in header
    assert fmt_graph(correct(0, 1, 1.0).eval) is None and fmt_tolerance(correct(0, 1, 1.0).eval) is None


# --- end to end: kevin-opt check with a tolerance preset -----------------------------------
RMSNORM_OFF_BY_1E3 = (REPO / "examples" / "rmsnorm.py").read_text().replace(
    "return x * torch.rsqrt(variance + self.eps) * self.weight",
    "return x * torch.rsqrt(variance + self.eps) * self.weight * 1.001")


@pytest.mark.slow
def test_check_with_the_kernelbench_preset(tmp_path):
    """The example's C++ kernel against a reference 0.1% off: incorrect under strict, correct under
    kernelbench, and the JSON says which was used (the kernel is one the e2e tests build too)."""
    from kevin_agent.engine.parsing import parse_response

    lines = (REPO / "examples" / "rmsnorm.cpu.jsonl").read_text().splitlines()
    (tmp_path / "rmsnorm.py").write_text(RMSNORM_OFF_BY_1E3)
    (tmp_path / "cand.py").write_text(parse_response(json.loads(lines[3])["text"]).code)
    common = ["check", tmp_path / "rmsnorm.py", tmp_path / "cand.py", "--device", "cpu", "--timed-runs", "5"]
    strict = kevin(*common, "--json", tmp_path / "strict.json")
    assert strict.returncode == 1, strict.stderr
    out = json.loads((tmp_path / "strict.json").read_text())
    assert out["status"] == "incorrect" and out["tolerance"] == "strict" and out["atol"] == 1e-4
    assert any("differ beyond atol=0.0001" in r for r in out["reasons"])
    loose = kevin(*common, "--tolerance", "kernelbench", "--json", tmp_path / "kb.json")
    assert loose.returncode == 0, loose.stdout + loose.stderr
    out = json.loads((tmp_path / "kb.json").read_text())
    assert out["status"] == "correct" and out["tolerance"] == "kernelbench"
    assert (out["atol"], out["rtol"], out["reference_tf32"]) == (1e-2, 1e-2, False)
    assert 5e-4 < out["max_abs_err"] < 1e-2
    assert out["implausible"] is False and out["floor_ms"] > 0 and out["cuda_graph"] is None


def test_a_result_at_several_input_signatures_reads_in_one_line():
    from kevin_agent.formatting import fmt_signatures
    from kevin_agent.results import EvalResult, SignatureTiming, Stage, Status, TimingStats

    def ms(value: float) -> TimingStats:
        return TimingStats(median_ms=value, mean_ms=value, std_ms=0, min_ms=value, max_ms=value, p10_ms=value,
                           p90_ms=value, runs=3)

    ev = EvalResult(status=Status.CORRECT, stage=Stage.DONE, correct=True, weighted_speedup=2.1, signatures=[
        SignatureTiming(signature=0, count=24, inputs=["float32[64, 512]"], runtime=ms(1), reference=ms(2.3), speedup=2.3),
        SignatureTiming(signature=1, count=2, inputs=["float32[8, 512]"])])
    assert fmt_signatures(ev) == ("at 2 input signatures, weighted by use: 2.10x (#0 float32[64, 512] x24: 2.30x; "
                                  "#1 float32[8, 512] x2: checked)")
    assert fmt_signatures(ev.model_copy(update={"signatures": []})) is None


def test_rounds_go_round_the_placements_and_a_single_set_is_one_placement():
    from kevin_agent.evaluate.worker.placements import Placements

    drawn = iter(range(100))
    places = Placements.drawn(lambda: [next(drawn)], 3, "cpu")
    assert len(places) == 3 and places.first == [0]
    seen = []
    Timer("cpu").rounds([seen.append], places, warmup=1, rounds=7)
    # The warm-up at the first placement and one call at each other (a call's first time at a
    # placement allocates there), then round r at placement r mod 3.
    assert seen == [0, 1, 2] + [0, 1, 2, 0, 1, 2, 0]
    assert len(Placements([[5]])) == 1
    places.close()
    assert len(places) == 0
