"""The guard that puts a kernel back into a real model: the kernel runs only where it was
verified (signature, device, mode, no autograd), the original forward everywhere else, and the
kernel uses the module's own parameters. The "kernel" here is a Python module computing the same
thing another way, so nothing compiles; the delivered C++ kernel is installed in test_model_e2e."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn

from kevin_agent.model.worker.guard import (
    KernelGuard,
    bound_arguments,
    call_signature,
    install_kernel,
    uninstall_kernel,
)


class Scale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x, shift=None):
        return x * self.weight + (0.0 if shift is None else shift)


class ScaleKernel(nn.Module):
    """Stands in for a verified kernel: same result, computed its own way, and it counts."""

    calls = 0

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x, shift):
        ScaleKernel.calls += 1
        return torch.addcmul(torch.zeros_like(x) + (0.0 if shift is None else shift), x, self.weight)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = Scale(8)
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        a = self.scale(x)                       # float32[4,8], twice per forward
        b = self.scale(x[:2])                   # float32[2,8]
        c = self.scale(x.t().contiguous().t())  # float32[4,8] with strides (1,4)
        d = self.scale(x, shift=1.0)            # float32[4,8], 1.0
        return self.out(self.scale(a) + b.sum() + c + d)


@pytest.fixture
def net():
    torch.manual_seed(0)
    model = Net().eval()
    return model, torch.randn(4, 8)


def test_signature_names_every_argument_in_forward_order():
    s = Scale(8)
    x = torch.randn(4, 8)
    assert call_signature(bound_arguments(s.forward, (x,), {})) == "float32[4,8], None"
    assert call_signature(bound_arguments(s.forward, (), {"x": x, "shift": 1.0})) == "float32[4,8], 1.0"
    assert call_signature(bound_arguments(s.forward, (x.t(),), {})) == "float32[8,4]@1,8, None"


def test_kernel_runs_only_at_the_signature_it_was_verified_at(net):
    model, x = net
    with torch.no_grad():
        want = model(x)
    ScaleKernel.calls = 0
    guard = install_kernel(model, "scale", ScaleKernel, [8], signatures=["float32[4,8], None"], device="cpu",
                           training=False)
    assert isinstance(model.scale.forward, KernelGuard)
    with torch.no_grad():
        got = model(x)
    # self.scale(x) and self.scale(a): the kernel; x[:2], the strided copy and shift=1.0: the original
    assert (guard.kernel_calls, guard.fallback_calls) == (2, 3) and ScaleKernel.calls == 2
    torch.testing.assert_close(got, want)
    # the kernel holds the module's own parameter, not a copy: new weights reach it
    assert guard.kernel.weight is model.scale.weight
    with torch.no_grad():
        model.scale.weight.mul_(2.0)
        again = model(x)
    uninstall_kernel(model, "scale")
    assert "forward" not in model.scale.__dict__
    with torch.no_grad():
        torch.testing.assert_close(again, model(x))


def test_autograd_mode_and_device_keep_the_original(net):
    model, x = net
    guard = install_kernel(model, "scale", ScaleKernel, [8], signatures=["float32[4,8], None"], device="cpu",
                           training=False)
    model(x).sum().backward()  # autograd records: the kernel has no backward
    assert guard.kernel_calls == 0 and model.scale.weight.grad is not None
    model.train()
    with torch.no_grad():
        model(x)
    assert guard.kernel_calls == 0  # extracted in eval mode
    uninstall_kernel(model, "scale")
    # a module whose forward never reads the mode: the kernel runs in either (without autograd)
    either = install_kernel(model, "scale", ScaleKernel, [8], signatures=["float32[4,8], None"], device="cpu",
                            training=None)
    with torch.no_grad():
        model(x)
    assert model.training and either.kernel_calls == 2
    model(x).sum().backward()
    assert either.kernel_calls == 2  # still never under autograd
    model.eval()
    uninstall_kernel(model, "scale")
    install_kernel(model, "scale", ScaleKernel, [8], signatures=["float32[4,8], None"], device="cuda", training=False)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="verified on cuda, not on cpu; the original forward runs"):
        model(x)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        model(x)
    assert model.scale.forward.kernel_calls == 0  # verified on another device


def test_a_second_install_and_an_uninstall_without_one_are_refused(net):
    model, _ = net
    with pytest.raises(ValueError, match="already installed"):
        install_kernel(model, "scale", ScaleKernel, [8], signatures=[], device="cpu", training=False)
        install_kernel(model, "scale", ScaleKernel, [8], signatures=[], device="cpu", training=False)
    uninstall_kernel(model, "scale")
    with pytest.raises(ValueError, match="no kernel is installed"):
        uninstall_kernel(model, "scale")


def test_a_copied_model_runs_the_kernel_on_its_own_weights(net):
    model, x = net
    install_kernel(model, "scale", ScaleKernel, [8], signatures=["float32[n0,8], None"], device="cpu", training=False)
    twin = copy.deepcopy(model)
    guard = twin.scale.forward
    assert guard is not model.scale.forward and guard.module is twin.scale
    with torch.no_grad():
        twin.scale.weight.mul_(3.0)
        got = twin(x)
        uninstall_kernel(twin, "scale")
        want = twin(x)
    torch.testing.assert_close(got, want)
    assert guard.kernel.weight is twin.scale.weight and guard.kernel_calls == 3
    assert model.scale.forward.kernel_calls == 0


class Rotate(nn.Module):
    """Takes a tuple of tensors by keyword, as transformers' attention takes position_embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8))

    def forward(self, x, position_embeddings=None, scale=1.0):
        cos, sin = position_embeddings
        return (x * cos + x.flip(-1) * sin) * self.weight * scale


class RotateKernel(nn.Module):
    calls = 0

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(8))

    def forward(self, x, position_embeddings, scale):
        RotateKernel.calls += 1
        cos, sin = position_embeddings
        return torch.addcmul(x * cos, x.flip(-1), sin) * self.weight * scale


class Rotated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rotate = Rotate()

    def forward(self, x, cos, sin):
        return self.rotate(x, position_embeddings=(cos, sin)) + self.rotate(x, position_embeddings=(cos, sin[:1]))


def test_a_tuple_of_tensors_is_checked_item_by_item_and_reaches_the_kernel_compiled_too():
    torch.manual_seed(0)
    model = Rotated().eval()
    x, cos, sin = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    with torch.no_grad():
        want = model(x, cos, sin)
    RotateKernel.calls = 0
    guard = install_kernel(model, "rotate", RotateKernel, [],
                           signatures=["float32[n0,8], (float32[n0,8], float32[n0,8]), 1.0"], device="cpu",
                           training=False)
    assert guard.specs[0].items is not None and guard.specs[0].family
    with torch.no_grad():
        got = model(x, cos, sin)
    # the tuple of matching rows: the kernel; a sin of another row count than x: the original
    assert (guard.kernel_calls, guard.fallback_calls) == (1, 1) and RotateKernel.calls == 1
    torch.testing.assert_close(got, want)
    # compiled whole: the tuple's tensors go through the custom operator, none of the original runs
    RotateKernel.calls = 0
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, cos, sin), want)
    assert RotateKernel.calls == 1
    uninstall_kernel(model, "rotate")


class Layer(nn.Module):
    """A forward as transformers writes a layer's: the hidden states by position, the rest by name,
    ``**kwargs`` for what it passes through."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8))

    def forward(self, x, mask=None, *extra, scale: float = 1.0, **kwargs):
        return x * self.weight * scale


def test_a_keyword_call_is_bound_as_inspect_binds_it_once_per_call_shape():
    layer = Layer().eval()
    guard = install_kernel(layer, "", Layer, [], signatures=["float32[4,8], None, 1.0, False"], device="cpu",
                           training=False)
    x, m = torch.randn(4, 8), torch.ones(4)
    calls = [((x,), {}), ((x,), {"mask": m}), ((x, m, 3, 4), {"scale": 2.0}), ((), {"x": x, "use_cache": False}),
             ((x,), {"use_cache": False, "mask": None, "cache": None}), ((x,), {"mask": m, "x": x})]
    for _ in range(2):  # the second pass is put in order by the plans the first left
        for args, kwargs in calls:
            want = bound_arguments(guard.original, args, kwargs)
            got = guard.bind(args, kwargs)
            assert len(got) == len(want) and all(g is w for g, w in zip(got, want)), (args, kwargs)
    assert len(guard._plans) == len(calls)
    # the same shape with other values: the values of this call, not the first's
    y = torch.randn(4, 8)
    assert guard.bind((y,), {"mask": None})[:2] == [y, None]
    with torch.no_grad():
        torch.testing.assert_close(layer(x, scale=1.0, use_cache=False), x * layer.weight)
    assert guard.kernel_calls == 1
