"""The benchmark scripts run (on the cpu device, in their quick form); their numbers are for
people to read, so only the shape of the output is checked here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.backends.capacity import QWQ_32B

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
                           "--rounds", "20", "--tasks", "rmsnorm", "--workers", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| task | its turn | #1 median (95% interval) | #2 median (95% interval) | (max-min)/median |" in proc.stdout
    assert "| one worker's spread |" in proc.stdout
    (res,) = json.loads(out.read_text())
    assert res["task"] == "rmsnorm" and len(res["rows"]) == 2 and res["spread_pct"] >= 0
    for row in res["rows"]:
        low, high = row["ci95"]
        # Two workers' rounds, pooled: at most twenty each.
        assert row["verified"] and low <= row["median"] <= high and 40 >= row["runs"] > 20
        assert len(row["worker_medians"]) == 2


@pytest.mark.slow
def test_placement_benchmark_runs_its_three_conditions_on_the_cpu(tmp_path):
    out = tmp_path / "placement.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "placement.py"), "--device", "cpu", "--tasks",
                           "rmsnorm", "--processes", "2", "--pools", "2", "--turns", "2", "--cache", str(tmp_path),
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for condition in ("inputs", "params", "flush"):
        assert f"| rmsnorm | {condition} | 2 |" in proc.stdout
    rows = json.loads(out.read_text())["rmsnorm"]["rows"]
    assert len(rows) == 2 and all(len(r["raw"]["params"]["kernel"]) == 4 for r in rows)


def _generation_benchmark():
    import importlib.util

    spec = importlib.util.spec_from_file_location("generation_benchmark", REPO / "benchmarks" / "generation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


H200_BYTES = 143771 << 20
GiB = 1 << 30


@pytest.mark.parametrize(("quantization", "kv", "tp", "tokens", "sequences"), [
    # 143771 MiB x 0.80 = 120_603_856_076 B; minus weights, minus the 3 GiB reserve; / bytes per token.
    ("none", "auto", 1, (120_603_856_076 - 65_527_752_704 - 3 * GiB) // 262_144, 6),
    ("none", "fp8", 1, (120_603_856_076 - 65_527_752_704 - 3 * GiB) // 131_072, 12),
    ("fp8", "auto", 1, (120_603_856_076 - 34_322_130_944 - 3 * GiB) // 262_144, 9),
    ("fp8", "fp8", 1, (120_603_856_076 - 34_322_130_944 - 3 * GiB) // 131_072, 19),
    # Two GPUs: each holds half the weights and half of every token's KV heads.
    ("none", "auto", 2, (120_603_856_076 - 65_527_752_704 // 2 - 3 * GiB) // 131_072, 19),
])
def test_what_fits_on_an_h200_at_32k(quantization, kv, tp, tokens, sequences):
    estimate = _generation_benchmark().estimate_kv(QWQ_32B, gpu_bytes=H200_BYTES, gpu_memory_utilization=0.80, context_tokens=32768,
                           tensor_parallel_size=tp, quantization=quantization, kv_cache_dtype=kv)
    assert estimate.tokens == tokens
    assert estimate.sequences == sequences == tokens // 32768


def test_a_model_larger_than_the_share_fits_nothing():
    estimate = _generation_benchmark().estimate_kv(QWQ_32B, gpu_bytes=80 * GiB, gpu_memory_utilization=0.80, context_tokens=32768)
    assert (estimate.kv_bytes_per_gpu, estimate.tokens, estimate.sequences) == (0, 0, 0)




def test_a_configuration_the_deadline_killed_is_not_retried_without_cuda_graphs():
    try_eager = _generation_benchmark().try_eager
    failed = [{"config": "fp8", "error": "exit 1 after 40 s"}]
    assert try_eager(1, failed, ["fp8"])  # nothing ran: is it torch.compile or CUDA graphs?
    # Killed at the deadline (run 23 on the H200 then queued eager with no time left).
    assert not try_eager("timeout", [{"config": "fp8-ngram", "error": "exit timeout after 243 s"}], ["fp8-ngram"])
    assert not try_eager(1, [{"config": "bf16", "startup_s": 77.0}, *failed], ["bf16", "fp8"])  # one ran
    assert not try_eager(1, failed, ["fp8", "eager"])  # tried already


@pytest.mark.slow
def test_stages_benchmark_runs_on_the_cpu(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "stages.py"), "--device", "cpu",
                           "--no-compare-compile", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| case | probe s | | status | wall s | queue | compile | load | correctness | timing |" in proc.stdout
    (row,) = json.loads((tmp_path / "stages.json").read_text())
    assert row["case"] == "rmsnorm" and row["probe_s"] > 0
    assert row["first"]["status"] == row["again"]["status"] == "correct"
    assert row["again"]["cached_build"] and row["again"]["device_s"] > 0
    assert (tmp_path / "profiles.tar.gz").is_file()


def test_the_stages_benchmark_names_what_was_live_and_cached_at_a_workers_peak(tmp_path):
    import pickle

    sys.path.insert(0, str(REPO / "benchmarks"))
    import stages

    def frames(line: int, name: str) -> list[dict]:  # innermost first, as the allocator records them
        return [{"filename": "/site-packages/torch/functional.py", "line": 1, "name": "f"},
                {"filename": "/repo/kevin_agent/evaluate/worker/trials.py", "line": line, "name": name}]
    events = [{"action": "segment_alloc", "addr": 0, "size": 6 << 30},
              {"action": "alloc", "addr": 0, "size": 6 << 30, "frames": frames(10, "draw")},
              {"action": "segment_alloc", "addr": 1 << 40, "size": 12 << 30},
              {"action": "alloc", "addr": 1 << 40, "size": 12 << 30, "frames": frames(20, "poison")},
              {"action": "free_completed", "addr": 1 << 40, "size": 12 << 30},
              {"action": "segment_alloc", "addr": 2 << 40, "size": 1 << 30},  # the peak: 19 GiB
              {"action": "segment_free", "addr": 1 << 40, "size": 12 << 30}]
    path = tmp_path / "run-1.memory.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [events]}))
    peak = stages.peak_of(path, ("kevin_agent/",))
    assert peak["worker"] == "run-1" and peak["peak_reserved_gib"] == 19.0 and peak["live_at_peak_gib"] == 6.0
    assert peak["live_by_line"] == [{"line": "evaluate/worker/trials.py:10 draw", "gib": 6.0}]
    assert peak["cached_by_line"] == [{"line": "evaluate/worker/trials.py:20 poison", "gib": 12.0}]


@pytest.mark.slow
def test_roofline_benchmark_runs_on_the_cpu_and_writes_its_progress_as_it_goes(tmp_path):
    out = tmp_path / "roofline"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "roofline.py"), "--device", "cpu", "--tasks",
                           "rmsnorm", "--rounds", "20", "--workers", "1", "--ncu", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| task | bound | floor | kernel, its turn | kernel, confirmed | eager | torch.compile |" in proc.stdout
    (row,) = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert row["task"] == "rmsnorm" and row["bound"] == "memory" and row["verified"]
    assert row["turn_fraction"] > 0 and row["confirmed_fraction"] > 0 and row["eager_fraction"] > 0
    log = (out / "progress.log").read_text()
    assert "relu_6gb: left out on the cpu device" in log and "rmsnorm: its turn reached" in log
    # Nsight Compute cannot run here; the benchmark says why and finishes.
    assert "ncu: not run: the cpu device: Nsight Compute profiles CUDA kernels" in (out / "roofline.md").read_text()


def test_model_noise_benchmark_times_the_example_against_itself(tmp_path):
    out = tmp_path / "noise.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "model_noise.py"), "--times", "2", "--rounds",
                           "1", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| # | speedup (interleaved) | speedup (workers apart) |" in proc.stdout and "interleaved:   median" in proc.stdout
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 2
    # the "kernel" is the module's own code, installed at each of the group's three modules
    assert all(r["kernel_calls"] == 3 and r["fallback_calls"] == 0 and r["outputs_match"] for r in data["rows"])


@pytest.mark.slow
def test_bench_benchmark_runs_on_the_cpu(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench.py"), "--device", "cpu", "--tasks",
                           "rmsnorm", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| task | correct | bench: wall s | alone: wall s | bench: builds s | alone: builds s |" in proc.stdout
    (row,) = json.loads((out / "bench.json").read_text())["rows"]
    assert row["task"] == "rmsnorm" and row["correct"] and row["bench_device_s"] > 0 and row["single_device_s"] > 0
    # Each side started from an empty cache of its own: each built the kernel, neither found the other's.
    assert row["bench_compile_s"] > 1 and row["single_compile_s"] > 1
    assert (out / "cache-bench").is_dir() and (out / "cache-alone").is_dir()
    assert "kevin-opt: [1/1] tasks/rmsnorm: correct" in (out / "progress.log").read_text()


@pytest.mark.slow
def test_triton_examples_benchmark_runs_on_the_cpu_in_the_interpreter(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "triton"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "triton_examples.py"), "--device", "cpu",
                           "--tasks", "softmax", "--rounds", "5", "--workers", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| task | Triton ms | C++ ms | torch.compile ms |" in proc.stdout
    softmax, relu = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert softmax["task"] == "softmax" and softmax["triton"]["verified"] and softmax["cuda"]["verified"]
    assert softmax["triton"]["ms"] > 0 and softmax["cuda"]["ms"] > 0 and softmax["vs_cuda"] > 0
    assert any("Triton's interpreter" in f for f in softmax["triton"]["flags"])
    assert relu["task"] == "relu_6gb" and relu["triton"]["verified"] and relu["triton"]["roofline_fraction"] > 0
    assert "KernelBench 19_ReLU (small), Triton:" in (out / "triton_examples.md").read_text()
