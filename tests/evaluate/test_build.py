"""The fast build path: precompiled bindings header, light CUDA headers, plain fallback.

The cpu tests build for real with gcc; the light-header tests run nvcc where it is installed
(compiling, not linking: the cpu wheel has no CUDA libraries); the gpu tests build and load
the example kernels and check the fallback on the GPU machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..gpufixtures import example_cuda_kernels
from kevin_agent.config import EvalSettings, RunConfig, parallel_compiles_for
from kevin_agent.evaluate.toolchain import cache, light
from kevin_agent.evaluate.parent.builds import ToolchainWarmer, build_once, warm_toolchain
from kevin_agent.evaluate.toolchain.build import Plan, needs_plain_retry

REPO = Path(__file__).resolve().parents[2]
CPU_ADD = (REPO / "prompts" / "examples" / "cpu_add.py").read_text()
NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")


# --- rules ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("source", "reason"), [
    ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <cuda_fp16.h>\n", None),
    ('#include "torch/types.h"\n#include <c10/cuda/CUDAGuard.h>\n#include <cub/cub.cuh>\n', None),
    ("#include <torch/torch.h>\n", "includes <torch/torch.h>"),
    ("#include <torch/extension.h>\n#include <torch/nn/functional.h>\n", "includes <torch/nn/functional.h>"),
    ("#include <pybind11/pybind11.h>\n", "includes <pybind11/pybind11.h>"),
    ("#include <torch/extension.h>\nPYBIND11_MODULE(m, m) {}\n", "uses PYBIND11_MODULE"),
])
def test_light_headers_only_where_the_sources_own_includes_allow(source, reason):
    assert light.refusal([source]) == reason


def test_a_failed_fast_build_is_retried_plainly_only_where_the_fast_path_may_be_the_cause():
    light_plan, pch_plan = Plan(light=True, pch=True, nvcc_threads=True), Plan(pch=True)
    cu_failed = "FAILED: cuda.cuda.o \ncuda.cu(3): error: namespace torch has no member relu\n"
    main_failed = "FAILED: main.o \nmain.cpp:5:18: error: cannot convert\n"
    assert needs_plain_retry(cu_failed, light_plan)
    assert not needs_plain_retry(main_failed, light_plan)  # the bindings never see the light header
    assert not needs_plain_retry(main_failed, pch_plan)  # GCC reads the real header when the .gch does not fit
    assert needs_plain_retry(main_failed + "internal compiler error: Segmentation fault\n", pch_plan)
    assert not needs_plain_retry("FAILED: cuda.cuda.o \ncuda.cu(3): error: x\n", Plan(nvcc_threads=True))
    assert needs_plain_retry("ninja: error: loading 'build.ninja'\n", pch_plan)  # no target named


def test_build_key_covers_the_build_path(monkeypatch):
    source = "print('kernel')"
    fast, plain = cache.build_key(source, "cpu", True), cache.build_key(source, "cpu", False)
    assert fast != plain and cache.build_key(source, "cpu") == fast
    monkeypatch.setattr(cache, "FAST_PATH_VERSION", cache.FAST_PATH_VERSION + 1)
    assert cache.build_key(source, "cpu", True) not in (fast, plain)


def test_parallel_compiles_follow_cores_and_memory():
    assert parallel_compiles_for(16, 120.0) == 9  # the H200 host: cores decide
    assert parallel_compiles_for(64, 7.0) == 2  # little memory decides
    assert parallel_compiles_for(1, 100.0) == 1 and parallel_compiles_for(8, 1.0) == 1
    assert EvalSettings(device="cpu").parallel_compiles >= 1
    assert RunConfig(parallel_compiles=5).eval_settings("cuda").parallel_compiles == 5
    assert RunConfig(fast_build=False).eval_settings("cpu").fast_build is False
    assert RunConfig().eval_settings("cpu").fast_build is True


def test_light_header_is_made_from_this_torch():
    from kevin_agent.evaluate.toolchain.headers import torch_include

    text = light.header_text(torch_include())
    assert "#include <ATen/core/Tensor.h>" in text and "#include <ATen/Dispatch.h>" in text
    # torch's own factories, same overloads, without autograd's header
    assert "inline at::Tensor empty_like(" in text and "kevin_light::make_variable(at::zeros(" in text
    assert "autograd::make_variable(" not in text and "variable.h" not in text
    assert "constexpr auto kFloat32 = at::kFloat;" in text  # torch/types.h's own aliases
    # what the full headers declare in torch itself is a dead end here, not at::'s namesake
    for name in ("namespace cuda {}", "namespace nn {}", "struct tensor;", "struct normal;"):
        assert name in text, name


# --- cpu: precompiled header, for real --------------------------------------------------------
@pytest.mark.slow
def test_cpu_fast_build_uses_the_precompiled_header_and_builds_what_plain_builds(tmp_path):
    warm_s, ready = warm_toolchain(tmp_path / "fast", "cpu")
    assert ready, (tmp_path / "fast" / "warm" / "warm.log").read_text()
    assert list((tmp_path / "fast" / "toolchain").glob("pch-*/torch/extension.h.gch"))
    # The next evaluator on this cache in this process (a bench's next task) starts no warm-up again.
    again = ToolchainWarmer(tmp_path / "fast", "cpu")
    again.start()
    assert again._proc is None and again.wait(1)
    assert ToolchainWarmer(tmp_path / "other", "cpu").made.isdisjoint({(str(tmp_path / "other"), "cpu")})

    fast_dir, plain_dir = tmp_path / "fast" / "k", tmp_path / "plain" / "k"
    fast_ok = build_once(CPU_ADD, fast_dir, "cpu", fast=True).ok
    log = (fast_dir / "compile.log").read_text()
    assert fast_ok, log
    assert "[kevin-opt build] elementwise_add: fast build: precompiled torch/extension.h" in log
    assert "c++ -MMD" in log  # the compiler's own log is still there
    assert [(r["path"], r["pch"], r["light"]) for r in cache.build_paths(fast_dir)] == [("fast", True, False)]

    plain_ok = build_once(CPU_ADD, plain_dir, "cpu", fast=False).ok
    assert plain_ok, (plain_dir / "compile.log").read_text()
    # gcc took the header from the .gch: the same object, byte for byte
    assert (fast_dir / "elementwise_add" / "main.o").read_bytes() == \
        (plain_dir / "elementwise_add" / "main.o").read_bytes()

    # A plain load_inline of the same source in the same folder (as the run stage does)
    # finds the fast build up to date.
    again_ok = build_once(CPU_ADD, fast_dir, "cpu", fast=False).ok
    assert again_ok and "ninja: no work to do" in (fast_dir / "compile.log").read_text()


# --- the light header under nvcc (compile only) -------------------------------------------------
def _nvcc(source: str, folder: Path, *extra: str, light_dir: Path | None) -> subprocess.CompletedProcess:
    import sysconfig

    import torch.utils.cpp_extension as cpp

    path = folder / "k.cu"
    path.write_text("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + source)
    dirs = [*cpp.include_paths(), str(NVCC.parent.parent / "include"), sysconfig.get_path("include")]
    includes = [f for p in dirs for f in ("-isystem", p)]
    env = {**os.environ, "CPATH": str(light_dir)} if light_dir else dict(os.environ)
    return subprocess.run([str(NVCC), *includes, *cpp.COMMON_NVCC_FLAGS, "-std=c++20", "-DTORCH_API_INCLUDE_EXTENSION_H",
                           "-gencode=arch=compute_90a,code=sm_90a", *extra, str(path)],
                          capture_output=True, text=True, env=env, cwd=folder, timeout=600)


KERNEL = r"""
#include <torch/extension.h>
__global__ void scale_kernel(const float* x, float* y, float s, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}
std::vector<torch::Tensor> scale(torch::Tensor x, double s) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only, got ", x.scalar_type());
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    auto flags = torch::zeros({xc.size(0)}, xc.options().dtype(torch::kInt32).requires_grad(false));
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "scale", ([&] { (void)xc.data_ptr<scalar_t>(); }));
    scale_kernel<<<(xc.numel() + 255) / 256, 256>>>(xc.data_ptr<float>(), out.data_ptr<float>(), (float)s, xc.numel());
    return {out.view({-1}), flags};
}
"""


@pytest.mark.slow
@pytest.mark.skipif(not NVCC.exists(), reason="no nvcc")
def test_light_header_builds_a_kernel_without_the_frontend_and_refuses_torch_only_names(tmp_path):
    overlay = light.overlay(tmp_path / "toolchain")
    assert overlay is not None
    deps = _nvcc(KERNEL, tmp_path, "-M", light_dir=overlay)
    assert deps.returncode == 0, deps.stderr
    assert "kevin_light.h" in deps.stdout and "torch/csrc/api/include/torch/nn" not in deps.stdout
    assert "variable_factories.h" not in deps.stdout and "pybind11" not in deps.stdout
    plain_deps = _nvcc(KERNEL, tmp_path, "-M", light_dir=None)
    assert "torch/csrc/api/include/torch/nn" in plain_deps.stdout  # what the light header leaves out

    built = _nvcc(KERNEL, tmp_path, "-c", "-o", "k.o", light_dir=overlay)
    assert built.returncode == 0, built.stderr[-3000:]

    # torch::tensor infers dtypes unlike at::tensor; torch::cuda is not at::cuda: both must
    # fail here (and so build with the full headers) rather than compile to something else.
    refused = _nvcc("#include <torch/extension.h>\n"
                    "torch::Tensor f() { return torch::tensor({1.0, 2.0}); }\n"
                    "void g() { torch::cuda::getCurrentCUDAStream(); }\n", tmp_path, "-c", "-o", "r.o",
                    light_dir=overlay)
    assert refused.returncode != 0
    assert 'incomplete type "torch::tensor"' in refused.stderr + refused.stdout
    assert 'namespace "torch::cuda" has no member' in refused.stderr + refused.stdout


# --- gpu: the example kernels, loaded; the fallback ---------------------------------------------
# Built once per session, all at once, before the first of these runs (gpufixtures.gpu_builds).
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize(("label", "source"), example_cuda_kernels(), ids=lambda v: v if len(v) < 40 else "")
def test_gpu_example_kernel_builds_fast_with_light_headers_and_stays_built(label, source, gpu_builds):
    fast, paths, again = gpu_builds.examples[label]
    assert fast.ok, fast.log
    assert [(r["path"], r["pch"], r["light"]) for r in paths] == [("fast", True, True)], fast.log
    assert again.ok and "ninja: no work to do" in again.log, again.log


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_source_that_needs_the_full_headers_is_built_plainly_after_the_light_build_fails(gpu_builds):
    build = gpu_builds.fallback["needs-full"]
    folder, log = build.folder, build.log
    assert build.ok, log
    assert "the fast build failed" in log and "needs_full: plain build after the fast one failed\n" in log
    assert [r["path"] for r in cache.build_paths(folder)] == ["plain-after-fast"]
    assert "relu" in (folder / "needs_full" / "kevin-fast-attempt.log").read_text()
    # the light attempt's errors are not in the log the model would see
    assert "namespace \"torch\" has no member \"relu\"" not in log


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_genuine_compile_error_reports_the_plain_builds_error(gpu_builds):
    build = gpu_builds.fallback["broken"]
    assert not build.ok
    assert "the fast build failed" in build.log and "error" in build.log.split("the fast build failed", 1)[1]


@pytest.mark.slow
def test_a_fast_build_that_broke_down_is_really_built_again_plainly(tmp_path, monkeypatch):
    """torch builds an extension again only when its sources or flags change, and the fast build's
    changes travel in the environment: the plain retry must still compile (not import a .so the
    failed attempt never made)."""
    from kevin_agent.evaluate.toolchain import build

    broken = tmp_path / "broken-cxx"
    # a compiler that answers torch's questions about itself and breaks down on every compile
    broken.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -c ] && { echo "internal compiler error: Segmentation '
                      'fault" >&2; exit 1; }; done\nexec c++ "$@"\n')
    broken.chmod(0o755)

    class BrokenTool(Plan):
        def env(self) -> dict[str, str]:
            return {"CXX": str(broken)}

    monkeypatch.setattr(build, "make_plan", lambda arguments, shared: (BrokenTool(), lambda: None))
    folder = tmp_path / "ext"
    folder.mkdir()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(folder))
    source = "#include <torch/extension.h>\nint64_t twice(int64_t x) { return 2 * x; }\n"
    from torch.utils.cpp_extension import load_inline

    arguments = {"name": "kevin_retry_probe", "cpp_sources": source, "functions": ["twice"],
                 "build_directory": str(folder)}
    module = build.fast_load_inline(lambda: load_inline(**arguments), arguments, shared=tmp_path / "shared")
    assert module.twice(21) == 42
    rows = cache.build_paths(folder)
    assert [r["path"] for r in rows] == ["plain-after-fast"]


BUILD_IN_A_PROCESS = """
import sys
from pathlib import Path
from kevin_agent.config import EvalSettings
from kevin_agent.evaluate.parent.builds import compile_in
from kevin_agent.evaluate.toolchain import cache
from kevin_agent.workers import scrubbed_env

folder = Path(sys.argv[1])
settings = EvalSettings(device="cpu", compile_timeout_s=120, cache_dir=folder.parent)
env = scrubbed_env({"TORCH_EXTENSIONS_DIR": str(folder), **cache.toolchain_env("cpu")})
build = compile_in(folder, Path(sys.argv[2]).read_text(), settings=settings, env=env, job={"settings": settings})
print("cached" if build.cached else "built", build.ok, build.error)
"""


def test_two_processes_building_one_source_build_it_once(tmp_path):
    """Two runs on one build cache submitting the same source: one builds, the other waits for it
    and finds it built, instead of both writing one folder's candidate and torch's build lock (the
    second's clearing of the lock failed the first's build)."""
    record = tmp_path / "builds.txt"
    # The "build" is the candidate's import in the compile worker: it notes itself and takes a while.
    source = (f"import os, time\nwith open({str(record)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
              "time.sleep(3)\n")
    (tmp_path / "source.py").write_text(source)
    (tmp_path / "build.py").write_text(BUILD_IN_A_PROCESS)
    folder = tmp_path / "cache" / "one-source"
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "build.py"), str(folder), str(tmp_path / "source.py")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sorted(out.split()[0] for out, _ in outs) == ["built", "cached"], outs
    assert all(out.split()[1] == "True" for out, _ in outs), outs
    assert len(record.read_text().splitlines()) == 1
