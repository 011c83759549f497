"""A verified kernel put back into a model, and the call signature that says where it was verified.

This file needs torch and nothing else: a delivered kernel module carries its text after the
kernel (``kernel_module``), so the person's code can install the kernel without kevin-opt
installed; the profile and extraction workers import it to name signatures the same way.

A call's signature names every argument in the order of the module's ``forward`` (keyword
arguments and defaults bound to their parameters): a tensor as its dtype and shape, with its
strides when it is not contiguous; anything else as its ``repr``. The installed kernel runs for a
call only when that signature is one it was verified at, its tensors are on the device it was
verified on, the module is in the mode it was extracted in (where its forward reads the mode), and
autograd is not recording (the kernel has no backward); every other call runs the module's
original forward.
"""

from __future__ import annotations

import inspect

import torch


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
    try:
        bound = (signature or inspect.signature(forward)).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [*args, *kwargs.values()]
    bound.apply_defaults()
    values = []
    for name, param in bound.signature.parameters.items():
        value = bound.arguments.get(name)
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            values.extend(value or ())
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            values.extend((value or {}).values())
        else:
            values.append(value)
    return values


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


class KernelGuard:
    """Stands in for one submodule's ``forward``: the kernel inside the envelope it was verified
    in, the original forward everywhere else. Counts the calls that took each path."""

    def __init__(self, module: torch.nn.Module, kernel: torch.nn.Module, original, *,
                 signatures: list[str], device: str, training: bool | None) -> None:
        self.module = module
        self.kernel = kernel
        self.original = original
        self.signatures = frozenset(signatures)
        self.device = device
        self.training = training
        self.kernel_calls = 0
        self.fallback_calls = 0
        try:  # once, not per call: inspect.signature costs as much as a small module's forward
            self.signature = inspect.signature(original)
        except (TypeError, ValueError):
            self.signature = None

    def fits(self, values: list) -> bool:
        """Whether a call with these bound arguments is one the kernel was verified for."""
        if self.training is not None and self.module.training != self.training:
            return False
        tensors = [*_tensors(values)]
        if any(t.device.type != self.device for t in tensors):
            return False
        if torch.is_grad_enabled() and (any(t.requires_grad for t in tensors)
                                        or any(p.requires_grad for p in self.kernel.parameters())):
            return False
        return call_signature(values) in self.signatures

    def __call__(self, *args, **kwargs):
        values = bound_arguments(self.original, args, kwargs, self.signature)
        if self.fits(values):
            self.kernel_calls += 1
            return self.kernel(*values)
        self.fallback_calls += 1
        return self.original(*args, **kwargs)


def _share(kernel: torch.nn.Module, module: torch.nn.Module) -> None:
    """Make the kernel use the module's own parameters and buffers, the same tensors (so that
    loading weights into the model, or training it, reaches the kernel too), paired as the
    evaluation paired them when it gave the kernel the reference's weights: by name, dtype and
    shape, then the rest in order when every remaining one matches."""
    own = dict([*module.named_parameters(), *module.named_buffers()])
    mine = dict([*kernel.named_parameters(), *kernel.named_buffers()])
    pairs = {name: own[name] for name, t in mine.items()
             if name in own and own[name].shape == t.shape and own[name].dtype == t.dtype}
    left_own = [t for name, t in own.items() if name not in pairs]
    left_mine = [name for name in mine if name not in pairs]
    if left_own and len(left_own) == len(left_mine) and all(
            a.shape == mine[b].shape and a.dtype == mine[b].dtype for a, b in zip(left_own, left_mine)):
        pairs.update(zip(left_mine, left_own))
    for name, tensor in pairs.items():
        owner_path, _, leaf = name.rpartition(".")
        owner = kernel.get_submodule(owner_path)
        if leaf in owner._parameters:
            owner._parameters[leaf] = tensor
        else:
            owner._buffers[leaf] = tensor


def install_kernel(model: torch.nn.Module, path: str, kernel_class, init_inputs: list, *, signatures: list[str],
                   device: str, training: bool | None, seed: int = 0) -> KernelGuard:
    """Replace the forward of ``model``'s submodule at ``path`` by a guard around the kernel,
    made as the evaluation made it (under its seed; the caller's random state is left as it was)."""
    module = model.get_submodule(path)
    if isinstance(module.__dict__.get("forward"), KernelGuard):
        raise ValueError(f"a kernel is already installed at {path or 'the model itself'}; uninstall it first")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kernel = kernel_class(*init_inputs)
    where = next(iter([*module.parameters(), *module.buffers()]), None)
    if where is not None:
        kernel.to(where.device)
    _share(kernel, module)
    guard = KernelGuard(module, kernel, module.forward, signatures=signatures, device=device, training=training)
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
