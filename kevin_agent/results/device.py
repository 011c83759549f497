"""What the GPU's own management library says about it, and the peaks those facts imply.

``evaluate/parent/machine.py`` reads the facts from NVML (``nvidia-smi``'s text where NVML is
not there); what they imply is arithmetic on the data sheet's terms:

    bandwidth = memory clock x bus width / 8 x 2 (two transfers a clock: DDR, HBM)
    FLOP rate = SMs x SM clock x FLOPs per SM per clock (the architecture's, per dtype)

both at the highest clocks NVML reports, so what a kernel reaches is measured against the measured
bandwidth and FLOP rate (``Roofline``); these are shown beside them, for what the device could do.
"""

from __future__ import annotations

from pydantic import BaseModel

FLOPS_PER_SM_CLOCK: dict[str, dict[str, int]] = {
    # Dense (no sparsity) FLOPs per SM per clock, from the architecture whitepapers: float32 and
    # float64 on the CUDA cores (float64 on the tensor cores from 8.0 on), tf32, float16 and bfloat16
    # on the tensor cores, accumulating in float32.
    "7.0": {"float64": 64, "float32": 128, "float16": 1024},
    "7.5": {"float64": 4, "float32": 128, "float16": 1024},
    "8.0": {"float64": 128, "float32": 128, "tf32": 1024, "float16": 2048, "bfloat16": 2048},
    "8.6": {"float64": 4, "float32": 256, "tf32": 512, "float16": 1024, "bfloat16": 1024},
    "8.9": {"float64": 4, "float32": 256, "tf32": 512, "float16": 1024, "bfloat16": 1024},
    "9.0": {"float64": 256, "float32": 256, "tf32": 2048, "float16": 4096, "bfloat16": 4096},
    "10.0": {"float64": 128, "float32": 256, "tf32": 4096, "float16": 8192, "bfloat16": 8192},
}
"""By compute capability, then dtype."""

CORES_PER_SM = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.9": 128, "9.0": 128, "10.0": 128}
"""CUDA cores per SM: the SM count where NVML gives only the cores."""


class DeviceFacts(BaseModel):
    """A GPU as its driver describes it (None: the driver did not say)."""

    name: str
    memory_total_bytes: int | None = None
    memory_clock_mhz: int | None = None
    """The highest memory clock."""
    memory_bus_bits: int | None = None
    sm_clock_mhz: int | None = None
    """The highest SM clock."""
    sm_count: int | None = None
    compute_capability: str = ""
    """``9.0`` for Hopper."""
    source: str = "nvml"
    """``nvml``, or ``nvidia-smi`` where the library could not be loaded."""

    @property
    def bandwidth_gb_s(self) -> float | None:
        """The memory's bandwidth by the data sheet's arithmetic, in GB/s (None when a term is missing)."""
        if not self.memory_clock_mhz or not self.memory_bus_bits:
            return None
        return self.memory_clock_mhz * 1e6 * self.memory_bus_bits / 8 * 2 / 1e9

    def tflop_s(self, dtype: str) -> float | None:
        """The FLOP rate for ``dtype`` (``float32``, ``tf32``, ``bfloat16`` ...), in TFLOP/s; None
        for an architecture or dtype the table does not hold."""
        per_clock = FLOPS_PER_SM_CLOCK.get(self.compute_capability, {}).get(dtype)
        if not per_clock or not self.sm_count or not self.sm_clock_mhz:
            return None
        return self.sm_count * self.sm_clock_mhz * 1e6 * per_clock / 1e12

    def peaks_words(self, dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> str:
        """The peaks in a line: ``4917 GB/s (3201 MHz x 6144-bit bus x 2), 66.9 TFLOP/s float32,
        1070 TFLOP/s bfloat16 (132 SMs at 1980 MHz)``; '' when the facts imply none."""
        parts = []
        if (bandwidth := self.bandwidth_gb_s) is not None:
            parts.append(f"{bandwidth:.0f} GB/s ({self.memory_clock_mhz} MHz x {self.memory_bus_bits}-bit bus x 2)")
        rates = [f"{rate:.3g} TFLOP/s {dtype}" for dtype in dtypes if (rate := self.tflop_s(dtype)) is not None]
        if rates:
            parts.append(", ".join(rates) + f" ({self.sm_count} SMs at {self.sm_clock_mhz} MHz)")
        return ", ".join(parts)


def sm_count_from_cores(cores: int, compute_capability: str) -> int | None:
    """SMs from CUDA cores, for an architecture whose cores per SM are known."""
    per_sm = CORES_PER_SM.get(compute_capability)
    return cores // per_sm if per_sm and cores else None
