"""A verified kernel put back into a model, and the call signature that says where it was verified.

This file needs torch and nothing else: a delivered kernel module carries its text after the
kernel (``kernel_module``), so the person's code can install the kernel without kevin-opt
installed; the profile and extraction workers import it to name signatures the same way.

A call's signature names every argument in the order of the module's ``forward`` (keyword
arguments and defaults bound to their parameters): a tensor as its dtype and shape, with its
strides when it is not contiguous; anything else as its ``repr``. A verified signature may name a
dimension by a symbol (``float32[n0,256]``): the kernel was verified at several sizes there, and a
call may have any size in it (one size wherever the same symbol stands). The installed kernel runs
for a call only when its signature is one it was verified at, its tensors are on the device it was
verified on, the module is in the mode it was extracted in (where its forward reads the mode), and
autograd is not recording (the kernel has no backward); every other call runs the module's
original forward.

The kernel is a PyTorch custom operator (``torch.library.custom_op``; its fake implementation is
the module's original forward on fake tensors), and the guard's checks are plain tensor property
checks, so ``torch.compile(fullgraph=True)`` and ``torch.export`` trace a model with kernels
installed, the checks becoming their guards. Nothing is built on import or install: the kernel's
code runs (and its extension builds or loads from the cache) on the first call it would serve. A
kernel that cannot be built, or a call on a device it was not verified on, runs the original
forward after one warning that says why; ``KEVIN_KERNELS=0`` in the environment turns every
installed kernel off. The languages differ only in what building is: a C++/CUDA kernel's code
builds its extension as it runs; a Triton kernel's compiles at its first launch, so for Triton the
kernel's first call is part of its build, and a first call that fails is a failed build.
"""

from __future__ import annotations

import ast
import copy
import inspect
import linecache
import os
import re
import warnings
import weakref

import torch

KERNELS_ENV = "KEVIN_KERNELS"
"""``KEVIN_KERNELS=0`` in the environment: every installed kernel runs its original forward."""


def _tensor_key(value: torch.Tensor) -> str:
    key = f"{str(value.dtype).removeprefix('torch.')}[{','.join(str(s) for s in value.shape)}]"
    if not value.is_contiguous():
        key += "@" + ",".join(str(s) for s in value.stride())
    return key


def value_key(value) -> str:
    """One argument's part of a signature."""
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(value_key(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {value_key(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return repr(value)
    return f"<{type(value).__name__}>"


def bound_arguments(forward, args: tuple, kwargs: dict, signature: inspect.Signature | None = None) -> list:
    """The call's arguments in the order of ``forward``'s parameters (``signature``, where the caller
    has it already), defaults filled in."""
    return bound_call(forward, args, kwargs, signature)[1]


def bound_call(forward, args: tuple, kwargs: dict, signature: inspect.Signature | None = None) -> tuple[list, list]:
    """(names, values): ``bound_arguments``' values and the name each was passed as (the parameter's,
    a ``**kwargs`` entry's key, ``<name>_<i>`` for ``*args``); no names where the call does not bind."""
    try:
        bound = (signature or inspect.signature(forward)).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [], [*args, *kwargs.values()]
    bound.apply_defaults()
    names, values = [], []
    for name, param in bound.signature.parameters.items():
        value = bound.arguments.get(name)
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}_{i}" for i in range(len(value or ()))]
            values.extend(value or ())
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            names += list(value or {})
            values.extend((value or {}).values())
        else:
            names.append(name)
            values.append(value)
    return names, values


class _Slot:
    """Where a call's argument came from (0: by position, 1: by name), standing in for it while
    ``inspect`` binds a call of that shape."""

    __slots__ = ("source", "where")

    def __init__(self, source: int, where) -> None:
        self.source, self.where = source, where


def _binding_plan(forward, positional: int, names: list, signature: inspect.Signature | None) -> list:
    """For each of ``bound_arguments``' values at a call of this shape: (0, index) an argument given
    by position, (1, name) one given by name, (2, value) a default."""
    values = bound_arguments(forward, tuple(_Slot(0, i) for i in range(positional)),
                             {name: _Slot(1, name) for name in names}, signature)
    return [(v.source, v.where) if isinstance(v, _Slot) else (2, v) for v in values]


def call_signature(values) -> str:
    """The signature of a call whose arguments, bound in order, are ``values``."""
    return ", ".join(value_key(v) for v in values)


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def kernels_enabled() -> bool:
    return os.environ.get(KERNELS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def split_signature(key: str) -> list[str]:
    """A signature's arguments, split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(key):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0 and key[i + 1:i + 2] == " ":  # strides join with "," alone
            parts.append(key[start:i].strip())
            start = i + 1
    if key.strip():
        parts.append(key[start:].strip())
    return parts


_TENSOR = re.compile(r"^(\w+)\[([\w,]*)\](?:@([\d,]+))?$")
_NOT_A_VALUE = object()
_FAILED = object()


class TensorSpec:
    """One tensor argument of a verified signature: its dtype, rank, each dimension's size (an
    int) or symbol (a name), and its strides where it is not contiguous."""

    def __init__(self, dtype: torch.dtype, shape: list, strides: tuple | None) -> None:
        self.dtype = dtype
        self.shape = shape
        self.rank = len(shape)
        self.strides = strides


def _value_spec(text: str):
    if text.startswith("torch.") and isinstance(getattr(torch, text[6:], None), torch.dtype):
        return getattr(torch, text[6:])
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return _NOT_A_VALUE
    return value if value is None or isinstance(value, (bool, int, float, str)) else _NOT_A_VALUE


class _Sequence:
    """A tuple or list argument of a verified signature (transformers' ``position_embeddings``), item by item."""

    def __init__(self, kind: type, items: list) -> None:
        self.kind, self.items = kind, items


def _part_spec(part: str):
    """One argument's check: a ``TensorSpec``, a ``_Sequence`` of checks, or a plain value."""
    match = _TENSOR.match(part)
    dtype = getattr(torch, match[1], None) if match else None
    if match and isinstance(dtype, torch.dtype):
        shape = [int(d) if d.isdigit() else d for d in match[2].split(",") if d]
        strides = tuple(int(s) for s in match[3].split(",")) if match[3] else None
        return TensorSpec(dtype, shape, strides)
    if len(part) >= 2 and (part[0], part[-1]) in (("(", ")"), ("[", "]")):
        items = [_part_spec(p) for p in split_signature(part[1:-1].strip().rstrip(","))] if part[1:-1].strip() else []
        if any(i is _NOT_A_VALUE for i in items):
            return _NOT_A_VALUE
        return _Sequence(tuple if part[0] == "(" else list, items)
    return _value_spec(part)


def _flat_specs(items: list):
    for spec in items:
        if isinstance(spec, _Sequence):
            yield from _flat_specs(spec.items)
        else:
            yield spec


def _fits(value, spec, sizes: dict) -> bool:
    if isinstance(spec, TensorSpec):
        if not isinstance(value, torch.Tensor) or value.dtype != spec.dtype or value.dim() != spec.rank:
            return False
        for dim, want in enumerate(spec.shape):
            got = value.shape[dim]
            if isinstance(want, str):
                if got < 1 or sizes.setdefault(want, got) != got:
                    return False
            elif got != want:
                return False
        if spec.strides is None:
            return value.is_contiguous()
        return tuple(value.stride()) == spec.strides
    if isinstance(spec, _Sequence):
        return type(value) is spec.kind and len(value) == len(spec.items) and all(
            _fits(v, s, sizes) for v, s in zip(value, spec.items))
    return not isinstance(value, torch.Tensor) and type(value) is type(spec) and value == spec


def _flat_values(values, items: list):
    for value, spec in zip(values, items):
        if isinstance(spec, TensorSpec):
            yield value
        elif isinstance(spec, _Sequence):
            yield from _flat_values(value, spec.items)


def _rebuilt(items: list, it) -> list:
    return [next(it) if isinstance(spec, TensorSpec) else spec.kind(_rebuilt(spec.items, it))
            if isinstance(spec, _Sequence) else spec for spec in items]


class CallSpec:
    """A verified signature, read once at install into checks that cost a few attribute reads per
    call (and that Dynamo turns into guards). Tuples and lists are checked item by item; a signature
    holding anything else nested (a dict) is compared as text."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.items: list | None = [_part_spec(part) for part in split_signature(key)]
        if any(i is _NOT_A_VALUE for i in self.items):
            self.items = None
        self.family = self.items is not None and any(
            isinstance(d, str) for t in _flat_specs(self.items) if isinstance(t, TensorSpec) for d in t.shape)

    def admits(self, values: list) -> bool:
        if self.items is None:
            return call_signature(values) == self.key
        if len(values) != len(self.items):
            return False
        sizes = {}
        return all(_fits(value, spec, sizes) for value, spec in zip(values, self.items))

    def tensors(self, values: list) -> list:
        return list(_flat_values(values, self.items))

    def rebuild(self, tensors: list) -> list:
        """The call's arguments from its tensors (the rest are the signature's own values)."""
        return _rebuilt(self.items, iter(tensors))


class KernelSource:
    """The kernel's code (a module defining ``ModelNew``), run on first use, once for every module
    it goes into. Where it cannot run, says why once and stays that way."""

    def __init__(self, name: str, code: str | None = None, *, kernel_class=None, build_dir: str | None = None,
                 language: str = "cuda") -> None:
        self.name = name
        self.code = code
        self.kernel_class = kernel_class
        self.build_dir = build_dir
        """TORCH_EXTENSIONS_DIR when the module was imported: a build made for it is found there."""
        self.first_call_builds = language == "triton"
        """Triton compiles a kernel at its first launch: the kernel's first call ends its build."""
        self.error = ""
        self.warned = set()
        self.built = False
        """Whether a kernel call has succeeded (for Triton: its kernels compiled)."""

    def load(self):
        """``ModelNew``, its code run now where it has not run yet; None where it cannot run."""
        if self.kernel_class is None and not self.error:
            if not kernels_enabled():
                return None
            saved = os.environ.get("TORCH_EXTENSIONS_DIR")
            if saved is None and self.build_dir:
                os.environ["TORCH_EXTENSIONS_DIR"] = self.build_dir
            try:
                scope = {"__name__": f"{self.name}_kernel"}
                filename = f"<kernel of {self.name}>"
                # its source found as a file's (Triton's @jit reads its function's source; tracebacks show it)
                linecache.cache[filename] = (len(self.code), None, self.code.splitlines(keepends=True), filename)
                exec(compile(self.code, filename, "exec"), scope)
                if not isinstance(scope.get("ModelNew"), type):
                    raise RuntimeError("the kernel's code defines no class ModelNew")
                self.kernel_class = scope["ModelNew"]
            except Exception as exc:  # a build failure is as varied as the toolchains it meets
                self.failed(exc)
            finally:
                if saved is None:
                    os.environ.pop("TORCH_EXTENSIONS_DIR", None)
        return self.kernel_class

    def failed(self, exc: Exception) -> None:
        """The kernel cannot be built or loaded here: say why, once, and stay that way."""
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        self.error = f"{type(exc).__name__}: {lines[-1] if lines else ''}".strip().rstrip(":")
        self.kernel_class = None
        self.warn("build", f"the kernel cannot be built or loaded here ({self.error})")

    def first_call(self, call, *args):
        """``call(*args)``, the kernel's call; where it is the first of a kernel that builds then
        (Triton), a failure is the build's: said once, and ``_FAILED`` returned."""
        if not self.first_call_builds or self.built:
            return call(*args)
        try:
            out = call(*args)
        except Exception as exc:  # Triton's compile errors are as varied as the backends it meets
            self.failed(exc)
            return _FAILED
        self.built = True
        return out

    def warn(self, what: str, why: str) -> None:
        if what not in self.warned:
            self.warned.add(what)
            warnings.warn(f"{self.name}: {why}; the original forward runs instead", RuntimeWarning, stacklevel=4)


_GUARDS: list = []
"""Every guard installed in this process (a weak reference: a model dropped takes its guards with
it), by slot: the custom operator finds its guard by it."""
_OPS: dict = {}


def _guard(slot: int):
    guard = _GUARDS[slot]()
    if guard is None:  # an exported program outliving the model it was exported from
        raise RuntimeError("the model this kernel was installed in is gone: keep it alive, or install the kernel "
                           "again and export again")
    return guard


def _kernel_op(name: str):
    """The custom operator ``name`` (``kevin::<module>``): the kernel at one call of one guard. Its
    fake implementation runs the module's original forward on the fake tensors, so the shapes and
    dtypes of its outputs are the original's wherever it is traced."""
    if name in _OPS:
        return _OPS[name]
    namespace, _, base = name.partition("::")
    final, n = base, 1
    while hasattr(getattr(torch.ops, namespace), final):  # another copy of the module registered it
        n += 1
        final = f"{base}_{n}"

    def kernel(slot: int, spec: int, tensors: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        return _guard(slot).run_kernel(spec, tensors, params)

    def fake(slot, spec, tensors, params):
        return _guard(slot).run_original(spec, tensors, params)

    op = torch.library.custom_op(f"{namespace}::{final}", kernel, mutates_args=())
    op.register_fake(fake)
    _OPS[name] = op
    return op


def _as_list(out, guard) -> list:
    if isinstance(out, torch.Tensor):
        guard.single = True
        return [out]
    guard.single = False
    return list(out)


class KernelGuard:
    """Stands in for one submodule's ``forward``: the kernel inside the envelope it was verified
    in, the original forward everywhere else. Counts the calls that took each path (under
    ``torch.compile`` the kernel's calls alone, counted where it runs)."""

    def __init__(self, module: torch.nn.Module, source: KernelSource, original, *, signatures: list[str],
                 device: str, training: bool | None, init_inputs: list, seed: int = 0, op: str = "") -> None:
        self.module = module
        self.source = source
        self.original = original
        self.signatures = frozenset(signatures)
        self.specs = [CallSpec(key) for key in signatures]
        self.device = device
        self.training = training
        self.init_inputs = init_inputs
        self.seed = seed
        self.enabled = kernels_enabled()
        self.kernel = None
        self.broken = False
        self.single = True
        self.kernel_calls = 0
        self.fallback_calls = 0
        self.slot = len(_GUARDS)
        _GUARDS.append(weakref.ref(self))
        self.op = _kernel_op(op or f"kevin::{source.name}")
        self.names = [name for name, _ in [*module.named_parameters(), *module.named_buffers()]]
        self.owners = [(module.get_submodule(n.rpartition(".")[0]), n.rpartition(".")[2]) for n in self.names]
        self.pairs: dict[str, str] = {}
        try:  # once, not per call: inspect.signature costs as much as a small module's forward
            self._signature = inspect.signature(original)
        except (TypeError, ValueError):
            self._signature = None
        self._arity = self._positional_arity(self._signature)
        self._plans: dict[tuple, list] = {}
        self._wrapper = _Original(module, original)

    @staticmethod
    def _positional_arity(signature) -> int:
        """How many arguments a call gives where it gives every one by position and is bound as it
        comes; -1 where the forward takes ``*args``, ``**kwargs`` or keyword-only ones."""
        if signature is None:
            return -1
        params = signature.parameters.values()
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
            return -1
        return len(signature.parameters)

    def bind(self, args: tuple, kwargs: dict) -> list:
        """The call's arguments in ``forward``'s order, defaults filled in, as ``bound_arguments``
        gives them (and as the extraction recorded them). What ``inspect`` does depends on the call's
        shape alone (how many by position, which names), so it binds once per shape, and each call is
        put in order by the plan it left."""
        key = (len(args), *kwargs)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _binding_plan(self.original, len(args), list(kwargs), self._signature)
        return [args[where] if source == 0 else kwargs[where] if source == 1 else where for source, where in plan]

    def admitted(self, values: list, compiling: bool = False) -> int:
        """The verified signature this call is at (its index), or -1: the original forward serves it."""
        if self.training is not None and self.module.training != self.training:
            return -1
        for i, spec in enumerate(self.specs):
            if spec.admits(values):
                tensors = spec.tensors(values) if spec.items is not None else [*_tensors(values)]
                for t in tensors:
                    if t.device.type != self.device:
                        if not compiling:
                            self.source.warn("device", f"the kernel was verified on {self.device}, not on "
                                                       f"{t.device.type}")
                        return -1
                if torch.is_grad_enabled() and (any(t.requires_grad for t in tensors) or any(
                        getattr(o, leaf).requires_grad for o, leaf in self.owners)):
                    return -1
                return i
        return -1

    _SHARED = ("source", "specs", "signatures", "op", "_signature", "_arity", "_plans")
    """What a copy of the model shares with this guard (the rest is copied with the module)."""

    def __deepcopy__(self, memo):
        # copy.deepcopy(model): the copy's guard serves the copied module, on its copied weights,
        # under a slot of its own (the custom operator is shared, and cannot be copied)
        new = object.__new__(KernelGuard)
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            setattr(new, name, value if name in self._SHARED else copy.deepcopy(value, memo))
        new.slot = len(_GUARDS)
        _GUARDS.append(weakref.ref(new))
        return new

    def fits(self, values: list) -> bool:
        """Whether a call with these bound arguments is one the kernel was verified for."""
        return self.admitted(values) >= 0

    def __call__(self, *args, **kwargs):
        compiling = torch.compiler.is_compiling()
        if self.enabled and not self.broken:
            # the common call, every argument given by position, binds without a loop
            values = list(args) if not kwargs and len(args) == self._arity else self.bind(args, kwargs)
            spec = self.admitted(values, compiling)
            if spec >= 0:
                if compiling:
                    if self.specs[spec].items is not None:
                        tensors = self.specs[spec].tensors(values)
                        out = self.op(self.slot, spec, tensors, [getattr(o, leaf) for o, leaf in self.owners])
                        return out[0] if self.single else tuple(out)
                elif self.kernel is not None or self.ready():
                    # the kernel module has no hooks of its own to run
                    out = self.source.first_call(self.kernel.forward, *values)
                    if out is not _FAILED:
                        self.kernel_calls += 1
                        return out
                    self.broken = True
        if not compiling:
            self.fallback_calls += 1
        return self.original(*args, **kwargs)

    def ready(self) -> bool:
        """The kernel made (its code run, its extension built or loaded) on first use; False where it
        cannot be, from then on."""
        if self.kernel is None and not self.broken:
            kernel_class = self.source.load()
            if kernel_class is None:
                self.broken = True
                return False
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                kernel = kernel_class(*self.init_inputs)
            where = next(iter([*self.module.parameters(), *self.module.buffers()]), None)
            if where is not None:
                kernel.to(where.device)
            self.pairs = _share(kernel, self.module)
            self.kernel = kernel
        return self.kernel is not None and not self.broken

    def run_kernel(self, spec: int, tensors: list, params: list) -> list:
        """The custom operator's real implementation: the kernel on these tensors and parameters
        (the module's own, unless a compiled graph passes others), or the original forward where
        the kernel cannot run here."""
        values = self.specs[spec].rebuild(tensors)
        out = _FAILED
        if self.ready():
            current = [getattr(o, leaf) for o, leaf in self.owners]
            if all(p is c for p, c in zip(params, current)):
                out = self.source.first_call(self.kernel, *values)
            else:
                mine = {self.pairs[n]: p for n, p in zip(self.names, params) if n in self.pairs}
                out = self.source.first_call(torch.func.functional_call, self.kernel, mine, tuple(values))
        if out is _FAILED:
            self.broken = True
            self.fallback_calls += 1
            return _as_list(self._wrapper.call(self.names, params, values), self)
        self.kernel_calls += 1
        return [o.clone() if any(o is t for t in tensors) else o for o in _as_list(out, self)]

    def run_original(self, spec: int, tensors: list, params: list) -> list:
        """The custom operator's fake implementation: the original forward on the fake tensors."""
        return _as_list(self._wrapper.call(self.names, params, self.specs[spec].rebuild(tensors)), self)


class _Original(torch.nn.Module):
    """The module's original forward, callable on parameters given in place of its own."""

    def __init__(self, module: torch.nn.Module, original) -> None:
        super().__init__()
        self.target = module
        self.__dict__["original"] = original

    def forward(self, values):
        return self.original(*values)

    def call(self, names: list, params: list, values: list):
        given = {f"target.{n}": p for n, p in zip(names, params)}
        return torch.func.functional_call(self, given, (values,), strict=False)


def _share(kernel: torch.nn.Module, module: torch.nn.Module) -> dict[str, str]:
    """Make the kernel use the module's own parameters and buffers, the same tensors (so that
    loading weights into the model, or training it, reaches the kernel too), paired as the
    evaluation paired them when it gave the kernel the reference's weights: by name, dtype and
    shape, then the rest in order when every remaining one matches. Returns the pairs (the
    module's name of each tensor: the kernel's)."""
    own = dict([*module.named_parameters(), *module.named_buffers()])
    mine = dict([*kernel.named_parameters(), *kernel.named_buffers()])
    pairs = {name: name for name, t in mine.items()
             if name in own and own[name].shape == t.shape and own[name].dtype == t.dtype}
    left_own = [name for name in own if name not in pairs]
    left_mine = [name for name in mine if name not in pairs]
    if left_own and len(left_own) == len(left_mine) and all(
            own[a].shape == mine[b].shape and own[a].dtype == mine[b].dtype for a, b in zip(left_own, left_mine)):
        pairs.update(zip(left_own, left_mine))
    for name, theirs in pairs.items():
        owner_path, _, leaf = theirs.rpartition(".")
        owner = kernel.get_submodule(owner_path)
        if leaf in owner._parameters:
            owner._parameters[leaf] = own[name]
        else:
            owner._buffers[leaf] = own[name]
    return pairs


def install_kernel(model: torch.nn.Module, path: str, kernel, init_inputs: list, *, signatures: list[str],
                   device: str, training: bool | None, seed: int = 0, op: str = "") -> KernelGuard:
    """Replace the forward of ``model``'s submodule at ``path`` by a guard around the kernel
    (``kernel``: a ``KernelSource``, or the kernel's class itself), made on its first call as the
    evaluation made it (under its seed; the caller's random state is left as it was)."""
    module = model.get_submodule(path)
    if isinstance(module.__dict__.get("forward"), KernelGuard):
        raise ValueError(f"a kernel is already installed at {path or 'the model itself'}; uninstall it first")
    source = kernel if isinstance(kernel, KernelSource) else KernelSource(kernel.__name__, kernel_class=kernel)
    guard = KernelGuard(module, source, module.forward, signatures=signatures, device=device, training=training,
                        init_inputs=init_inputs, seed=seed, op=op)
    module.forward = guard
    return guard


def uninstall_kernel(model: torch.nn.Module, path: str) -> None:
    """Give the submodule at ``path`` its original forward back."""
    module = model.get_submodule(path)
    guard = module.__dict__.get("forward")
    if not isinstance(guard, KernelGuard):
        raise ValueError(f"no kernel is installed at {path or 'the model itself'}")
    original = guard.original
    if getattr(original, "__self__", None) is module and getattr(original, "__func__", None) is type(module).forward:
        del module.forward
    else:
        module.forward = original


LAYER_GUARDS = "_kevin_layer_guards"
"""A module's attribute holding the guards its ``kernels`` layer forward made, by kernel."""


def layer_guard(module: torch.nn.Module, kernel: KernelSource, init_inputs: list, *, signatures: list[str],
                device: str, training: bool | None, seed: int = 0, op: str = "") -> KernelGuard:
    """The guard a Hugging Face ``kernels`` layer's forward calls for ``module`` (whose ``forward``
    ``kernelize`` replaced): made on its first call, around its class's own forward, and kept on the
    module, so that it checks every call as an installed kernel does and counts what ran."""
    guards = module.__dict__.setdefault(LAYER_GUARDS, {})
    guard = guards.get(kernel.name)
    if guard is None:
        guard = guards[kernel.name] = KernelGuard(
            module, kernel, type(module).forward.__get__(module), signatures=signatures, device=device,
            training=training, init_inputs=init_inputs, seed=seed, op=op)
    return guard


def kernel_calls(model: torch.nn.Module) -> dict[str, dict[str, int]]:
    """Per module path with a kernel installed (or run through a ``kernels`` layer): the calls that ran
    the kernel and those that ran the original forward."""
    calls = {}
    for path, module in model.named_modules(remove_duplicate=False):
        guards = [g for g in [module.__dict__.get("forward"), *module.__dict__.get(LAYER_GUARDS, {}).values()]
                  if isinstance(g, KernelGuard)]
        if guards:
            calls[path] = {"kernel": sum(g.kernel_calls for g in guards),
                           "original": sum(g.fallback_calls for g in guards)}
    return calls
