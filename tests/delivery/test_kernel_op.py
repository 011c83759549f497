"""A delivered kernel module installed into a model that lives in a package, with a real C++
kernel (load_inline): importing the model builds nothing; the first call builds the kernel; the
kernel is a custom operator, so the model works in torch.compile(fullgraph=True) and
torch.export with the same outputs; a kernel that cannot be built, or KEVIN_KERNELS=0, leaves the
original forward; the model file imports as a package module and runs as a script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from kevin_agent.config import EvalSettings
from kevin_agent.delivery.install import plan_change
from kevin_agent.delivery.kernel_module import render_kernel_module
from kevin_agent.model.family import check_family
from kevin_agent.model.marks import EXTRACTED_PREFIX, line
from kevin_agent.model.modelfile import load_model_file
from kevin_agent.model.records import ExtractedTask, SignatureUse
from kevin_agent.task import Task, load_task

from ..run_records import correct, run_info

pytestmark = pytest.mark.slow

NET = '''\
import json

import torch
import torch.nn as nn


class RowNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 128)
        self.norm = RowNorm(128)

    def forward(self, x):
        return self.norm(self.proj(x)) * 2.0


def get_model():
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    return model


def get_inputs():
    return [torch.randn(64, 16)]


if __name__ == "__main__":
    model = get_model()
    with torch.no_grad():
        model(*get_inputs())
    print("calls " + json.dumps({n: [g.kernel_calls, g.fallback_calls] for n, m in model.named_modules()
                                  if hasattr(g := m.__dict__.get("forward"), "fallback_calls")}))
'''

TASK = '''\
import torch
import torch.nn as nn


class RowNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return [128]
'''

KERNEL = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor row_norm(torch::Tensor x, torch::Tensor weight, double eps) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t d = xc.size(-1);
    const int64_t rows = xc.numel() / d;
    const float* xp = xc.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float ss = 0.0f;
        for (int64_t j = 0; j < d; ++j) ss += xp[r * d + j] * xp[r * d + j];
        const float inv = 1.0f / std::sqrt(ss / d + static_cast<float>(eps));
        for (int64_t j = 0; j < d; ++j) op[r * d + j] = xp[r * d + j] * inv * wp[j];
    }
    return out;
}
"""

ext = load_inline(name="kevin_test_row_norm_op", cpp_sources=source, functions=["row_norm"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return ext.row_norm(x, self.weight, self.eps)
'''

META = ExtractedTask(model_file="net.py", module="norm", class_name="RowNorm", capture="source", training=False,
                     init_inputs="[128]", signatures=[SignatureUse(key="float32[64,128]", calls=1)])


def builds() -> str:
    """Where the test's kernel is built: a folder of the shared build cache, so that it builds once."""
    root = os.environ.get("KEVIN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kevin-opt")
    return os.path.join(root, "test-kernel-op")


def net_package(root: Path) -> Task:
    """root/pkg/net.py, a package, and root/net_norm.py, its norm's task as extract writes it."""
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text(NET)
    task_path = root / "net_norm.py"
    task_path.write_text(line(EXTRACTED_PREFIX, META) + "\n" + TASK)
    return load_task(task_path, class_name="RowNorm")


def install_into_net(root: Path, module_text: str) -> None:
    """The kernel module beside root/pkg/net.py, installed by the change `kevin-opt install` writes."""
    pkg = root / "pkg"
    kernel = pkg / "net_norm_kevin.py"
    kernel.write_text(module_text)
    change = plan_change(load_model_file(pkg / "net.py"), [kernel])
    assert change.new_text and not change.why_not, change.why_not
    (pkg / "net.py").write_text(change.new_text)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """root/pkg/net.py with the kernel module beside it, installed."""
    root = tmp_path_factory.mktemp("kernel-op")
    task = net_package(root)
    # a plain build, as the subprocesses below load it (a run's family check finds the fast build it made)
    plain = EvalSettings(device="cpu", fast_build=False)
    family = check_family(str(task.path), "RowNorm", KERNEL, ["float32[64,128]"], plain, build_dir=builds())
    assert family.admitted == ["float32[n0,128]"], family
    install_into_net(root, render_kernel_module(task, correct(0, 1, 2.0, code=KERNEL), run_info(task),
                                                stem="net_norm_kevin", family=family))
    return root


def run_python(root, code_or_file: list[str], **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "TORCH_EXTENSIONS_DIR": builds(), **env}
    full.pop("KEVIN_KERNELS", None) if "KEVIN_KERNELS" not in env else None
    return subprocess.run([sys.executable, *code_or_file], cwd=root, env=full, capture_output=True, text=True,
                          timeout=600)


def calls_of(proc) -> dict:
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith("calls ")]
    assert found, proc.stdout + proc.stderr
    return json.loads(found[-1][len("calls "):])


CHECK = textwrap.dedent('''\
    import json, os, torch
    import pkg.net as net
    import pkg.net_norm_kevin as kernel
    built = os.environ["TORCH_EXTENSIONS_DIR"]
    assert not os.path.exists(built) or not os.listdir(built), "built on import"
    model = net.get_model()
    x = net.get_inputs()[0]
    with torch.no_grad():
        got = [model(x), model(x)]
        print("calls " + json.dumps(kernel.kernel_calls(model)))
        kernel.uninstall(model)
        want = model(x)
    assert all(torch.equal(g, want) for g in got)
    ''')


def test_the_package_import_and_the_script_both_run_the_kernel(package):
    as_script = run_python(package / "pkg", ["net.py"])
    assert as_script.returncode == 0, as_script.stderr
    assert calls_of(as_script) == {"norm": [1, 0]}
    imported = run_python(package, ["-c", "import pkg.net as n, torch, json\nm = n.get_model()\n"
                                          "with torch.no_grad(): m(*n.get_inputs())\n"
                                          "print('calls ' + json.dumps(n.net_norm_kevin.kernel_calls(m)))"])
    assert imported.returncode == 0, imported.stderr
    assert calls_of(imported) == {"norm": {"kernel": 1, "original": 0}}
    assert "RuntimeWarning" not in imported.stderr


def test_without_a_compiler_import_builds_nothing_and_a_call_runs_the_original_with_one_warning(package, tmp_path):
    empty = tmp_path / "extensions"
    proc = run_python(package, ["-c", CHECK], PATH=os.path.dirname(sys.executable), CXX="/no/such/c++",
                      CC="/no/such/cc", TORCH_EXTENSIONS_DIR=str(empty))
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "RuntimeWarning" in ln]
    assert calls_of(proc) == {"norm": {"kernel": 0, "original": 2}}
    assert len(warned) == 1 and "net_norm_kevin: the kernel cannot be built or loaded here" in warned[0], proc.stderr
    assert "the original forward runs instead" in warned[0]


def test_kevin_kernels_0_turns_the_kernel_off_and_builds_nothing(package, tmp_path):
    empty = tmp_path / "extensions"
    proc = run_python(package / "pkg", ["net.py"], KEVIN_KERNELS="0", TORCH_EXTENSIONS_DIR=str(empty))
    assert proc.returncode == 0, proc.stderr
    assert calls_of(proc) == {"norm": [0, 1]}
    assert not empty.exists() or not any(empty.iterdir())
    assert "RuntimeWarning" not in proc.stderr


@pytest.fixture(scope="module")
def installed(package):
    sys.path.insert(0, str(package))
    saved = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = builds()
    try:
        import pkg.net as net
        yield net
    finally:
        sys.path.remove(str(package))
        if saved is None:
            os.environ.pop("TORCH_EXTENSIONS_DIR", None)
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = saved
        for name in [n for n in sys.modules if n == "pkg" or n.startswith("pkg.")]:
            del sys.modules[name]


def _original(net):
    model = net.get_model()
    net.net_norm_kevin.uninstall(model)
    return model


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_the_installed_kernel_compiles_whole_with_the_same_outputs(installed, backend):
    net = installed
    model, reference = net.get_model(), _original(net)
    x = net.get_inputs()[0]
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        compiled = torch.compile(model, backend=backend, fullgraph=True)
        got, again = compiled(x), compiled(x)
        want = reference(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(again, want)
    # the kernel ran inside the compiled graph, twice: the custom operator counts where it runs
    assert net.net_norm_kevin.kernel_calls(model) == {"norm": {"kernel": 2, "original": 0}}


def test_the_installed_kernel_exports_as_a_custom_operator(installed):
    net = installed
    model, reference = net.get_model(), _original(net)
    x = net.get_inputs()[0]
    with torch.no_grad():
        exported = torch.export.export(model, (x,))
        ops = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
        assert "kevin.net_norm_kevin.default" in ops, ops
        torch.testing.assert_close(exported.module()(x), reference(x))


def test_the_kernel_runs_at_every_batch_size_of_the_family_it_passed(installed):
    net = installed
    text = (Path(net.__file__).parent / "net_norm_kevin.py").read_text()
    assert "KEVIN_SIGNATURES = ['float32[n0,128]']" in text
    assert "float32[n0,128]: checked against the original at float32[1,128]; float32[7,128]; float32[97,128]" in text
    model, reference = net.get_model(), _original(net)
    with torch.no_grad():
        for rows in (1, 5, 300):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(model(x), reference(x))
        assert net.net_norm_kevin.kernel_calls(model) == {"norm": {"kernel": 3, "original": 0}}
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        for rows in (64, 5, 300):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(compiled(x), reference(x))
    assert net.net_norm_kevin.kernel_calls(model)["norm"]["kernel"] == 6
