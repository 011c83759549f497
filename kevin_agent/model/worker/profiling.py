"""Where one forward of a model spends its time, module by module.

Two passes over the model, each with hooks on every module: a recording forward notes each
call's signature (``guard.call_signature``) and the bytes it takes and returns; then, after the
warm-up, ``torch.profiler`` runs over several forwards with each module call wrapped in a range
of its own. A range holds the module's ops and the ranges of the modules it calls, so a module's
time includes its children's and its self time is what is left; on cuda the times are the
kernels' own (the profiler's device time), on cpu the ops' wall time. A module's time per forward
is its self time, the least it took in any of the forwards, plus its children's times: other work
on a shared machine only ever adds time, and a process descheduled for a time slice inside one
call makes that call many times longer, so on a busy machine even a median can be such a call, and
a whole forward (the model's own time) is seldom without one. Ops are read at their outermost level
(``aten::linear``, not the ``addmm`` inside it): those that are a vendor library's GEMM, convolution,
attention or RNN are the library time a kernel at best matches.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import torch

from ..records import ArgSpec, ModuleProfile, SignatureCount
from .guard import bound_arguments, call_signature
from .identity import Reads, identity
from .loading import LoadedModel, forward

RANGE = "kevin::module::"
LIBRARY = {
    **dict.fromkeys(["linear", "addmm", "mm", "bmm", "matmul", "baddbmm", "addbmm", "addmv", "mv", "einsum",
                     "_scaled_mm"], "gemm"),
    **dict.fromkeys(["conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
                     "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "mkldnn_convolution"], "conv"),
    **dict.fromkeys(["scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"], "attention"),
    **dict.fromkeys(["lstm", "gru", "rnn_tanh", "rnn_relu", "_cudnn_rnn"], "rnn"),
}
"""Outermost ops that are one call into a vendor library (cuBLAS, cuDNN, oneDNN, MKL), by kind."""
FREE = {"view", "reshape", "_reshape_alias", "_unsafe_view", "t", "transpose", "permute", "expand", "as_strided",
        "unsqueeze", "squeeze", "flatten", "unflatten", "detach", "alias", "select", "slice", "size", "stride",
        "numel", "dim", "empty", "lift_fresh", "resolve_conj", "resolve_neg", "contiguous", "chunk", "split"}
"""Ops that move no data as a rule: a module made of one library call and these is that call."""


def _op_name(name: str) -> str:
    return name.split("::", 1)[1] if name.startswith("aten::") else name


def arg_spec(value) -> ArgSpec:
    if isinstance(value, torch.Tensor):
        spec = ArgSpec(kind="tensor", shape=list(value.shape), dtype=str(value.dtype).removeprefix("torch."),
                       stride=None if value.is_contiguous() else list(value.stride()))
        if value.numel():
            flat = value.detach()
            if value.is_floating_point():
                data = flat.float()
                spec.low, spec.high = float(data.min()), float(data.max())
                spec.mean, spec.std = float(data.mean()), float(data.std()) if value.numel() > 1 else 0.0
            elif value.dtype != torch.bool and not value.is_complex():
                spec.low, spec.high = float(flat.min()), float(flat.max())
            elif value.dtype == torch.bool:
                spec.mean = float(flat.float().mean())
        return spec
    if isinstance(value, (list, tuple)):
        return ArgSpec(kind="list" if isinstance(value, list) else "tuple", items=[arg_spec(v) for v in value])
    if value is None or isinstance(value, (bool, int, float, str)):
        return ArgSpec(kind="value", value=repr(value))
    if isinstance(value, torch.dtype):
        return ArgSpec(kind="value", value=str(value))
    return ArgSpec(kind="other", value=type(value).__name__)


def output_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(output_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(output_bytes(v) for v in value.values())
    return 0


class Hooks:
    """Pre- and post-forward hooks on every module, removed on exit."""

    def __init__(self, model: torch.nn.Module, before, after) -> None:
        self.paths = [name for name, _ in model.named_modules()]
        self.handles = []
        for index, (name, module) in enumerate(model.named_modules()):
            self.handles.append(module.register_forward_pre_hook(
                lambda m, args, kwargs, i=index: before(i, m, args, kwargs), with_kwargs=True))
            self.handles.append(module.register_forward_hook(
                lambda m, args, kwargs, out, i=index: after(i, m, out), with_kwargs=True, always_call=True))

    def __enter__(self) -> Hooks:
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()


@dataclass
class Recorded:
    """One forward's calls, per module index."""

    calls: Counter = field(default_factory=Counter)
    signatures: dict[int, dict[str, SignatureCount]] = field(default_factory=lambda: defaultdict(dict))
    reads: Reads | None = None
    """The settings each module's code read in that forward (the identities count those alone)."""


def _storages(value) -> list[tuple[int, int]]:
    """The storage addresses of the tensors in ``value`` (nested in lists, tuples, dicts), each with
    its version (which an in-place write moves on)."""
    if isinstance(value, torch.Tensor):
        try:
            version = value._version
        except RuntimeError:  # an inference tensor keeps no version: an in-place write goes unseen
            version = -1
        return [(value.untyped_storage().data_ptr(), version)]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _storages(v)]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _storages(v)]
    return []


def record_calls(loaded: LoadedModel) -> Recorded:
    recorded = Recorded()
    pending: dict[int, list[str]] = defaultdict(list)
    inputs: dict[int, list[set[tuple[int, int]]]] = defaultdict(list)
    ended: set[tuple[int, str]] = set()

    def before(i, module, args, kwargs):
        values = bound_arguments(module.forward, args, kwargs)
        key = call_signature(values)
        pending[i].append(key)
        inputs[i].append(set(_storages(list(values))))
        seen = recorded.signatures[i]
        if key in seen:
            seen[key].calls += 1
        else:
            seen[key] = SignatureCount(key=key, calls=1, args=[arg_spec(v) for v in values])

    def after(i, module, out):
        key = pending[i].pop()
        read = inputs[i].pop()
        recorded.calls[i] += 1
        signature = recorded.signatures[i][key]
        signature.output_bytes = output_bytes(out)
        returned = _storages(out)
        # An identity (Dropout in eval) or a view returns its input's storage unwritten: nothing was
        # moved. One written in place (ReLU(inplace=True)) has a new version: it read and wrote it.
        aliased = bool(returned) and all(p in read for p in returned)
        signature.aliased = aliased if (i, key) not in ended else signature.aliased and aliased
        ended.add((i, key))

    with Hooks(loaded.model, before, after), Reads(loaded.model) as reads:
        forward(loaded)
    recorded.reads = reads
    return recorded


@dataclass
class CallStats:
    """What one module's calls added up to in each profiled forward (by the forward's index)."""

    time_us: Counter = field(default_factory=Counter)
    self_us: Counter = field(default_factory=Counter)
    library_us: Counter = field(default_factory=Counter)
    kinds: set = field(default_factory=set)
    """Library kinds of the calls that were one library op and nothing else; ``mixed`` otherwise."""
    children: set = field(default_factory=set)

    def per_forward_ms(self, counts: Counter, forwards: int) -> float:
        """The least over the forwards (see the module's text)."""
        return min(counts[k] for k in range(forwards)) / 1e3


def profile_calls(loaded: LoadedModel, forwards: int, device: str) -> tuple[list[str], dict[int, CallStats]]:
    """The module paths and, per module index, its time over ``forwards`` profiled forwards (us)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    handles: dict[int, list] = defaultdict(list)

    def before(i, module, args, kwargs):
        handles[i].append(torch.ops.profiler._record_function_enter_new(f"{RANGE}{i}", None))

    def after(i, module, out):
        torch.ops.profiler._record_function_exit._RecordFunction(handles[i].pop())

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    # One forward traced and thrown away first: the profiler's own start-up lands there, not on
    # whichever module comes first.
    steps = schedule(wait=0, warmup=1, active=forwards, repeat=1)
    with Hooks(loaded.model, before, after) as hooks:
        with profile(activities=activities, schedule=steps) as prof:
            for _ in range(forwards + 1):
                forward(loaded)
                if device == "cuda":
                    torch.cuda.synchronize()
                prof.step()
    stats: dict[int, CallStats] = defaultdict(CallStats)
    # A range inside no other is the model's own call: one per forward. On cuda each range is also
    # recorded on the GPU's timeline (a user annotation without CPU children): only the CPU's count.
    outermost = [e for e in prof.events() if e.name.startswith(RANGE) and not _inside_range(e)
                 and e.device_type == torch.autograd.DeviceType.CPU]
    for k, event in enumerate(sorted(outermost, key=lambda e: e.time_range.start)):
        _walk(event, stats, device, k)
    return hooks.paths, stats


def _inside_range(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(RANGE):
            return True
        parent = parent.cpu_parent
    return False


def _kernels_us(event) -> float:
    return sum(k.duration for k in event.kernels)


def _walk(event, stats: dict[int, CallStats], device: str, k: int) -> tuple[float, float, list[str]]:
    """One module call: (its time, its library time, the non-free outermost ops of it and of the
    calls under it), added into ``stats``."""
    index = int(event.name[len(RANGE):])
    time_us = _kernels_us(event) if device == "cuda" else event.cpu_time_total
    children_us = library_us = 0.0
    ops: list[str] = []
    mine = stats[index]
    pending = list(event.cpu_children)
    while pending:
        child = pending.pop()
        if child.name.startswith(RANGE):
            child_time, child_library, child_ops = _walk(child, stats, device, k)
            mine.children.add(int(child.name[len(RANGE):]))
            if device == "cuda":
                time_us += child_time
            children_us += child_time
            library_us += child_library
            ops += child_ops
            continue
        if child.is_user_annotation:  # a range of the person's own: look through it
            pending.extend(child.cpu_children)
            time_us += _kernels_us(child) if device == "cuda" else 0.0
            continue
        name = _op_name(child.name)
        op_us = child.device_time_total if device == "cuda" else child.cpu_time_total
        if device == "cuda":
            time_us += op_us
        if name in LIBRARY:
            library_us += op_us
        if name not in FREE:
            ops.append(name)
    mine.time_us[k] += time_us
    mine.self_us[k] += time_us - children_us
    mine.library_us[k] += library_us
    only = ops[0] if len(ops) == 1 else ""
    mine.kinds.add(LIBRARY.get(only, "mixed"))
    return time_us, library_us, ops


def module_flops(loaded: LoadedModel) -> dict[str, float]:
    """Each module's FLOPs in one forward, by its path, as ``torch.utils.flop_counter`` counts them
    (matmuls, convolutions, attention; element-wise work is 0); empty where it cannot follow the model."""
    from torch.utils.flop_counter import FlopCounterMode

    root = type(loaded.model).__name__
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            forward(loaded)
    except Exception:  # a model the counter cannot trace is still profiled: its modules get the bytes' roofline
        return {}
    out = {}
    for key, ops in counter.get_flop_counts().items():
        # Keys are the root's class name, then each module's path after it.
        if key == root or key.startswith(root + "."):
            out[key[len(root) + 1:]] = float(sum(ops.values()))
    return out


def module_profiles(loaded: LoadedModel, recorded: Recorded, paths: list[str], stats: dict[int, CallStats],
                    forwards: int) -> list[ModuleProfile]:
    """One ``ModuleProfile`` per module that was called, times per forward (ranking left to the parent)."""
    modules = dict(loaded.model.named_modules())
    total: dict[int, float] = {}

    def time_ms(index: int) -> float:
        if index not in total:
            s = stats.get(index, CallStats())
            total[index] = s.per_forward_ms(s.self_us, forwards) + sum(time_ms(c) for c in s.children)
        return total[index]

    out = []
    for index, path in enumerate(paths):
        if recorded.calls[index] == 0:
            continue
        s = stats.get(index, CallStats())
        signatures = sorted(recorded.signatures[index].values(), key=lambda c: -c.calls)
        kinds = s.kinds - {"mixed"}
        out.append(ModuleProfile(
            path=path, class_name=type(modules[path]).__name__, calls=float(recorded.calls[index]),
            signatures=signatures, time_ms=time_ms(index),
            self_ms=s.per_forward_ms(s.self_us, forwards), children=sorted(paths[c] for c in s.children),
            share=0.0, amdahl=None, library=next(iter(kinds)) if len(kinds) == 1 and "mixed" not in s.kinds else "",
            library_ms=s.per_forward_ms(s.library_us, forwards), identity=identity(modules[path], recorded.reads) if path else ""))
    return out
