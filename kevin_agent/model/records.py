"""What the whole-model commands find and write: one pydantic model per record, each the only
source of its JSON (``--json`` of ``profile`` and ``e2e``) and of the metadata line of an
extracted task file. Kept free of torch: the parent reads and writes these without importing it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..results.records import Record
from ..results.versioned import Versioned, schema_field

TASK_SCHEMA = 1
"""The layout of an extracted task's and a delivered module's marks (``marks``), read back by
kevin-opt alone; their ``schema`` was called ``schema_version`` before, and is read under both names."""


class ArgSpec(BaseModel):
    """One argument of a recorded call, enough to draw another like it."""

    kind: Literal["tensor", "value", "list", "tuple", "other"]
    shape: list[int] = Field(default_factory=list)
    dtype: str = ""
    stride: list[int] | None = None
    """Strides where the tensor is not contiguous (None: contiguous)."""
    low: float | None = None
    high: float | None = None
    mean: float | None = None
    std: float | None = None
    """Floating tensors: the recorded values' range and spread; integer tensors: their range."""
    value: str = ""
    """kind value: the Python literal (``repr``); kind other: the type's name."""
    items: list[ArgSpec] = Field(default_factory=list)
    """kind list / tuple: the elements."""

    @property
    def nbytes(self) -> int:
        if self.kind == "tensor":
            count = 1
            for size in self.shape:
                count *= size
            return count * _ITEMSIZE.get(self.dtype, 4)
        return sum(item.nbytes for item in self.items)


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


class SignatureCount(BaseModel):
    """One distinct input signature of a module and how often one forward uses it."""

    key: str
    """``guard.call_signature``: dtype[shape] per argument, strides where not contiguous."""
    calls: int
    """Calls per forward with this signature."""
    args: list[ArgSpec]
    output_bytes: int = 0
    """Bytes of the tensors one such call returns."""
    aliased: bool = False
    """Every tensor it returns is one of its inputs or a view of one (Dropout in eval, a reshape): the
    call moves no bytes, and has no floor and no roofline share."""

    @property
    def input_bytes(self) -> int:
        return sum(a.nbytes for a in self.args)


class SignatureUse(BaseModel):
    """A signature by its key alone, and how often one forward uses it."""

    key: str
    calls: int


class ModuleProfile(BaseModel):
    """One ``nn.Module`` instance of the model, as one forward of it uses it."""

    path: str
    """Its path in the model (``blocks.3.mlp``); empty for the model itself."""
    class_name: str
    calls: float
    """Calls per forward."""
    signatures: list[SignatureCount]
    """Most frequent first."""
    time_ms: float
    """Per forward, its children included."""
    self_ms: float
    """Per forward, its children's time left out."""
    children: list[str] = Field(default_factory=list)
    """The modules it calls directly (their paths)."""
    share: float
    """time_ms over the whole forward's time, both measured under the profiler."""
    amdahl: float | None
    """The whole model's speedup if this module took no time at all (None: the whole model)."""
    library: str = ""
    """``gemm``, ``conv``, ``attention`` or ``rnn`` when the module is nothing but one library call of
    that kind per call (a kernel rarely beats the vendor library there); else empty."""
    library_ms: float = 0.0
    """Per forward, the time of library GEMMs/convolutions inside it, which a kernel at best matches."""
    floor_ms: float = 0.0
    """Per forward, the least time its inputs and outputs take to move at the measured bandwidth."""
    headroom: float = 0.0
    """The part of its time a kernel could remove: 1 - (floor + library time) / time, at least 0."""
    flops: float = 0.0
    """Per forward, its FLOPs as ``torch.utils.flop_counter`` counts them (matmuls, convolutions, attention)."""
    roofline: float | None = None
    """What it reaches now: the least its bytes (and FLOPs) take at the measured speeds, without the
    floor's headroom, over its time (None: nothing to measure it by)."""
    saving: float = 0.0
    """share x headroom: the part of the whole forward a kernel for it could save."""
    own_saving: float = 0.0
    """``saving`` less what kernels for the modules it calls could save themselves: what only a
    kernel for this module saves. The ranking's key."""
    rank: int | None = None
    """Its group's rank: 1 for the most promising group; None for the model itself and for groups
    with nothing to save."""
    identity: str = ""
    """What it computes, as a digest: its classes and their source, their settings (``eps``), its
    parameters' and buffers' shapes and dtypes, its mode. Instances with the same identity and the
    same signatures are one group (empty: a group of its own)."""
    group: str = ""
    """The name of its group (``ModuleGroup.name``)."""

    @property
    def headline(self) -> SignatureCount | None:
        return self.signatures[0] if self.signatures else None

    @property
    def moves_nothing(self) -> bool:
        """Every call returns its input or a view of it (``SignatureCount.aliased``): no bytes, no roofline."""
        return bool(self.signatures) and all(s.aliased for s in self.signatures)


class ModuleGroup(BaseModel):
    """Module instances that compute the same thing (``groups``): one task, one kernel, installed at
    every member on its own parameters. A module like no other is a group of one. Times, shares
    and savings are the members' summed, per forward."""

    name: str
    """``layers.*.norm x3``: the members' paths with the part they differ in as ``*`` (where no one
    wildcard fits, the first member's path), and how many; a group of one is its member's path."""
    members: list[str]
    """Their paths, in the model's order."""
    class_name: str
    calls: float
    """Calls per forward, all members together."""
    signatures: list[SignatureCount]
    """The envelope: every signature the members use, calls summed over them, most frequent first."""
    time_ms: float
    share: float
    amdahl: float | None
    """The whole model's speedup if every member took no time at all (None: the model itself)."""
    library: str = ""
    library_ms: float = 0.0
    floor_ms: float = 0.0
    headroom: float = 0.0
    """1 - (floor + library time) / time, over the members together."""
    roofline: float | None = None
    """What the members reach now together: their rooflines summed over their times summed."""
    saving: float = 0.0
    own_saving: float = 0.0
    """What only a kernel for this group saves (the members' ``own_saving`` summed): the table's
    ``saves`` and the ranking's key."""
    rank: int | None = None

    @property
    def path(self) -> str:
        """The first member: the one ``extract`` captures."""
        return self.members[0] if self.members else ""

    @property
    def moves_nothing(self) -> bool:
        """Every call returns its input or a view of it (``SignatureCount.aliased``): no bytes, no roofline."""
        return bool(self.signatures) and all(s.aliased for s in self.signatures)


class ModelProfile(Record):
    """``kevin-opt profile``: where one forward of a whole model spends its time."""

    kind: Literal["profile"] = "profile"
    model_file: str
    device: str
    device_name: str
    forward_ms: float
    """Median time of one forward without the profiler."""
    profiled_forward_ms: float
    """One forward under the profiler (the module times and shares are measured against this)."""
    forwards: int
    """Forwards profiled."""
    bandwidth_gb_s: float
    bandwidth_source: str = "measured"
    flop_rate_tflop_s: float | None = None
    """The device's FLOP rate for ``flop_dtype`` (a large matmul, measured where any module does FLOPs)."""
    flop_dtype: str = ""
    cpu_threads: int | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    wall_s: float = 0.0
    modules: list[ModuleProfile]
    """The model itself first, then the ranked modules in rank order, then the rest."""
    groups: list[ModuleGroup] = Field(default_factory=list)
    """The same modules as groups of identical instances, ordered the same way: what the table shows."""

    def module(self, path: str) -> ModuleProfile | None:
        return next((m for m in self.modules if m.path == path), None)

    def group_of(self, path: str) -> ModuleGroup | None:
        """The group the module at ``path`` belongs to."""
        return next((g for g in self.groups if path in g.members), None)

    @property
    def ranked(self) -> list[ModuleProfile]:
        return [m for m in self.modules if m.rank is not None]

    @property
    def ranked_groups(self) -> list[ModuleGroup]:
        return [g for g in self.groups if g.rank is not None]


class ExtractedTask(Versioned):
    """What an extracted task file says about where it came from (its ``# kevin-opt-extracted:`` line)."""

    schema_: int = schema_field(TASK_SCHEMA, "schema_version")
    model_file: str
    """The model file's name, as the person passed it."""
    module: str
    """The module's path in the model (of a group: the member it was captured from)."""
    members: list[str] = Field(default_factory=list)
    """Every module the task computes for, each checked against it bit for bit (empty: ``module`` alone)."""
    not_members: dict[str, str] = Field(default_factory=dict)
    """Instances that looked the same but that the task does not reproduce, and why (they keep
    their original forward)."""
    class_name: str
    capture: Literal["source", "fx", "export"]
    """How the forward was captured: the module's own source, torch.fx, or torch.export."""
    training: bool
    """The module's mode when it was recorded; the installed kernel runs only in that mode, unless
    ``any_mode``."""
    any_mode: bool = False
    """No forward in the module reads ``self.training``: it computes the same in either mode, and so
    may the kernel (a KernelBench harness builds its Model in training mode and runs it without
    autograd)."""
    init_inputs: str = "[]"
    """``get_init_inputs()``'s list, as a Python literal."""
    signatures: list[SignatureUse]
    """The signatures the task covers, most frequent first; the first is ``get_inputs()``'s. Every
    one the model uses, except where a graph fixed the other arguments' values (``left_out``)."""
    left_out: list[SignatureUse] = Field(default_factory=list)
    """Signatures the model uses that the task does not cover: a captured graph holds the other
    arguments at the headline's values, and these pass others. Their calls keep the original forward."""
    layer_name: str = ""
    """The name Hugging Face's ``kernels`` knows the module's class by (``use_kernel_forward_from_hub``):
    the delivery then also writes a ``kernels`` layer repository for it (empty: not such a layer)."""
    layer_parameters: list[str] = Field(default_factory=list)
    """The parameters of its class's ``forward`` after ``self``, as a ``kernels`` layer must repeat them:
    ``name``, ``name=`` (it has a default), ``*name``, ``**name``, and the markers ``*`` and ``/``."""

    @property
    def paths(self) -> list[str]:
        return self.members or [self.module]


class InstallEnvelope(Versioned):
    """Where a delivered kernel may run in the model (its ``# kevin-opt-install:`` line)."""

    schema_: int = schema_field(TASK_SCHEMA, "schema_version")
    model_file: str
    module: str
    members: list[str] = Field(default_factory=list)
    """Every module it installs itself at (empty: ``module`` alone)."""
    class_name: str
    device: str
    """The device type it was verified on."""
    training: bool
    any_mode: bool = False
    """It may run in either mode (``ExtractedTask.any_mode``)."""
    signatures: list[str]
    """The signatures it was verified at; every other call runs the original forward."""
    recorded: list[SignatureUse] = Field(default_factory=list)
    """Every signature the model used, as extracted (the envelope is the verified part of it)."""
    init_inputs: str = "[]"
    seed: int = 0
    code_sha256: str = ""
    """sha256 of the kernel's code as the run built it (the build cache is keyed by that text)."""
    shapes: list[str] = Field(default_factory=list)
    """What the check at the family of shapes around each verified signature found, one sentence each
    (empty: not checked)."""
    layer_name: str = ""
    """``ExtractedTask.layer_name``: the ``kernels`` layer the kernel is also offered as."""
    layer_parameters: list[str] = Field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return self.members or [self.module]


class SkippedGroup(BaseModel):
    name: str
    why: str


class KernelPlan(BaseModel):
    """Which groups of a model are worth a kernel (``choose``), and what the whole model could gain."""

    chosen: list[ModuleGroup]
    """In the order of what a kernel for each could save, or as named (``named_modules``)."""
    skipped: list[SkippedGroup] = Field(default_factory=list)
    """Groups left out for a reason other than saving too little: library calls, a group inside
    (or holding) a chosen one, the cap on how many."""
    below: int = 0
    """Groups left out for saving less than ``min_saving``."""
    modules: int
    min_saving: float
    at_floor: float = 1.0
    """The whole model's predicted speedup if every chosen group's kernel ran at its floor."""
    at_typical: float = 1.0
    """The same with each kernel ``typical`` times faster than its module (at most its floor)."""
    typical: float = 2.0
    named_modules: list[str] = Field(default_factory=list)
    """The module paths (or group names) the person named with ``optimize --module``, in order:
    ``chosen`` is their groups, and the ranking, ``modules`` and ``min_saving`` did not apply
    (empty: the ranking chose)."""
