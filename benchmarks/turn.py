#!/usr/bin/env python3
"""One turn of 16 scripted candidates, cold and then with a warm build cache: where a turn goes.

The task is a per-channel affine + ReLU (8192 x 8192 float32 on cuda, 1024 x 1024 on cpu). The
candidates: 9 correct kernels (different block sizes and spellings, so 9 builds), 3 incorrect,
2 that do not compile, 1 that fails at run time and 1 whose kernel never ends. Printed side by
side, from one run: a plain ``load_inline`` build of one correct candidate against kevin-opt's
build of the same source; the cold and the warm turn's wall time; each candidate's evaluation
device time (load + correctness + timing, p50 and p90); and the cost of one more turn whose
build is cached (one candidate per turn, as with one trajectory; on cpu examples/rmsnorm.py with
its last scripted kernel) against a bare ``python -c "import torch"`` on the same machine.

With ``--kernelbench`` (cuda) it also runs one turn on each KernelBench-size task of
``benchmarks/tasks`` (KernelBench level 1 19_ReLU and 36_RMSNorm_ at KernelBench's own sizes, 6 and
7 GiB inputs): four builds of the task's honest kernel with different block sizes, each turn's wall
time, device time per candidate and peak memory against the task's footprint.

The toolchain (the light CUDA header, the precompiled bindings headers) is made first and its
one-time cost printed on its own line: a run makes it while the model writes its first responses.

Usage: benchmarks/turn.py [--device cuda|cpu] [--quick] [--repeat N] [--kernelbench] [--out FILE.json]
``--quick`` (cpu): six Python candidates, no compiler, one repetition: the CI smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.evaluate import EvalSettings, LocalEvaluator, detect_device  # noqa: E402
from kevin_agent.evaluate.parent.builds import warm_toolchain  # noqa: E402
from kevin_agent.evaluate.parent.evaluator import host_device_name  # noqa: E402
from kevin_agent.results import EvalResult, Status  # noqa: E402
from kevin_agent.task import load_task  # noqa: E402

TASK = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-channel affine, then ReLU: relu(x[c, :] * weight[c] + bias[c])."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))

    def forward(self, x):
        return torch.relu(x * self.weight[:, None] + self.bias[:, None])


def get_inputs():
    return [torch.randn({rows}, {cols})]


def get_init_inputs():
    return [{rows}]
'''

MODEL_NEW = '''

class ModelNew(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))

    def forward(self, x):
{body}
'''

CANDIDATE = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{sources}
ext = load_inline(name="affine_relu_{tag}", cpp_sources=cpp_source, {cuda_arg}functions=["affine_relu"],
                  extra_cflags=["-O3"]{cuda_flags})
''' + MODEL_NEW.replace("{body}", "        return ext.affine_relu(x.contiguous(), self.weight, self.bias)")

CUDA_SOURCES = '''cuda_source = r"""
#include <torch/extension.h>
__global__ void spin() {{ while (true) {{ __nanosleep(1000); }} }}
__global__ void affine_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ out, long rows, long cols) {{
    long n = rows * cols;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {{
        long c = {channel};
        float v = x[i] * w[c] + b[c];
        out[{index}] = {expr};
    }}
}}
torch::Tensor affine_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {{
    auto out = torch::empty_like(x);
    long rows = x.size(0), cols = x.numel() / rows;
    int threads = {threads};
    long blocks = std::min<long>((rows * cols + threads - 1) / threads, 4096L);
    {before}affine_relu_kernel<<<blocks, threads>>>(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
                                            out.data_ptr<float>(), rows, cols);
    return out;
}}
"""
cpp_source = "torch::Tensor affine_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b);"
'''

CPU_SOURCES = '''cpp_source = r"""
#include <torch/extension.h>
torch::Tensor affine_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {{
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const long rows = x.size(0), cols = x.numel() / rows, n = rows * cols, block = {threads};
    {before}for (long start = 0; start < n; start += block) {{
        for (long i = start; i < std::min(start + block, n); ++i) {{
            long c = {channel};
            float v = px[i] * pw[c] + pb[c];
            po[{index}] = {expr};
        }}
    }}
    return out;
}}
"""
'''

PYTHON_CANDIDATE = "import torch  # variant {tag}\nimport torch.nn as nn\n" + MODEL_NEW

RELU = {"cuda": "fmaxf(v, 0.f)", "cpu": "std::max(v, 0.f)"}
HANG = {"cuda": "spin<<<1, 1>>>();\n    ", "cpu": "while (true) { volatile long k = 0; (void)k; }\n    "}
CRASH = {"cuda": "", "cpu": 'TORCH_CHECK(false, "this kernel refuses to run");\n    '}


def kernel(device: str, tag: str, *, threads: int = 256, expr: str = "", channel: str = "i / cols",
           index: str = "i", before: str = "") -> str:
    template = CUDA_SOURCES if device == "cuda" else CPU_SOURCES
    sources = template.format(threads=threads, expr=expr or RELU[device], channel=channel, index=index,
                              before=before)
    cuda = device == "cuda"
    return CANDIDATE.format(sources=sources, tag=tag, cuda_arg="cuda_sources=cuda_source, " if cuda else "",
                            cuda_flags=', extra_cuda_cflags=["-O3"]' if cuda else "")


def candidates(device: str, nonce: str) -> list[tuple[str, str]]:
    """(expected status, source) for the sixteen candidates of the turn."""
    k = lambda tag, **kw: kernel(device, f"{tag}_{nonce}", **kw)  # noqa: E731
    correct = [k(f"ok{t}", threads=t) for t in (64, 128, 256, 512, 1024)]
    correct += [k(f"ok{t}b", threads=t, expr="v > 0.f ? v : 0.f") for t in (128, 256, 512, 1024)]
    crash = (k("crash", index="i + (1L << 36)") if device == "cuda" else k("crash", before=CRASH[device]))
    return ([("correct", s) for s in correct]
            + [("incorrect", k("norelu", expr="v")), ("incorrect", k("abs", expr="fabsf(v)")),
               ("incorrect", k("col", channel="i % cols"))]
            + [("compile_error", k("syntax", expr=RELU[device] + " +")),
               ("compile_error", k("undeclared", expr="relu(v)"))]
            + [("runtime_error", crash), ("timeout", k("hang", before=HANG[device]))])


def quick_candidates(nonce: str) -> list[tuple[str, str]]:
    body = "        return (x * self.weight[:, None] + self.bias[:, None]).clamp_min(0)"
    py = lambda tag, b=body: PYTHON_CANDIDATE.format(body=b, tag=f"{tag}_{nonce}")  # noqa: E731
    return [("correct", py(1)), ("correct", py(2)), ("correct", py(3)),
            ("incorrect", py(4, "        return x * self.weight[:, None] + self.bias[:, None]")),
            ("compile_error", py(5, "        return (")),
            ("timeout", py(6, "        while True:\n            pass"))]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


_T0 = time.monotonic()


def note(text: str) -> None:
    """Progress on stderr as it happens: a run cut short by its time limit still says how far it got."""
    print(f"[turn.py +{time.monotonic() - _T0:6.1f} s] {text}", file=sys.stderr, flush=True)


def wait_ready(ev: LocalEvaluator, timeout: float = 120.0) -> float:
    """Seconds until a worker waits for a candidate (what the model's generation would cover)."""
    start = time.monotonic()
    while ev.pool.ready_count() == 0 and time.monotonic() - start < timeout:
        time.sleep(0.05)
    return time.monotonic() - start


def run_turn(task_file: Path, settings: EvalSettings, sources: list[tuple[str, str]]) -> dict:
    ev = LocalEvaluator(load_task(task_file), settings)
    try:
        start = time.monotonic()
        ev.probe()
        probe_s = time.monotonic() - start
        note(f"probe and reference data: {probe_s:.1f} s")
        warm_s = wait_ready(ev)
        note(f"first worker ready: {warm_s:.1f} s")
        start = time.monotonic()
        futures = [ev.submit(src) for _, src in sources]
        results: list[EvalResult] = []
        for (expected, _), future in zip(sources, futures):
            results.append(future.result())
            note(f"candidate {len(results)}/{len(sources)}: {results[-1].status.value} (expected {expected}), "
                 f"{time.monotonic() - start:.1f} s into the turn")
        wall = time.monotonic() - start
    finally:
        ev.close()
    rows = []
    for (expected, _), res in zip(sources, results):
        st = res.stage_s
        rows.append({"expected": expected, "status": res.status.value, "cached": res.cached_build,
                     "compile_s": res.compile_s, "wall_s": res.wall_s, "stage_s": st.model_dump() if st else None,
                     "device_s": st.device if st else None, "speedup": res.speedup,
                     "peak_ratio": res.memory.ratio if res.memory else None,
                     "footprint_gib": res.memory.footprint_bytes / 2**30 if res.memory else None,
                     "error": res.error.splitlines()[0][:200] if res.error else ""})
    evaluated = [r["device_s"] for r in rows if r["device_s"] and r["status"] != Status.TIMEOUT.value]
    builds = [r["compile_s"] for r in rows if r["compile_s"] and not r["cached"]]
    return {"wall_s": wall, "probe_s": probe_s, "first_worker_s": warm_s, "rows": rows,
            "device_p50_s": quantile(evaluated, 0.5), "device_p90_s": quantile(evaluated, 0.9),
            "compile_p50_s": quantile(builds, 0.5), "compile_max_s": max(builds, default=None),
            "mismatches": [r for r in rows if r["expected"] != r["status"]]}


def plain_build(source: str, env: dict[str, str]) -> float:
    """A plain ``load_inline`` of ``source`` in a fresh process and build folder: the build alone."""
    with tempfile.TemporaryDirectory(prefix="kevin-plain-") as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(source)
        code = ("import time, torch, torch.utils.cpp_extension\nt = time.perf_counter()\n"
                f"exec(compile(open({str(path)!r}).read(), 'candidate.py', 'exec'), {{'__name__': 'plain'}})\n"
                "print(time.perf_counter() - t)")
        out = subprocess.run([sys.executable, "-c", code], env={**env, "TORCH_EXTENSIONS_DIR": tmp},
                             capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"the plain build failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def example_kernel(device: str) -> tuple[Path, str]:
    """examples/rmsnorm.py and the last kernel of its scripted responses for ``device``."""
    from kevin_agent.engine.parsing import parse_response

    lines = (REPO / "examples" / f"rmsnorm.{device}.jsonl").read_text().splitlines()
    codes = [parse_response(json.loads(line)["text"]).code for line in lines if line.strip()]
    return REPO / "examples" / "rmsnorm.py", [c for c in codes if c][-1]


def marginal_turns(task_file: Path, settings: EvalSettings, source: str, repeat: int) -> dict:
    """One cached correct candidate per turn, with a worker ready as after a model's generation;
    and back to back (no generation between turns) for comparison."""
    ev = LocalEvaluator(load_task(task_file), settings)
    covered, back_to_back = [], []
    try:
        ev.probe()
        first = ev.submit(source).result()  # builds it if needed; not counted
        if first.status is not Status.CORRECT:
            raise RuntimeError(f"the example kernel is not correct: {first.status.value}: {first.error}")
        for _ in range(repeat):
            wait_ready(ev)
            start = time.monotonic()
            ev.submit(source).result()
            covered.append(time.monotonic() - start)
        for _ in range(repeat):
            start = time.monotonic()
            ev.submit(source).result()
            back_to_back.append(time.monotonic() - start)
    finally:
        ev.close()
    return {"turn_s": covered, "back_to_back_s": back_to_back}


def bare_import(repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.monotonic() - start)
    return times


KERNELBENCH = [("relu_6gb.py", "relu_6gb_cuda.py"), ("rmsnorm_kb.py", "rmsnorm_kb_cuda.py")]
"""KernelBench-size tasks in benchmarks/tasks and each one's honest kernel (``const int threads = 256;``)."""


def kernelbench_turns(settings: EvalSettings) -> list[dict]:
    """One turn per KernelBench-size task: its honest kernel at four block sizes (four builds)."""
    tasks = REPO / "benchmarks" / "tasks"
    out = []
    for task, candidate in KERNELBENCH:
        base = (tasks / candidate).read_text()
        sources = [("correct", base.replace("const int threads = 256;", f"const int threads = {n};"))
                   for n in (128, 256, 512, 1024)]
        note(f"KernelBench-size turn: {task}")
        turn = run_turn(tasks / task, settings.model_copy(update={"compare_compile": False}), sources)
        note(f"{task}: {turn['wall_s']:.1f} s")
        out.append({"task": task, **turn})
    return out


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--quick", action="store_true", help="cpu smoke test: Python candidates, one repetition")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of the marginal turn and the bare import")
    parser.add_argument("--skip-plain", action="store_true", help="leave out the plain load_inline build")
    parser.add_argument("--kernelbench", action="store_true", help="also a turn on each KernelBench-size task (cuda)")
    parser.add_argument("--skip-marginal", action="store_true", help="leave out the cached one-candidate turns")
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    device = args.device or detect_device()
    quick = args.quick or device == "cpu" and os.environ.get("KEVIN_BENCH_QUICK") == "1"
    repeat = 1 if quick else args.repeat
    rows_cols = (8192, 8192) if device == "cuda" else (1024, 1024)
    work = Path(tempfile.mkdtemp(prefix="kevin-turn-bench-"))
    task_file = work / "affine_relu.py"
    task_file.write_text(TASK.format(rows=rows_cols[0], cols=rows_cols[1]))
    nonce = f"{os.getpid()}_{int(time.time())}"
    sources = quick_candidates(nonce) if quick else candidates(device, nonce)
    one = sources[0][1]
    settings = EvalSettings(device=device, cache_dir=work / "cache", op_audit=not quick)
    if quick:
        settings = settings.model_copy(update={"stage_floor_s": 5.0})
    report: dict = {"device": device, "task": f"affine_relu {rows_cols[0]}x{rows_cols[1]} float32",
                    "candidates": len(sources), "quick": quick}

    note(f"{device}: {len(sources)} candidates, {report['task']}")
    if not quick:
        # Once per machine and kept in the build cache; a run makes it during its first generation.
        report["toolchain_s"], ready = warm_toolchain(settings.cache_dir, device)
        note(f"toolchain made: {report['toolchain_s']:.1f} s{'' if ready else ' (NOT READY: see warm.log)'}")
    if not quick and not args.skip_plain:
        # Side by side, so that both see the same machine.
        # Its own copy of the first candidate: a cold build of it, with the toolchain made above.
        solo = LocalEvaluator(load_task(task_file), settings)
        with ThreadPoolExecutor(2) as pool:
            plain = pool.submit(plain_build, one, solo.env(None))
            report["kevin_build_s"] = solo.builds.build(one + "\n# built alone\n").compile_s
            report["plain_build_s"] = plain.result()
        solo.close()
        note(f"one build alone: plain {report['plain_build_s']:.1f} s, kevin-opt {report['kevin_build_s']:.1f} s")
    note("cold turn")
    report["cold"] = run_turn(task_file, settings, sources)
    note(f"cold turn: {report['cold']['wall_s']:.1f} s; warm turn")
    report["warm"] = run_turn(task_file, settings, sources)
    note(f"warm turn: {report['warm']['wall_s']:.1f} s; marginal turns")
    # On cpu the example's turn is the one the 0.6 target is about; on cuda the turn's own task.
    marginal_task, marginal_source = example_kernel(device) if device == "cpu" and not quick else (task_file, one)
    report["marginal_task"] = marginal_task.name
    report["marginal"] = ({"turn_s": [], "back_to_back_s": []} if args.skip_marginal else
                          marginal_turns(marginal_task, settings, marginal_source, repeat))
    note("bare import")
    report["bare_import_s"] = [] if args.skip_marginal else bare_import(repeat)
    if args.kernelbench and device == "cuda":
        report["kernelbench"] = kernelbench_turns(settings)

    cold, warm, marginal = report["cold"], report["warm"], report["marginal"]
    turn_med, import_med = median(marginal["turn_s"]), median(report["bare_import_s"])
    counts: dict[str, int] = {}
    for r in warm["rows"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    hang = next((r for r in cold["rows"] if r["status"] == "timeout"), None)
    lines = [
        f"kevin-opt turn benchmark: {device} ({host_device_name(device)}), "
        f"{len(sources)} candidates, {report['task']}",
        "",
        "| | cold | warm |",
        "|---|---:|---:|",
        f"| turn wall (s) | {fmt(cold['wall_s'])} | {fmt(warm['wall_s'])} |",
        f"| evaluation device time p50 / p90 (s) | {fmt(cold['device_p50_s'])} / {fmt(cold['device_p90_s'])} | "
        f"{fmt(warm['device_p50_s'])} / {fmt(warm['device_p90_s'])} |",
        f"| build p50 / max (s) | {fmt(cold['compile_p50_s'])} / {fmt(cold['compile_max_s'])} | cached |",
        f"| probe + reference data (s) | {fmt(cold['probe_s'])} | {fmt(warm['probe_s'])} |",
        f"| first worker ready after probe (s) | {fmt(cold['first_worker_s'])} | {fmt(warm['first_worker_s'])} |",
        "",
        f"statuses: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}",
    ]
    if hang is not None:
        lines.append(f"the hang: {hang['error']}")
    if "plain_build_s" in report:
        lines.append(f"build of one candidate alone: plain load_inline {fmt(report['plain_build_s'])} s, "
                     f"kevin-opt {fmt(report['kevin_build_s'])} s "
                     f"(ratio {fmt(report['kevin_build_s'] / report['plain_build_s'])})")
    lines += [
        f"one more turn of {report['marginal_task']}, build cached (median of {repeat}): {fmt(turn_med)} s "
        "with a worker ready "
        f"(back to back: {fmt(median(marginal['back_to_back_s']))} s); bare `python -c \"import torch\"`: "
        f"{fmt(import_med)} s; ratio {fmt(turn_med / import_med if turn_med and import_med else None)}",
    ]
    if "toolchain_s" in report:
        lines.append(f"the toolchain, once per machine (made during a run's first generation): "
                     f"{fmt(report['toolchain_s'])} s")
    if report.get("kernelbench"):
        lines += ["", "KernelBench-size tasks, one turn of four builds of the honest kernel each:", "",
                  "| task | footprint GiB | turn wall (s) | device p50 / p90 (s) | build p50 (s) | peak / footprint |",
                  "|---|---:|---:|---:|---:|---:|"]
        for kb in report["kernelbench"]:
            ratios = [r["peak_ratio"] for r in kb["rows"] if r["peak_ratio"]]
            foot = next((r["footprint_gib"] for r in kb["rows"] if r["footprint_gib"]), None)
            lines.append(f"| {kb['task']} | {fmt(foot, '.1f')} | {fmt(kb['wall_s'])} | {fmt(kb['device_p50_s'])} / "
                         f"{fmt(kb['device_p90_s'])} | {fmt(kb['compile_p50_s'])} | {fmt(max(ratios, default=None))} |")
            for r in kb["mismatches"]:
                lines.append(f"UNEXPECTED ({kb['task']}): {r['status']}: {r['error']}")
    for name, turn in (("cold", cold), ("warm", warm)):
        for r in turn["mismatches"]:
            lines.append(f"UNEXPECTED ({name}): expected {r['expected']}, got {r['status']}: {r['error']}")
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    kb_bad = any(kb["mismatches"] for kb in report.get("kernelbench", []))
    return 1 if cold["mismatches"] or warm["mismatches"] or kb_bad else 0


if __name__ == "__main__":
    sys.exit(main())
