#!/usr/bin/env python3
"""Triton beside CUDA: each example's hand-written Triton answer, its CUDA kernel and torch.compile, and
KernelBench's 19_ReLU at its size with a Triton ReLU as a share of its roofline.

For every example (rmsnorm, bias_gelu, softmax): the last response of examples/<name>.triton.jsonl (the
Triton kernel its scripted run ends with) evaluated with --language triton, and the last response of
examples/<name>.<device>.jsonl (the load_inline kernel) evaluated with --language cuda, each as a turn
and then confirmed as a run's end (verified again on fresh inputs, timed head to head with eager in
rounds); torch.compile of the reference is timed in the same workers. The target on the GPU: the Triton
kernel within 10% of the CUDA kernel's or torch.compile's time (``triton_ms <= 1.1 * min(cuda_ms,
compile_ms)``). KernelBench 19_ReLU (benchmarks/tasks/relu_6gb.py, 4096 x 393216 float32) with the
Triton ReLU of benchmarks/tasks/relu_6gb_triton.py: the target is >= 85% of its roofline, confirmed.

``--small`` (and every cpu run) shrinks each task to a few rows, since on the cpu device the Triton
kernels run in Triton's interpreter (every program of a launch in Python; the times are labelled the
interpreter's) and the ReLU to 4 x 4096: it shows that the script runs, not how fast anything is.

Progress goes to ``--out`` as it comes (progress.log, rows.jsonl), then triton_examples.md and .json.

Usage (repository root):
  python benchmarks/triton_examples.py --out DIR [--device cuda|cpu] [--small] [--tasks rmsnorm,softmax]
                                       [--no-kernelbench] [--rounds N] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.config import RunConfig  # noqa: E402
from kevin_agent.engine.parsing import parse_response  # noqa: E402
from kevin_agent.errors import KevinError  # noqa: E402
from kevin_agent.evaluate import LocalEvaluator, detect_device  # noqa: E402
from kevin_agent.formatting import fmt_fraction  # noqa: E402
from kevin_agent.task import load_task  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from confirm import EXAMPLES  # noqa: E402
from roofline import Progress  # noqa: E402

TASKS = REPO / "benchmarks" / "tasks"
WITHIN = 1.10
"""The Triton kernel's time may be at most this many times the CUDA kernel's or torch.compile's."""
ROOFLINE_TARGET = 0.85
_ROWS = re.compile(r"^(batch_size|rows) = \d+$", re.MULTILINE)
SMALL_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(4, 4096)]


def get_init_inputs():
    return []
'''


def last_answer(name: str, flavour: str) -> str:
    """The last scripted response's code in examples/<name>.<flavour>.jsonl."""
    path = REPO / "examples" / f"{name}.{flavour}.jsonl"
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    language = "triton" if flavour == "triton" else "cuda"
    return parse_response(json.loads(lines[-1])["text"], language=language).code


def task_file(name: str, small: bool, scratch: Path) -> Path:
    """The example's task file, or a copy with 4 rows (``small``)."""
    if name == "relu_6gb":
        if not small:
            return TASKS / "relu_6gb.py"
        path = scratch / "relu_small.py"
        path.write_text(SMALL_RELU, encoding="utf-8")
        return path
    source = (REPO / "examples" / f"{name}.py").read_text(encoding="utf-8")
    if not small:
        return REPO / "examples" / f"{name}.py"
    shrunk, count = _ROWS.subn(lambda m: f"{m.group(1)} = 4", source)
    assert count == 1, f"{name}.py: no rows to shrink"
    path = scratch / f"{name}.py"
    path.write_text(shrunk, encoding="utf-8")
    return path


def measure(task: Path, source: str, device: str, language: str, rounds: int | None, workers: int | None,
            small: bool) -> dict:
    """One kernel evaluated as a turn and confirmed as a run's end."""
    # Small: few runs, and room for a machine busy with builds (a load_inline that finds its build takes seconds).
    extra = {"timed_runs": 3, "warmup_runs": 1, "correctness_trials": 2, "load_timeout_s": 600} if small else {}
    # torch.compile beside them on the GPU; on the CPU (the interpreter's times) it would only cost minutes.
    config = RunConfig(device=device, language=language, compare_compile=device == "cuda", **extra,
                       **({"confirm_rounds": rounds} if rounds else {}),
                       **({"confirm_workers": workers} if workers else {}))
    evaluator = LocalEvaluator(load_task(task), config.eval_settings(device))
    start = time.monotonic()
    try:
        evaluator.probe()
        (turn,) = evaluator.evaluate([source])
        if turn.runtime is None:
            return {"language": language, "status": turn.status.value, "error": turn.error[-400:]}
        (kernel,) = evaluator.confirm([source]).kernels
    finally:
        evaluator.close()
    confirmed = kernel.runtime is not None
    compiled = (kernel.compiled_reference if confirmed and kernel.compiled_reference is not None
                else turn.compiled_reference)
    roof = kernel.roofline if kernel.roofline is not None else turn.roofline
    return {
        "language": language, "status": turn.status.value, "verified": kernel.verified,
        "ms": kernel.runtime.median_ms if confirmed else turn.runtime.median_ms,
        "turn_ms": turn.runtime.median_ms, "eager_ms": turn.reference.median_ms,
        "compile_ms": compiled.median_ms if compiled is not None else None,
        "speedup": kernel.speedup_median if confirmed else turn.speedup,
        "roofline_fraction": roof.fraction if roof is not None else None,
        "compile_stage_s": turn.stage_s.compile if turn.stage_s is not None else None,
        "flags": list(dict.fromkeys(turn.flags + list(kernel.flags))),
        "device_name": turn.device_name, "wall_s": round(time.monotonic() - start, 1),
    }


def compare(name: str, triton: dict, cuda: dict | None) -> dict:
    """The example's row: the Triton kernel's time against the CUDA kernel's and torch.compile's."""
    row = {"task": name, "triton": triton, "cuda": cuda}
    if "ms" not in triton:
        row["within_target"] = False
        return row
    rivals = [v for v in ((cuda or {}).get("ms"), triton.get("compile_ms")) if v]
    row["vs_cuda"] = triton["ms"] / cuda["ms"] if cuda and cuda.get("ms") else None
    row["vs_compile"] = triton["ms"] / triton["compile_ms"] if triton.get("compile_ms") else None
    row["within_target"] = bool(rivals) and triton["ms"] <= WITHIN * min(rivals)
    return row


def _ms(value) -> str:
    return f"{value:.4g}" if value else "-"


def _ratio(value) -> str:
    return f"{value:.2f}x" if value else "-"


def table(rows: list[dict], relu: dict | None, device: str, small: bool) -> str:
    lines = [f"Triton beside CUDA on {device}" + (" (small tasks; Triton in its interpreter)" if device == "cpu" or small
                                                   else ""), "",
             f"| task | Triton ms | {'CUDA' if device == 'cuda' else 'C++'} ms | torch.compile ms | eager ms | "
             "Triton / load_inline | Triton / compile | "
             f"within {WITHIN - 1:.0%} |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        t, c = r["triton"], r["cuda"] or {}
        if "ms" not in t:
            lines.append(f"| {r['task']} | {t['status']}: {t.get('error', '')[:80]} | | | | | | no |")
            continue
        lines.append(f"| {r['task']} | {_ms(t['ms'])} | {_ms(c.get('ms'))} | {_ms(t.get('compile_ms'))} | "
                     f"{_ms(t['eager_ms'])} | {_ratio(r['vs_cuda'])} | {_ratio(r['vs_compile'])} | "
                     f"{'yes' if r['within_target'] else 'no'} |")
    if relu is not None:
        lines.append("")
        if "ms" in relu:
            share = relu["roofline_fraction"]
            lines.append(f"KernelBench 19_ReLU{' (small)' if small or device == 'cpu' else ''}, Triton: "
                         f"{_ms(relu['ms'])} ms, {fmt_fraction(share) if share is not None else '-'} of its roofline "
                         f"(target {ROOFLINE_TARGET:.0%}: {'met' if share and share >= ROOFLINE_TARGET else 'not met'}), "
                         f"{_ratio(relu['speedup'])} over eager")
        else:
            lines.append(f"KernelBench 19_ReLU, Triton: {relu['status']}: {relu.get('error', '')[:200]}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the progress and the results")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--small", action="store_true", help="a few rows per task (always so on the cpu device)")
    parser.add_argument("--tasks", default=",".join(EXAMPLES), help="examples to run, comma-separated")
    parser.add_argument("--no-kernelbench", action="store_true", help="leave out KernelBench's 19_ReLU")
    parser.add_argument("--rounds", type=int, default=None, help="confirmation rounds (default the device's)")
    parser.add_argument("--workers", type=int, default=None, help="confirmation workers (default the device's)")
    args = parser.parse_args()
    device = args.device or detect_device()
    small = args.small or device == "cpu"
    progress = Progress(args.out)
    rows: list[dict] = []
    relu = None
    with tempfile.TemporaryDirectory(prefix="kevin-triton-bench-") as scratch:
        try:
            for name in [t for t in args.tasks.split(",") if t]:
                task = task_file(name, small, Path(scratch))
                progress.say(f"{name}: the Triton answer")
                triton = measure(task, last_answer(name, "triton"), device, "triton", args.rounds, args.workers, small)
                progress.say(f"{name}: the CUDA kernel" if device == "cuda" else f"{name}: the C++ kernel")
                cuda = measure(task, last_answer(name, device), device, "cuda", args.rounds, args.workers, small)
                rows.append(compare(name, triton, cuda))
                progress.row(rows[-1])
                progress.say(f"{name}: Triton {_ms(triton.get('ms'))} ms, load_inline {_ms(cuda.get('ms'))} ms, "
                             f"torch.compile {_ms(triton.get('compile_ms'))} ms")
            if not args.no_kernelbench:
                progress.say("KernelBench 19_ReLU: the Triton ReLU")
                relu = measure(task_file("relu_6gb", small, Path(scratch)),
                               (TASKS / "relu_6gb_triton.py").read_text(encoding="utf-8"), device, "triton",
                               args.rounds, args.workers, small)
                progress.row({"task": "relu_6gb", "triton": relu})
        except KevinError as exc:
            progress.say(f"stopped: {exc.message}")
            return 1
    text = table(rows, relu, device, small)
    print(text)
    (args.out / "triton_examples.md").write_text(text, encoding="utf-8")
    (args.out / "triton_examples.json").write_text(json.dumps({"device": device, "small": small, "rows": rows,
                                                               "relu": relu}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
