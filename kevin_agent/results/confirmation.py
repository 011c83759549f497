"""The second look at a run's best kernels, and the kernel a run delivers."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .evaluation import LaunchedTiming, MemoryUse, Roofline, RuntimeFloor, TimingStats
from .turns import best_record


class ConfirmedSpeedup(BaseModel):
    """The headline of a confirmation: what a person quotes."""

    speedup_median: float
    """Median over the rounds of (eager reference time / kernel time), each round timing both."""
    ci95: list[float]
    """[low, high]: a 95% interval for that median (order statistics of the rounds' ratios)."""
    speedup_vs_compile_median: float | None = None
    """The same against ``torch.compile`` of the reference (None when it was not compared)."""
    runs: int
    """Rounds timed."""


class Confirmed(BaseModel):
    """One kernel's second look at the end of a run: verified again on fresh seeds, then timed
    head to head with the reference in rounds (``evaluate/worker/confirmation.py``)."""

    trajectory: int | None = None
    turn: int | None = None
    """The turn whose kernel this is (None until the engine names it)."""
    kernel_path: str = ""
    """Path of the kernel source, relative to the run directory."""
    run_speedup: float | None = None
    """The speedup its own turn measured."""
    verified: bool = False
    """It passed every check again; False: dropped, and ``error`` says why."""
    error: str = ""
    speedup_median: float | None = None
    ci95: list[float] | None = None
    speedup_vs_compile_median: float | None = None
    vs_compile_ci95: list[float] | None = None
    runs: int = 0
    """Rounds timed (each: this kernel once, the eager reference once, torch.compile once)."""
    runtime: TimingStats | None = None
    """This kernel's times over the rounds."""
    reference: TimingStats | None = None
    """The eager reference's times over the same rounds."""
    compiled_reference: TimingStats | None = None
    launched: LaunchedTiming | None = None
    """cuda: this kernel and the reference with their launches in the time (after the rounds)."""
    trials: int = 0
    trials_passed: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rounding: str = ""
    """Outputs beyond the tolerance that were as near the reference in float32 as the reference's own
    low-precision outputs are (accepted, and said so): the leaf furthest off, in words."""
    implausible: bool = False
    """Its median time over the rounds beat the physical floor (see ``EvalResult.implausible``)."""
    floor: RuntimeFloor | None = None
    roofline: Roofline | None = None
    """The roofline with the fractions of the pooled medians (kernel, eager, ``torch.compile``)."""
    flags: list[str] = Field(default_factory=list)
    worker_medians: list[float] = Field(default_factory=list)
    """Each confirmation worker's own median, where several pooled their rounds into the one above
    (``evaluate/rounds.py`` says why): how far a single process's number strays."""

    def headline(self) -> ConfirmedSpeedup | None:
        if not self.verified or self.speedup_median is None or self.ci95 is None:
            return None
        return ConfirmedSpeedup(speedup_median=self.speedup_median, ci95=self.ci95,
                                speedup_vs_compile_median=self.speedup_vs_compile_median, runs=self.runs)


class Confirmation(BaseModel):
    """The best few distinct kernels of a run, confirmed together: verified again and timed head to
    head in each of a few workers, their rounds pooled."""

    kernels: list[Confirmed]
    """In the order of their turns' own speedups, best first."""
    seed: int
    """Base seed of the first worker's fresh inputs (drawn for this confirmation; the run's seeds are
    far below it)."""
    seeds: list[int] = Field(default_factory=list)
    """Every worker's base seed, where several confirmed the kernels (each on fresh inputs of its own)."""
    device_name: str = ""
    memory: MemoryUse | None = None
    """The highest peak memory of the confirmation's workers, against the task's footprint."""
    key: str = ""
    """What was confirmed and how (the kernels' sources, the settings): a run that ends again with
    the same candidates and settings reuses this confirmation."""
    created_at: str = ""

    @property
    def winner(self) -> Confirmed | None:
        """The verified kernel with the highest confirmed median (the first of equals)."""
        best = None
        for kernel in self.kernels:
            if kernel.verified and kernel.speedup_median is not None and (
                    best is None or kernel.speedup_median > best.speedup_median):
                best = kernel
        return best

    @property
    def dropped(self) -> list[Confirmed]:
        return [k for k in self.kernels if not k.verified]


class BestKernel(BaseModel):
    trajectory: int
    turn: int
    speedup: float
    """The confirmed median where the run was confirmed, else the turn's own speedup."""
    kernel_path: str
    """Absolute path of the kernel source in the run directory."""
    run_speedup: float | None = None
    """The turn's own speedup (set when ``speedup`` is the confirmed one)."""
    confirmation: ConfirmedSpeedup | None = None
    """The confirmation's numbers (None: not confirmed, e.g. while the run goes on)."""
    implausible: bool = False
    """Flagged: faster than the physical floor allows."""

    @classmethod
    def of(cls, records, run_dir=None) -> BestKernel | None:
        """The best verified turn of ``records``, its kernel path joined to ``run_dir`` if given."""
        rec = best_record(records)
        if rec is None or rec.speedup is None:
            return None
        path = rec.kernel_path or ""
        return cls(trajectory=rec.trajectory, turn=rec.turn, speedup=rec.speedup,
                   kernel_path=str(run_dir / path) if run_dir is not None else path,
                   implausible=bool(rec.eval and rec.eval.implausible))

    @classmethod
    def confirmed(cls, kernel: Confirmed, run_dir=None) -> BestKernel:
        """A confirmation's winner."""
        path = kernel.kernel_path
        return cls(trajectory=kernel.trajectory, turn=kernel.turn, speedup=kernel.speedup_median,
                   kernel_path=str(run_dir / path) if run_dir is not None else path,
                   run_speedup=kernel.run_speedup, confirmation=kernel.headline(), implausible=kernel.implausible)
