"""The roofline: its floor from the bytes and FLOPs of a call at the measured speeds, the fractions
of a kernel's, eager's and torch.compile's times, and the device facts that give the peaks beside
them (NVML, nvidia-smi, or none on this machine)."""

from __future__ import annotations

import os
import stat

import pytest

from kevin_agent.evaluate.parent import machine
from kevin_agent.evaluate.plausibility import fraction, reached, roofline, runtime_floor
from kevin_agent.formatting import fmt_fraction, fmt_roofline
from kevin_agent.results.device import DeviceFacts, sm_count_from_cores

MB = 1_000_000


def test_a_call_that_moves_bytes_and_does_no_arithmetic_is_memory_bound():
    # 8 MB in and out at 4000 GB/s (4e9 bytes per ms): 2 us.
    roof = roofline(8 * MB, 4e9, flops=0.0, flops_per_ms=None, dtype="float32")
    assert roof.bound == "memory" and roof.floor_ms == pytest.approx(0.002)
    # Without the plausibility floor's headroom: the roofline is the longer of the two.
    assert runtime_floor(8 * MB, 4e9, device="cuda").floor_ms < roof.floor_ms
    done = reached(roof, kernel_ms=0.0025, reference_ms=0.01, compiled_ms=0.004)
    assert (done.fraction, done.reference_fraction, done.compiled_fraction) == pytest.approx((0.8, 0.2, 0.5))


def test_a_matmul_is_held_to_its_flops_where_they_take_longer_than_its_bytes():
    # 4096^3 x 2 FLOPs at 50 TFLOP/s (5e10 per ms) take 2.75 ms; its 200 MB take 0.05 ms.
    flops = 2 * 4096 ** 3
    roof = roofline(200 * MB, 4e9, flops=float(flops), flops_per_ms=5e10, dtype="float32")
    assert roof.bound == "compute" and roof.floor_ms == pytest.approx(flops / 5e10)
    assert roof.flop_rate_tflop_s == pytest.approx(50.0)
    assert reached(roof, kernel_ms=roof.floor_ms * 2).fraction == pytest.approx(0.5)


def test_no_time_or_no_floor_gives_no_fraction():
    roof = roofline(0, 4e6)
    assert fraction(roof, 1.0) is None and fraction(roofline(MB, 4e6), None) is None
    assert fmt_roofline(reached(roof, None)) is None


def test_the_roofline_in_words_names_the_bound_the_floor_and_what_pytorch_reaches():
    roof = reached(roofline(4_194_304, 16.4e6, dtype="float32"), 0.276, 0.684)
    text = fmt_roofline(roof)
    assert text.startswith("93% of its roofline (memory-bound: 4.19 MB at 16.4 GB/s measured, 0.256 ms)")
    assert text.endswith("; eager 37%")
    assert [fmt_fraction(v) for v in (0.004, 0.05, 0.93, 1.12)] == ["0.4%", "5%", "93%", "100% (in cache)"]  # never a share above 100%


# --- the device's facts ----------------------------------------------------------------------------
H200 = dict(name="NVIDIA H200", memory_total_bytes=150_754_820_096, memory_clock_mhz=3201, memory_bus_bits=6144,
            sm_clock_mhz=1980, sm_count=132, compute_capability="9.0")
"""NVML's values on an H200 (memory clock and SM clock at their maxima)."""


def test_an_h200s_facts_imply_its_data_sheet_peaks():
    facts = DeviceFacts(**H200)
    # 3201 MHz x 6144 bits / 8 x 2 transfers a clock.
    assert facts.bandwidth_gb_s == pytest.approx(4916.7, abs=0.1)
    # 132 SMs x 1980 MHz x 256 float32 FLOPs (128 FMAs) a clock; 4096 on the tensor cores in bf16.
    assert facts.tflop_s("float32") == pytest.approx(66.9, abs=0.1)
    assert facts.tflop_s("bfloat16") == pytest.approx(1070.5, abs=0.1)
    assert facts.tflop_s("int8") is None and DeviceFacts(name="x", compute_capability="99.0").tflop_s("float32") is None
    assert facts.peaks_words() == ("4917 GB/s (3201 MHz x 6144-bit bus x 2), 66.9 TFLOP/s float32, "
                                   "1.07e+03 TFLOP/s bfloat16 (132 SMs at 1980 MHz)")
    assert sm_count_from_cores(16896, "9.0") == 132 and sm_count_from_cores(16896, "1.0") is None


class RecordedNvml:
    """NVML's answers on an H200, as pynvml returns them (recorded; no GPU here): what ``read_facts``
    asks, without the library."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    class Memory:
        total, free = 150_754_820_096, 150_000_000_000

    class Attributes:
        multiprocessorCount = 132

    def nvmlDeviceGetName(self, handle):
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self.Memory()

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return (9, 0)

    def nvmlDeviceGetAttributes_v2(self, handle):
        return self.Attributes()

    def nvmlDeviceGetNumGpuCores(self, handle):
        return 16896

    def nvmlDeviceGetMaxClockInfo(self, handle, which):
        return {1: 1980, 2: 3201}[which]

    def nvmlDeviceGetMemoryBusWidth(self, handle):
        return 6144


class WithoutAttributes(RecordedNvml):
    """A driver that does not give the SM count directly (only the cores)."""

    def nvmlDeviceGetAttributes_v2(self, handle):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")


def test_the_facts_are_read_from_nvml_and_the_sms_from_the_cores_where_nvml_gives_no_count():
    assert machine.read_facts(RecordedNvml(), handle=0) == DeviceFacts(**H200, source="nvml")
    assert machine.read_facts(WithoutAttributes(), handle=0).sm_count == 132


def test_without_an_nvidia_driver_the_facts_fall_back_to_none_without_an_error(monkeypatch, tmp_path):
    # This machine has no GPU: NVML cannot start and there is no nvidia-smi on this PATH.
    monkeypatch.setenv("PATH", str(tmp_path))
    assert machine.device_facts() is None
    assert machine.host_device_name("cuda") == "" and machine.gpu_free_bytes() is None


def test_where_nvml_cannot_start_the_facts_come_from_nvidia_smi(monkeypatch, tmp_path):
    # A stand-in nvidia-smi printing what the real one prints for this query on an H200.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771, 3201, 1980, 9.0'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    facts = machine.device_facts()
    assert facts is not None and (facts.name, facts.source, facts.memory_clock_mhz) == ("NVIDIA H200", "nvidia-smi", 3201)
    # nvidia-smi gives neither the bus width nor the SMs: no peaks are implied, none is made up.
    assert facts.bandwidth_gb_s is None and facts.tflop_s("float32") is None and facts.peaks_words() == ""
    assert machine.parse_smi_facts("") is None and machine.parse_smi_facts("[N/A]") is None


# --- in a real evaluation ----------------------------------------------------------------------------
MATMUL_TASK = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(256, 512), torch.randn(512, 256)]


def get_init_inputs():
    return []
'''

MATMUL_CANDIDATE = '''\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.mm(a, b)
'''


@pytest.mark.slow
def test_a_matmul_is_counted_once_per_task_and_held_to_the_measured_flop_rate(tmp_path):
    from kevin_agent.evaluate import EvalSettings, LocalEvaluator
    from kevin_agent.results import Status
    from kevin_agent.task import load_task

    from ..evalfixtures import write_task

    task = load_task(write_task(tmp_path / "task", MATMUL_TASK, "matmul.py"))
    settings = EvalSettings(device="cpu", cache_dir=tmp_path / "b", warmup_runs=1, timed_runs=3, op_audit=False)
    evaluator = LocalEvaluator(task, settings)
    try:
        evaluator.probe()
        result = evaluator.submit(MATMUL_CANDIDATE).result(timeout=300)
    finally:
        evaluator.close()
    assert result.status is Status.CORRECT, result.error
    roof = result.roofline
    # torch.utils.flop_counter: 2 x 256 x 512 x 256, once per task, at the rate of a matmul measured there.
    assert roof.flops == 2 * 256 * 512 * 256 and roof.dtype == "float32" and roof.flop_rate_tflop_s > 0
    assert evaluator.reference.flops == roof.flops and evaluator.reference.flop_rate_per_ms > 0
    assert roof.bound == "compute" and roof.bytes == (256 * 512 * 2 + 256 * 256) * 4
    assert roof.floor_ms == pytest.approx(roof.flops / (roof.flop_rate_tflop_s * 1e9))
    assert roof.fraction == pytest.approx(roof.floor_ms / result.runtime.median_ms)
    assert roof.reference_fraction == pytest.approx(roof.floor_ms / result.reference.median_ms)
