"""Shared pieces of the GPU tests: the add task, every CUDA build the tests load, settings, the
report rows.

The builds are made once per session and side by side (``gpu_builds``): a CUDA build is most of a
minute of nvcc, one after another they were most of the suite's time, and on the GPU machine's
cores the lot takes about as long as the slowest. The session fixtures are registered in
``tests/conftest.py``, so that every module shares the one copy.

Each candidate's verdict is also written to ``$GPU_CHECK_REPORT`` (JSON lines) for the table that
``scripts/gpu-check`` prints.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from .evalfixtures import write_task
from .gpu_tricks import CPP_SOURCE, CUDA_SOURCE, EXT_NAME, FUNCTIONS
from kevin_agent.config import RunConfig
from kevin_agent.evaluate import EvalSettings
from kevin_agent.task import load_task

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

ADD_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(1 << 22), torch.randn(1 << 22)]


def get_init_inputs():
    return []
'''

NEEDS_FULL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor relu_copy(torch::Tensor x) {
    auto r = torch::relu(x);  // an ATen operator: in the full headers only
    auto out = torch::empty_like(r);
    copy_kernel<<<(r.numel() + 255) / 256, 256>>>(r.data_ptr<float>(), out.data_ptr<float>(), r.numel());
    return out;
}
"""
ext = load_inline(name="needs_full", cpp_sources="torch::Tensor relu_copy(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_copy"])
assert (ext.relu_copy(torch.tensor([-1.0, 2.0], device="cuda")).cpu() == torch.tensor([0.0, 2.0])).all()


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_copy(x)
'''
"""A source the light CUDA headers cannot build (an ATen operator): built plainly after the fast build fails."""

BROKEN = NEEDS_FULL.replace("auto r = torch::relu(x);", "auto r = x; int oops = ;")
"""A genuine compile error: the plain build's error is the one reported."""


def report_row(kind: str, name: str, res, static: str = "") -> None:
    path = os.environ.get("GPU_CHECK_REPORT")
    if not path:
        return
    row = {"kind": kind, "name": name, "status": res.status.value, "static": static,
           "error": (res.error or "").splitlines()[-1][:160] if res.error else "",
           "flags": res.flags, "compile_s": res.compile_s, "cached": res.cached_build,
           "runtime_ms": res.runtime.median_ms if res.runtime else None,
           "reference_ms": res.reference.median_ms if res.reference else None,
           "compiled_ms": res.compiled_reference.median_ms if res.compiled_reference else None,
           "speedup": res.speedup, "speedup_vs_compile": res.speedup_vs_compile,
           "max_abs_err": res.max_abs_err, "max_rel_err": res.max_rel_err, "wall_s": res.wall_s,
           "implausible": res.implausible,
           "graph": res.graph.model_dump(mode="json") if res.graph else None,
           "sync": res.sync.model_dump(mode="json") if res.sync else None}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def example_cuda_kernels() -> list[tuple[str, str]]:
    """Every CUDA response of the examples: (``<example>-<turn>``, its code)."""
    from kevin_agent.engine.parsing import parse_response

    out = []
    for path in sorted(EXAMPLES.glob("*.cuda.jsonl")):
        for turn, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                out.append((f"{path.name.split('.')[0]}-{turn}", parse_response(json.loads(line)["text"]).code))
    return out


def few_shot_cuda_add() -> str:
    """The prompt's few-shot CUDA example, which tests/test_examples.py imports in its own process."""
    from importlib import resources

    return resources.files("kevin_agent.prompts.examples").joinpath("cuda_add.py").read_text(encoding="utf-8")


@dataclass
class GpuBuilds:
    root: Path
    """Its toolchain (light header, precompiled bindings header) and one folder per build."""
    examples: dict
    """Example kernel label -> (its fast build, the build paths it recorded, a plain build in the same folder after it)."""
    fallback: dict
    """``needs-full`` and ``broken`` -> their fast builds."""
    plain: dict
    """What tests/test_examples.py imports in its own process -> a build a plain load_inline finds
    up to date: each example's last kernel (by the example's name: its fast build, which the plain
    build after it found nothing to redo in) and the few-shot add (``cuda_add``)."""
    tricks_dir: str
    """The folder holding the misbehaving kernels' extension (``gpu_tricks``)."""

    def use_plain(self, name: str, monkeypatch) -> None:
        """Point this process's load_inline at the plain build of ``name``: it finds it up to date
        and imports it, instead of building it again."""
        from kevin_agent.evaluate.toolchain import cache

        build = self.plain[name]
        assert build.ok, build.log[-3000:]
        monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(build.folder))
        for key, value in cache.toolchain_env("cuda").items():
            monkeypatch.setenv(key, value)


def _build_tricks(folder: Path) -> str:
    """The misbehaving kernels, built in this process, which never launches them; candidates import
    the module from ``folder``."""
    from torch.utils.cpp_extension import load_inline

    folder.mkdir(parents=True, exist_ok=True)
    load_inline(name=EXT_NAME, cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=FUNCTIONS,
                build_directory=str(folder), extra_cuda_cflags=["-O3"])
    return str(folder)


def make_gpu_builds(root: Path) -> GpuBuilds:
    from concurrent.futures import ThreadPoolExecutor

    from kevin_agent.evaluate.parent.builds import build_once, warm_toolchain
    from kevin_agent.evaluate.toolchain import cache

    _, ready = warm_toolchain(root, "cuda")
    assert ready, (root / "warm" / "warm.log").read_text()

    def fast_then_plain(label: str, source: str):
        fast = build_once(source, root / label, "cuda", fast=True)
        paths = cache.build_paths(root / label)
        return fast, paths, build_once(source, root / label, "cuda", fast=False)

    kernels = example_cuda_kernels()
    with ThreadPoolExecutor(max(4, min(32, os.cpu_count() or 4))) as pool:
        tricks = pool.submit(_build_tricks, root / "tricks")
        examples = {label: pool.submit(fast_then_plain, label, source) for label, source in kernels}
        fallback = {name: pool.submit(build_once, source, root / name, "cuda", fast=True)
                    for name, source in (("needs-full", NEEDS_FULL), ("broken", BROKEN))}
        few_shot = pool.submit(build_once, few_shot_cuda_add(), root / "cuda_add", "cuda", fast=False)
        built = {k: f.result() for k, f in examples.items()}
        last = {label.rsplit("-", 1)[0]: label for label, _ in kernels}  # the last turn of each example
        plain = {name: built[label][2] for name, label in last.items()}
        return GpuBuilds(root=root, examples=built, fallback={k: f.result() for k, f in fallback.items()},
                         plain={**plain, "cuda_add": few_shot.result()}, tricks_dir=tricks.result())


@pytest.fixture(scope="session")
def gpu_builds(tmp_path_factory) -> GpuBuilds:
    """Every CUDA build the GPU tests load, made once per session, all at once."""
    return make_gpu_builds(tmp_path_factory.mktemp("gpu-builds"))


@pytest.fixture(scope="session")
def tricks_dir(gpu_builds) -> str:
    return gpu_builds.tricks_dir


@pytest.fixture(scope="session")
def add_task(tmp_path_factory):
    return load_task(write_task(tmp_path_factory.mktemp("gpu-task"), ADD_TASK, "add_task.py"))


def gpu_settings(**kw) -> EvalSettings:
    """Small, fast settings; what a test gives replaces them."""
    base = dict(device="cuda", cache_dir=RunConfig().cache_dir, compare_compile=False, warmup_runs=3,
                timed_runs=20, run_timeout_s=60, compile_timeout_s=600, parallel_compiles=8)
    return EvalSettings(**{**base, **kw})
