"""Shared pieces of the GPU tests: the add task, the prebuilt trick kernels, settings, the report rows.

Each candidate's verdict is also written to ``$GPU_CHECK_REPORT`` (JSON lines) for the table that
``scripts/gpu-check`` prints.
"""

from __future__ import annotations

import json
import os

import pytest

from .evalfixtures import write_task
from .gpu_tricks import CPP_SOURCE, CUDA_SOURCE, EXT_NAME, FUNCTIONS
from kevin_agent.config import RunConfig
from kevin_agent.evaluate import EvalSettings
from kevin_agent.task import load_task

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


@pytest.fixture(scope="module")
def add_task(tmp_path_factory):
    return load_task(write_task(tmp_path_factory.mktemp("gpu-task"), ADD_TASK, "add_task.py"))


@pytest.fixture(scope="module")
def tricks_dir(tmp_path_factory) -> str:
    """The misbehaving kernels, built once (in this process, which never launches them)."""
    from torch.utils.cpp_extension import load_inline

    folder = tmp_path_factory.mktemp("tricks")
    load_inline(name=EXT_NAME, cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=FUNCTIONS,
                build_directory=str(folder), extra_cuda_cflags=["-O3"])
    return str(folder)


def gpu_settings(**kw) -> EvalSettings:
    """Small, fast settings; what a test gives replaces them."""
    base = dict(device="cuda", cache_dir=RunConfig().cache_dir, compare_compile=False, warmup_runs=3,
                timed_runs=20, run_timeout_s=60, compile_timeout_s=600, parallel_compiles=8)
    return EvalSettings(**{**base, **kw})
