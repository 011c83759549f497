"""A delivered Triton kernel module installed into a model, as a CUDA one is (test_kernel_op.py):
the kernel's code held as text, run on the first call it serves, a custom operator, so the model
works in torch.compile(fullgraph=True) and torch.export. Triton runs here in its interpreter
(TRITON_INTERPRET=1, the CPU). Its kernels compile at their first launch, so for Triton that first
call is part of the build: triton not importable, or a first call that fails (no interpreter and no
GPU), leaves the original forward after one warning, as a failed CUDA build does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from kevin_agent.delivery.kernel_module import check_shapes, render_kernel_module
from kevin_agent.model.worker.guard import KernelSource
from kevin_agent.task import load_task

from ..clihelp import REPO
from ..run_records import correct, run_info
from .test_kernel_op import calls_of, install_into_net, net_package

pytest.importorskip("triton")
pytestmark = pytest.mark.slow


def triton_answer(turn: int = 2) -> str:
    """A hand-written Triton RMSNorm of examples/rmsnorm.triton.jsonl: its second turn passes, its
    third passes too, autotuned."""
    text = json.loads((REPO / "examples" / "rmsnorm.triton.jsonl").read_text().splitlines()[turn - 1])["text"]
    return re.search(r"```python\n(.*?)```", text, re.S)[1]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """root/pkg/net.py with the Triton kernel module beside it, installed."""
    root = tmp_path_factory.mktemp("triton-op")
    task = net_package(root)
    info = run_info(task)
    info = info.model_copy(update={"config": {**info.config, "language": "triton"}})
    best = correct(0, 1, 2.0, code=triton_answer())
    # the family check runs the Triton kernel as the run's workers did: in the interpreter here
    family = check_shapes(task, best, info)
    assert family is not None and family.admitted == ["float32[n0,128]"] and not family.failed, family
    install_into_net(root, render_kernel_module(task, best, info, stem="net_norm_kevin", family=family))
    return root


def run_python(root, code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("KEVIN_KERNELS", "TRITON_INTERPRET")}
    return subprocess.run([sys.executable, "-c", code], cwd=root, env={**full, **env}, capture_output=True,
                          text=True, timeout=600)


RUN = textwrap.dedent('''\
    import json, sys, torch
    {shim}
    import pkg.net as net
    import pkg.net_norm_kevin as kernel
    assert sys.modules.get("triton") is None, "imported triton on import"
    model = net.get_model()
    reference = kernel.uninstall(net.get_model())
    x = net.get_inputs()[0]
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))
        torch.testing.assert_close(model(x), reference(x))
        eager = kernel.kernel_calls(model)
        imported = sys.modules.get("triton") is not None  # before torch.compile, which imports it itself
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x), reference(x))
        exported = torch.export.export(model, (x,))
        ops = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
        torch.testing.assert_close(exported.module()(x), reference(x))
    print("ops " + json.dumps(ops))
    print("eager " + json.dumps(eager))
    print("calls " + json.dumps(kernel.kernel_calls(model)))
    print("triton " + json.dumps(imported))
    ''')


def printed(proc, what: str):
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith(what + " ")]
    assert found, proc.stdout + proc.stderr
    return json.loads(found[-1][len(what) + 1:])


def warnings_of(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if "RuntimeWarning" in ln]


def test_the_module_says_triton_builds_at_the_first_call(package):
    text = (package / "pkg" / "net_norm_kevin.py").read_text()
    assert "Triton compiles its kernels at that call" in text and "load_inline" not in text
    assert "language='triton'" in text and "KEVIN_KERNEL_CODE = r'''import torch" in text


def test_the_triton_kernel_runs_eager_compiled_and_exported_as_a_custom_operator(package):
    proc = run_python(package, RUN.format(shim=""), TRITON_INTERPRET="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not warnings_of(proc), proc.stderr
    assert printed(proc, "eager") == {"norm": {"kernel": 2, "original": 0}}
    # the compiled graph's call and the exported program's each ran the kernel through the operator
    assert calls_of(proc) == {"norm": {"kernel": 4, "original": 0}}
    assert "kevin.net_norm_kevin.default" in printed(proc, "ops")
    assert "aten.rsqrt.default" not in printed(proc, "ops")


def test_without_triton_the_model_imports_and_runs_the_original_with_one_warning(package):
    proc = run_python(package, RUN.format(shim="sys.modules['triton'] = None"), TRITON_INTERPRET="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = warnings_of(proc)
    assert len(warned) == 1 and "net_norm_kevin: the kernel cannot be built or loaded here" in warned[0], proc.stderr
    assert "ModuleNotFoundError" in warned[0] and "the original forward runs instead" in warned[0]
    assert printed(proc, "eager") == {"norm": {"kernel": 0, "original": 2}}
    assert "kevin.net_norm_kevin.default" not in printed(proc, "ops")


def test_a_first_call_that_fails_is_a_failed_build_said_once(package):
    # triton imports and its @jit kernels are defined, but on the CPU without the interpreter the
    # first launch finds no GPU driver: the original forward runs, from then on, after one warning
    proc = run_python(package, RUN.format(shim=""))
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = warnings_of(proc)
    assert len(warned) == 1 and "net_norm_kevin: the kernel cannot be built or loaded here" in warned[0], proc.stderr
    assert printed(proc, "triton") is True
    assert "RuntimeError" in warned[0] and "Python file" not in warned[0]  # the launch failed, not the definition
    assert printed(proc, "eager") == {"norm": {"kernel": 0, "original": 2}}
    assert "kevin.net_norm_kevin.default" not in printed(proc, "ops")


def test_kevin_kernels_0_runs_the_original_without_importing_triton(package):
    proc = run_python(package, RUN.format(shim=""), TRITON_INTERPRET="1", KEVIN_KERNELS="0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not warnings_of(proc), proc.stderr
    assert printed(proc, "eager") == {"norm": {"kernel": 0, "original": 2}}
    assert printed(proc, "triton") is False


COMPILED_FIRST = textwrap.dedent('''\
    import json, torch
    import pkg.net as net
    import pkg.net_norm_kevin as kernel
    model = net.get_model()
    reference = kernel.uninstall(net.get_model())
    x = net.get_inputs()[0]
    with torch.no_grad():
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x), reference(x))
        torch.testing.assert_close(compiled(x), reference(x))
    print("calls " + json.dumps(kernel.kernel_calls(model)))
    ''')


def test_a_first_call_that_fails_inside_a_compiled_graph_runs_the_original_there(package):
    proc = run_python(package, COMPILED_FIRST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = warnings_of(proc)
    assert len(warned) == 1 and "net_norm_kevin: the kernel cannot be built or loaded here" in warned[0], proc.stderr
    # the first call fell back inside the operator; the guard, broken since, recompiled to the
    # original forward inline (calls a compiled graph runs are the operator's alone to count)
    assert calls_of(proc) == {"norm": {"kernel": 0, "original": 1}}


def test_the_triton_kernels_code_defines_its_jit_kernels_from_text(monkeypatch):
    # Triton's @jit reads its function's source (outside the interpreter): the code held as text
    # is found as a file's, so the kernel is defined here, and only its launch would need a GPU
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    source = KernelSource("triton_text", triton_answer(), language="triton")
    kernel_class = source.load()
    assert source.error == "" and kernel_class is not None and kernel_class.__name__ == "ModelNew"


def test_an_autotuned_kernel_verified_in_the_interpreter_runs_there_as_delivered(tmp_path):
    """@triton.autotune asks a GPU driver for its benchmarker; the interpreter has none, so the run's
    workers give it a wall-clock one. The delivered module carries that one where it was verified
    there, so it runs where it was verified; the same code without it fails at its first call."""
    code = triton_answer(turn=3)
    assert "triton.autotune" in code
    task = load_task(REPO / "examples" / "rmsnorm.py")
    info = run_info(task)
    info = info.model_copy(update={"config": {**info.config, "language": "triton"}})
    (tmp_path / "rmsnorm.py").write_text((REPO / "examples" / "rmsnorm.py").read_text())
    (tmp_path / "delivered_kevin.py").write_text(render_kernel_module(task, correct(0, 1, 2.0, code=code), info))
    (tmp_path / "bare_kevin.py").write_text(code)
    program = textwrap.dedent("""
        import sys, torch, rmsnorm
        from {module} import ModelNew
        torch.manual_seed(0)
        ref = rmsnorm.Model(64)
        new = ModelNew(64)
        new.load_state_dict(ref.state_dict())
        x = torch.randn(5, 64)
        torch.testing.assert_close(new(x), ref(x), atol=1e-5, rtol=1e-5)
        print("same")
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    ran = {m: subprocess.run([sys.executable, "-c", program.format(module=m)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300) for m in ("delivered_kevin", "bare_kevin")}
    assert ran["delivered_kevin"].returncode == 0 and "same" in ran["delivered_kevin"].stdout, \
        ran["delivered_kevin"].stderr[-2000:]
    assert ran["bare_kevin"].returncode != 0 and "active drivers" in ran["bare_kevin"].stderr
    # on the GPU it was verified on, the module is the kernel's code alone
    on_gpu = render_kernel_module(task, correct(0, 1, 2.0, code=code), info.model_copy(update={"device": "cuda"}))
    assert "TRITON_INTERPRET" not in on_gpu.split(code)[-1]
