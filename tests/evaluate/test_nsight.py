"""Nsight Compute on request: reading ncu's CSV into a short record (a sample written from ncu's
documented layouts, `data/ncu_raw.csv`), the command it is run with, and the clear messages where
this machine cannot profile (no NVIDIA GPU here, no ncu, counters not permitted), never a traceback."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ..clihelp import kevin
from ..tui_support import build_store
from kevin_agent.errors import EnvironmentUnavailable, UsageError
from kevin_agent.evaluate import EvalSettings
from kevin_agent.evaluate.parent import nsight
from kevin_agent.formatting import ncu_lines
from kevin_agent.results.ncu import NcuProfile, Stall
from kevin_agent.run.nsight import profile_turn

DATA = Path(__file__).parent / "data"
RUN_ID = "20250101-120000-affine-0001"


def test_the_raw_page_gives_each_kernel_its_throughputs_occupancy_resources_and_top_stalls():
    kernels = nsight.parse_raw_csv((DATA / "ncu_raw.csv").read_text())
    assert [(k.name, k.launches) for k in kernels] == [("rmsnorm_kernel", 2), ("scale_rows", 1)]
    rms = kernels[0]
    # The first launch's numbers, thousands separators and all.
    assert (rms.duration_us, rms.dram_pct, rms.sm_pct, rms.occupancy_pct) == (12.544, 87.31, 23.5, 71.2)
    assert (rms.registers_per_thread, rms.shared_static_bytes, rms.shared_dynamic_bytes) == (32, 0, 1024)
    assert (rms.block_size, rms.grid_size) == ("256", "8192")
    # The three largest stalls; a warp being selected to issue is no stall.
    assert rms.stalls == [Stall(reason="long_scoreboard", value=6.85), Stall(reason="wait", value=1.21),
                          Stall(reason="short_scoreboard", value=0.52)]
    # A value ncu could not give (n/a) is left out, not read as zero.
    assert [s.reason for s in kernels[1].stalls] == ["wait", "long_scoreboard", "short_scoreboard"]


def test_the_details_page_layout_a_row_per_metric_reads_the_same():
    header = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
              '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
    rows = [("GPU Speed Of Light Throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "91.2"),
            ("GPU Speed Of Light Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.0"),
            ("Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active", "%", "88.4"),
            ("Launch Statistics", "launch__registers_per_thread", "register/thread", "16")]
    text = "\n".join([header] + [f'"0","7","python3","h","relu_kernel","1","7","(1024, 1, 1)","(6144, 1, 1)","0",'
                                 f'"9.0","{s}","{m}","{u}","{v}"' for s, m, u, v in rows])
    (kernel,) = nsight.parse_raw_csv(text)
    assert (kernel.name, kernel.dram_pct, kernel.sm_pct, kernel.occupancy_pct, kernel.registers_per_thread) == (
        "relu_kernel", 91.2, 12.0, 88.4, 16)
    assert kernel.block_size == "(1024, 1, 1)" and kernel.duration_us is None
    assert nsight.parse_raw_csv("==ERROR== the application returned an error") == []


def test_the_record_reads_in_a_few_lines():
    profile = NcuProfile(run_id=RUN_ID, trajectory=0, turn=3, device_name="NVIDIA H200",
                         report_path="ncu/t0-turn3.ncu-rep", kernels=nsight.parse_raw_csv((DATA / "ncu_raw.csv").read_text()))
    lines = ncu_lines(profile)
    assert lines[0] == ("Nsight Compute, trajectory 0 turn 3 on NVIDIA H200 (full report: ncu/t0-turn3.ncu-rep, "
                        "open it with ncu-ui):")
    assert lines[1] == "  rmsnorm_kernel x2: 12.5 µs"
    assert lines[2] == ("    DRAM 87% of peak, SM 24% of peak, achieved occupancy 71%; 32 registers/thread, "
                        "shared memory 0 B static + 1024 B dynamic per block; block 256, grid 8192")
    assert lines[3] == "    warps stalled most on: long_scoreboard (6.85), wait (1.21), short_scoreboard (0.52)"


def test_the_command_profiles_only_the_candidates_kernels_with_the_clocks_as_they_run(tmp_path):
    source = ("template <int N> __global__ void __launch_bounds__(256) rms_kernel(float* x) {}\n"
              "__global__ void add(const float* a) {}\n")
    names = nsight.kernel_names(source)
    assert names == ["rms_kernel", "add"]
    command = nsight.profile_command("ncu", tmp_path / "t0-turn1", tmp_path / "job.json", names)
    joined = " ".join(command)
    assert "--clock-control none" in joined and f"--launch-count {nsight.LAUNCHES}" in joined
    assert "--nvtx --nvtx-include kevin-candidate/" in joined and r"-k regex:^(rms_kernel|add)\b" in joined
    assert command[-3:] == ["-m", "kevin_agent.evaluate.worker.ncu_target", str(tmp_path / "job.json")]
    assert "--section WarpStateStats" in joined and "launch__registers_per_thread" in joined
    assert nsight.import_command("ncu", Path("r.ncu-rep")) == [
        "ncu", "--import", "r.ncu-rep", "--csv", "--page", "raw", "--print-units", "base"]


def _fake_ncu(folder: Path, output: str, status: int) -> Path:
    """A stand-in ncu printing what the real one prints when the driver refuses it."""
    ncu = folder / "ncu"
    ncu.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {status}\n")
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    return ncu


def test_counters_not_permitted_become_a_message_with_what_to_do(tmp_path, monkeypatch):
    said = ("==PROF== Connected to process 4242\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
            "access NVIDIA GPU Performance Counters on the target device 0.")
    ncu = _fake_ncu(tmp_path, said, 1)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nsight.find_ncu() == str(ncu)
    status, out = nsight.run_ncu([str(ncu), "--version"], env={}, timeout_s=30, cwd=tmp_path)
    refused = nsight.refusal(out)
    assert status == 1 and isinstance(refused, EnvironmentUnavailable) and refused.exit_code == 3
    assert "ERR_NVGPUCTRPERM" in refused.message and "NVreg_RestrictProfilingToAdminUsers=0" in refused.hint
    assert nsight.refusal("==PROF== Disconnected from process 4242") is None


def test_without_an_nvidia_gpu_here_profiling_says_so(tmp_path):
    settings = EvalSettings(device="cuda", cache_dir=tmp_path / "builds")
    with pytest.raises(EnvironmentUnavailable, match="no NVIDIA GPU is visible here"):
        nsight.profile_kernel("__global__ void k() {}", task_path=tmp_path / "t.py", class_name="Model",
                              settings=settings, report=tmp_path / "ncu" / "t0-turn1")


def test_a_turn_of_a_cpu_run_or_one_without_a_kernel_is_refused_clearly(tmp_path):
    root = build_store(tmp_path / "runs")
    with pytest.raises(EnvironmentUnavailable, match="ran on the cpu device .*Nsight Compute profiles CUDA kernels"):
        profile_turn(root / RUN_ID, 0, 3)
    with pytest.raises(UsageError, match="has no verified kernel \\(parse_error\\)"):
        profile_turn(root / RUN_ID, 0, 1)
    assert not (root / RUN_ID / "ncu").exists()


def test_show_ncu_on_this_machine_is_a_message_and_an_exit_code_never_a_traceback(tmp_path):
    root = build_store(tmp_path / "runs")
    proc = kevin("show", RUN_ID, "--run-dir", root, "--turn", "3", "--ncu")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "ran on the cpu device" in proc.stderr and "hint: profile a turn of a run made on an NVIDIA GPU" in proc.stderr
    usage = kevin("show", RUN_ID, "--run-dir", root, "--ncu")
    assert usage.returncode == 2 and "--ncu profiles one turn's kernel" in usage.stderr
