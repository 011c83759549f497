"""The JSON files kevin-opt writes for people and their tools, each one model with the same names
for the same facts: the run's ``--json`` summary, the report's ``.json``, ``kevin-opt check --json``
and ``kevin-opt history --json``. ``docs/records.md`` describes them field by field.

Every file carries ``schema`` (``SCHEMA``, bumped when a field changes meaning or is removed) and
``kind``. A turn is the same ``TurnView`` in every file; a time is milliseconds in a field ending
``_ms``; a speedup is the eager reference's time over the kernel's. ``to_json`` is the one
serializer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from .confirmation import Confirmed, ConfirmedSpeedup
from .device import DeviceFacts
from .evaluation import (Correctness, EvalResult, GraphTiming, LaunchedTiming, MemoryUse, Roofline, RuntimeFloor,
                         SignatureTiming,
                         StageTimes, SyncCheck, TimingStats)
from .turns import TurnRecord
from .versioned import Versioned, schema_field

SCHEMA = 2
"""The layout of every JSON record below (1: the first shared layout; 2: the roofline, each turn's
``roofline_fraction`` and ``roofline_bound``, ``roofline`` in ``best`` and ``check``, the device's
``device_facts``; the report's own ``format`` 3 and the summary's unnumbered fields before 1 map as
``docs/records.md`` says)."""


class Record(Versioned):
    """A file written for people and their tools: ``schema`` first, then ``kind`` (each subclass
    names its own)."""

    schema_: int = schema_field(SCHEMA)


def to_json(record: BaseModel) -> str:
    """The one way a record becomes a file."""
    return record.model_dump_json(indent=2, by_alias=True) + "\n"


def _ms(stats: TimingStats | None) -> float | None:
    return stats.median_ms if stats is not None else None


class TurnView(BaseModel):
    """One turn, as every record lists it."""

    trajectory: int
    turn: int
    parent_trajectory: int | None = None
    parent_turn: int | None = None
    status: str
    speedup: float | None = None
    """The turn's own speedup (verified turns only)."""
    speedup_vs_compile: float | None = None
    runtime_ms: float | None = None
    """The kernel's median time in its turn."""
    reference_ms: float | None = None
    """The eager reference's median time in the same worker."""
    roofline_fraction: float | None = None
    """The share of the task's roofline the kernel reached in its turn (verified turns only)."""
    roofline_bound: str | None = None
    """``memory`` or ``compute``: which the roofline's floor is set by."""
    feedback: str = ""
    flags: list[str] = Field(default_factory=list)
    implausible: bool = False
    kernel_path: str | None = None
    """The kernel's source, relative to the run directory."""

    @classmethod
    def of(cls, rec: TurnRecord) -> TurnView:
        ev = rec.eval
        roof = ev.roofline if ev is not None and rec.correct else None
        return cls(trajectory=rec.trajectory, turn=rec.turn, parent_trajectory=rec.parent_trajectory,
                   parent_turn=rec.parent_turn, status=rec.status.value, speedup=rec.speedup,
                   speedup_vs_compile=ev.speedup_vs_compile if ev is not None and rec.correct else None,
                   runtime_ms=_ms(ev.runtime) if ev is not None else None,
                   reference_ms=_ms(ev.reference) if ev is not None else None,
                   roofline_fraction=roof.fraction if roof is not None else None,
                   roofline_bound=roof.bound if roof is not None else None, feedback=rec.feedback,
                   flags=list(ev.flags) if ev is not None else [], implausible=bool(ev and ev.implausible),
                   kernel_path=rec.kernel_path)


def turn_views(records) -> list[TurnView]:
    """Every turn, trajectory by trajectory, in the order they happened."""
    return [TurnView.of(r) for r in sorted(records, key=lambda r: (r.trajectory, r.turn))]


class Timings(BaseModel):
    """The best kernel's times (its confirmation's where it was confirmed)."""

    kernel: TimingStats | None = None
    eager: TimingStats | None = None
    torch_compile: TimingStats | None = None


class BestView(BaseModel):
    """The winner of a run: its confirmed numbers where it was confirmed, its turn's beside them."""

    trajectory: int
    turn: int
    speedup: float
    """The confirmed median where the run was confirmed, else the turn's own speedup."""
    speedup_vs_compile: float | None = None
    run_speedup: float | None = None
    """The turn's own speedup."""
    confirmation: ConfirmedSpeedup | None = None
    implausible: bool = False
    flag: str | None = None
    """Why it is flagged (the physical floor it beat), when ``implausible``."""
    runtime_ms: float | None = None
    reference_ms: float | None = None
    kernel_path: str | None = None
    device_name: str = ""
    timings: Timings | None = None
    cuda_graph: GraphTiming | None = None
    launched: LaunchedTiming | None = None
    signatures: list[SignatureTiming] = Field(default_factory=list)
    weighted_speedup: float | None = None
    memory: MemoryUse | None = None
    sync_check: SyncCheck | None = None
    floor: RuntimeFloor | None = None
    roofline: Roofline | None = None
    """How close the kernel (its confirmed median where it was confirmed), eager PyTorch and
    ``torch.compile`` come to the task's roofline."""
    correctness: Correctness | None = None
    flags: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, best, kernel_path: str | None) -> BestView:
        """``best``: an ``results.winner.Winner``."""
        ev, confirmed = best.record.eval, best.confirmed
        times = confirmed if confirmed is not None else ev
        evidence = confirmed or ev
        return cls(
            trajectory=best.trajectory, turn=best.turn, speedup=best.speedup,
            speedup_vs_compile=best.speedup_vs_compile, run_speedup=best.record.speedup,
            confirmation=best.headline, implausible=best.flag is not None, flag=best.flag,
            runtime_ms=_ms(times.runtime) if times is not None else None,
            reference_ms=_ms(times.reference) if times is not None else None, kernel_path=kernel_path,
            device_name=ev.device_name if ev is not None else "",
            timings=Timings(kernel=times.runtime, eager=times.reference, torch_compile=times.compiled_reference)
            if times is not None else None,
            cuda_graph=ev.graph if ev is not None else None,
            launched=(times.launched if times is not None else None),
            signatures=list(ev.signatures) if ev is not None else [],
            weighted_speedup=ev.weighted_speedup if ev is not None else None,
            memory=ev.memory if ev is not None else None, sync_check=ev.sync if ev is not None else None,
            floor=evidence.floor if evidence is not None else None,
            roofline=best.roofline,
            correctness=Correctness.of(ev) if ev is not None else None,
            flags=list(dict.fromkeys((ev.flags if ev is not None else []) + (confirmed.flags if confirmed else []))))


class DeliveryView(BaseModel):
    outcome: str
    headline: str
    plan: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class RunSummary(Record):
    """``kevin-opt run --json PATH``: how the run ended and what it delivered."""

    kind: Literal["run-summary"] = "run-summary"
    run_id: str
    task: str
    device: str
    device_name: str = ""
    language: str = "cuda"
    backend: str
    model: str
    run_dir: str
    reason: str
    exit_code: int
    error: str | None = None
    signal: str | None = None
    turns: list[TurnView]
    best: BestView | None = None
    confirmation: list[Confirmed] | None = None
    delivery: DeliveryView | None = None
    commit: str | None = None
    kernel_module: str | None = None
    report: dict | None = None
    """Where the report's files went (``ReportPaths``)."""
    e2e: E2EResult | None = None
    """On a task kevin-opt extract wrote: the whole model with and without the kernel, before the commit."""


class CheckRecord(Record):
    """``kevin-opt check --json PATH``: one candidate against a task."""

    kind: Literal["check"] = "check"
    status: str
    correct: bool
    speedup: float | None = None
    speedup_vs_compile: float | None = None
    runtime_ms: float | None = None
    reference_ms: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    tolerance: str | None = None
    atol: float | None = None
    rtol: float | None = None
    reference_tf32: bool | None = None
    implausible: bool = False
    floor_ms: float | None = None
    roofline: Roofline | None = None
    device_facts: DeviceFacts | None = None
    """What the GPU's driver says about it, and the peaks that implies (None off NVIDIA GPUs)."""
    cuda_graph: GraphTiming | None = None
    launched: LaunchedTiming | None = None
    signatures: list[SignatureTiming] = Field(default_factory=list)
    weighted_speedup: float | None = None
    sync_check: SyncCheck | None = None
    memory: MemoryUse | None = None
    memory_ratio: float | None = None
    """Peak reserved memory over the task's footprint."""
    stage_s: StageTimes | None = None
    wall_s: float | None = None
    reasons: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, status: str, result: EvalResult | None, reasons: list[str], *, tolerance: str,
           reference_tf32: bool, device_facts: DeviceFacts | None = None) -> CheckRecord:
        r = result
        return cls(
            status=status, correct=bool(r and r.correct), speedup=r.speedup if r else None,
            speedup_vs_compile=r.speedup_vs_compile if r else None, runtime_ms=_ms(r.runtime) if r else None,
            reference_ms=_ms(r.reference) if r else None, max_abs_err=r.max_abs_err if r else None,
            max_rel_err=r.max_rel_err if r else None, tolerance=r.tolerance if r else tolerance,
            atol=r.atol if r else None, rtol=r.rtol if r else None,
            reference_tf32=r.reference_tf32 if r else reference_tf32, implausible=bool(r and r.implausible),
            floor_ms=r.floor.floor_ms if r and r.floor else None, roofline=r.roofline if r else None,
            device_facts=device_facts, cuda_graph=r.graph if r else None,
            launched=r.launched if r else None, signatures=list(r.signatures) if r else [],
            weighted_speedup=r.weighted_speedup if r else None, sync_check=r.sync if r else None,
            memory=r.memory if r else None, memory_ratio=round(r.memory.ratio, 3) if r and r.memory else None,
            stage_s=r.stage_s if r else None, wall_s=r.wall_s if r else None, reasons=reasons)


class TaskView(BaseModel):
    file: str
    """The task file's name only: the report is committed, the person's absolute paths are not."""
    name: str
    class_name: str
    digest: str


class ConfirmationView(BaseModel):
    seed: int
    seeds: list[int] = Field(default_factory=list)
    """Every confirmation worker's base seed (each verified on fresh inputs of its own)."""
    created_at: str = ""
    kernels: list[Confirmed]


class FlagView(BaseModel):
    trajectory: int
    turn: int
    flag: str


class ReportRecord(Record):
    """``<stem>_kevin_report.json``, beside the report's markdown."""

    kind: Literal["report"] = "report"
    run_id: str
    status: str
    created_at: str
    task: TaskView
    device: str
    device_name: str = ""
    device_facts: DeviceFacts | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    backend: str
    model: str
    turns_per_trajectory: int
    trajectories: int
    status_counts: dict[str, int] = Field(default_factory=dict)
    best: BestView | None = None
    confirmation: ConfirmationView | None = None
    flags: list[FlagView] = Field(default_factory=list)
    turns: list[TurnView]
    stage_totals_s: dict | None = None
    commit: str | None = None
    e2e: E2EResult | None = None
    """As in the summary: the whole model with and without the kernel."""


class KernelEffect(BaseModel):
    """One kernel of several put into the whole model together (``E2EResult.kernels``)."""

    kernel_file: str
    module: str
    """The modules it goes into: a group's name (``layers.*.norm x3``) or one path."""
    members: list[str]
    share: float | None = None
    """Its modules' share of the forward, from the profile; once kept, of those that run beside the
    other kept kernels (not those inside another's modules)."""
    module_speedup: float | None = None
    """The kernel's own speedup, as its module claims it (confirmed, where the run confirmed it)."""
    kernel_calls: float = 0.0
    """Per forward, over all its modules."""
    fallback_calls: float = 0.0
    """Per forward, calls at its modules that ran the original forward."""
    member_calls: dict[str, list[float]] = Field(default_factory=dict)
    """Per forward, at each of its modules (its path): [kernel calls, original-forward calls]."""
    outputs_match: bool = True
    """The model's outputs with this kernel alone match those without any."""
    mismatch: str = ""
    contribution: float | None = None
    """The whole model with every kept kernel but this one over with all of them (the median of
    the rounds): what it adds; below 1, the model is faster without it."""
    contribution_interval: list[float] | None = None
    """The 95% interval of that median (low, high); a kernel is dropped for slowing the model only
    where the whole interval is below 1."""
    dropped: str = ""
    """Why it was left out of the combination (empty: kept)."""


class E2EResult(Record):
    """``kevin-opt e2e``: the whole model with and without the kernel (or kernels), each in fresh workers."""

    kind: Literal["e2e"] = "e2e"
    model_file: str
    kernel_file: str
    """The kernel module; with several, the kept ones, comma-separated (every one: ``kernels``)."""
    module: str
    device: str
    device_name: str
    baseline_ms: float
    """Median forward in a worker without the kernel (the best of the rounds)."""
    kernel_ms: float
    """Median forward in a worker with the kernel installed (the best of the rounds)."""
    speedup: float
    """The whole model's speedup: in each round's worker with the kernel, the model timed with it
    and without it call by call, interleaved; the median of every round's ratios pooled."""
    workers_speedup: float
    """baseline_ms / kernel_ms: the same from two workers apart (load on the machine moves it more)."""
    speedup_interval: list[float] | None = None
    """The 95% interval of ``speedup``'s median, over every round's ratio of every worker pooled."""
    share: float | None
    """The module's share of the forward, from the profile (with several kernels: the kept ones' summed)."""
    module_speedup: float | None
    """The kernel's own speedup, as its module claims it (None with several: see ``kernels``)."""
    predicted: float | None
    """Amdahl: 1 / ((1 - share) + share / module_speedup); with several kernels, for the kept ones
    together: 1 / (1 - sum(share_i) + sum(share_i / speedup_i))."""
    outputs_match: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch: str = ""
    rounding: str = ""
    """Where the outputs differ beyond the tolerance but are as close to the model's own in float32
    as its bf16 or fp16 outputs are (they then count as matching): that, in words."""
    tolerance: str = "strict"
    kernel_calls: float
    """Calls per forward that took the kernel."""
    fallback_calls: float
    """Calls per forward that ran the original forward (outside the kernel's envelope)."""
    member_calls: dict[str, list[float]] = Field(default_factory=dict)
    """Per forward, at each module a kept kernel is installed at (its path): [kernel calls,
    original-forward calls]."""
    rounds: int
    slower: bool
    """The whole model is slower with the kernel: in eager, the whole of ``speedup_interval`` below 1
    (a median below 1 alone is within what the timing moves); under torch.compile, which has no
    interval, its speedup below 1."""
    wall_s: float = 0.0
    kernels: list[KernelEffect] = Field(default_factory=list)
    """With more than one kernel: each, kept or dropped, in the order given."""
    mode: Literal["eager", "compile"] = "eager"
    """Which measurement decided ``slower`` (and what an optimize keeps): eager, or under torch.compile."""
    eager_speedup: float | None = None
    """The eager speedup (``speedup`` is the deciding mode's)."""
    compiled_ms: float | None = None
    """The model under torch.compile without the kernels (median forward, the best of the rounds);
    None where it was not measured."""
    compiled_kernel_ms: float | None = None
    """Under torch.compile with the kernels."""
    compiled_speedup: float | None = None
    """Under torch.compile: the median of the rounds' medians of the forward without the kernels
    over with them, interleaved."""
    eager_over_compiled: float | None = None
    """The compiled model without the kernels over the eager model with them (at least 1: the
    kernels in eager are as fast as what Inductor makes of the model alone)."""
    compiled_outputs_match: bool | None = None
    compiled_mismatch: str = ""
    compiled_kernel_calls: float | None = None
    """Under torch.compile: calls per forward that ran a kernel (``kernel_calls`` in eager); fewer where
    the model, traced, passes its modules arguments their kernels were not verified at."""
    compile_error: str = ""
    """Why the model does not compile (then it is measured in eager alone)."""

    @property
    def inductor_wins(self) -> bool:
        """The kernels help in eager but lose to what Inductor fuses."""
        return (self.eager_speedup or self.speedup) > 1.0 and self.compiled_speedup is not None \
            and self.compiled_speedup < 1.0

    @property
    def kept(self) -> list[KernelEffect]:
        return [k for k in self.kernels if not k.dropped]


def task_view(path: str, name: str, class_name: str, digest: str) -> TaskView:
    return TaskView(file=Path(path).name, name=name, class_name=class_name, digest=digest)
