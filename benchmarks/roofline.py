#!/usr/bin/env python3
"""How close to the hardware: each example's delivered kernel, and an element-wise kernel at
KernelBench's size, as shares of the task's roofline, beside eager PyTorch's and torch.compile's.

For every example (the last response of examples/<name>.<device>.jsonl, the kernel its scripted run
delivers) and, on cuda, KernelBench's 19_ReLU at its size (benchmarks/tasks/relu_6gb.py with its
honest float4 kernel, relu_6gb_cuda.py): one evaluator probes the task (its bytes, its FLOPs, the
measured bandwidth and FLOP rate), evaluates the kernel as a turn does, then confirms it as a run's
end does. Printed side by side: the bound and the floor, the kernel's share of the roofline in its
turn and confirmed, eager's and torch.compile's, and the speedup; on an NVIDIA GPU also the
bandwidth the driver's facts imply in theory and the measured copy's share of it. With ``--ncu``,
Nsight Compute profiles the rmsnorm example's kernel (on the cpu device it says why it cannot).

Target (cuda): a memory-bound element-wise kernel near the bandwidth (the 6 GiB ReLU) reads within 15%
of 1.0: it reads its input and writes its output once, the traffic of the copy the bandwidth is
measured with (docs/evaluation.md, "The roofline").

Progress goes to ``--out`` as it comes (progress.log, one JSON line per task in rows.jsonl), then
roofline.md and roofline.json there.

Usage (repository root):
  python benchmarks/roofline.py --out DIR [--device cuda|cpu] [--tasks rmsnorm,bias_gelu,softmax]
                                [--no-kernelbench] [--rounds N] [--workers N] [--ncu]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.config import RunConfig  # noqa: E402
from kevin_agent.errors import KevinError  # noqa: E402
from kevin_agent.evaluate import LocalEvaluator, detect_device  # noqa: E402
from kevin_agent.evaluate.parent.nsight import profile_kernel  # noqa: E402
from kevin_agent.formatting import fmt_fraction, ncu_lines  # noqa: E402
from kevin_agent.results.ncu import NcuProfile  # noqa: E402
from kevin_agent.task import load_task  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from confirm import EXAMPLES, delivered_kernel  # noqa: E402

KERNELBENCH = {"relu_6gb": "relu_6gb_cuda.py"}
"""The element-wise task at KernelBench's size and its honest kernel (cuda only)."""


class Progress:
    """Lines and rows written to the out folder as they come, so a call cut short still shows them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("progress.log", "rows.jsonl"):
            (folder / name).write_text("")

    def say(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {text}"
        print(line, file=sys.stderr, flush=True)
        with open(self.folder / "progress.log", "a", encoding="utf-8") as log:
            log.write(line + "\n")

    def row(self, row: dict) -> None:
        with open(self.folder / "rows.jsonl", "a", encoding="utf-8") as rows:
            rows.write(json.dumps(row) + "\n")


def task_and_kernel(name: str, device: str) -> tuple[Path, str]:
    if name in KERNELBENCH:
        tasks = REPO / "benchmarks" / "tasks"
        return tasks / f"{name}.py", (tasks / KERNELBENCH[name]).read_text()
    return REPO / "examples" / f"{name}.py", delivered_kernel(name, device)


def measure(name: str, device: str, rounds: int | None, workers: int | None, say) -> dict:
    """One task: its kernel evaluated as a turn and confirmed as a run's end, with the rooflines."""
    config = RunConfig(device=device, **({"confirm_rounds": rounds} if rounds else {}),
                       **({"confirm_workers": workers} if workers else {}))
    path, source = task_and_kernel(name, device)
    evaluator = LocalEvaluator(load_task(path), config.eval_settings(device))
    start = time.monotonic()
    try:
        evaluator.probe()
        say(f"{name}: probed in {time.monotonic() - start:.1f} s; evaluating its kernel")
        (turn,) = evaluator.evaluate([source])
        if turn.roofline is None:
            return {"task": name, "status": turn.status.value, "error": turn.error[-400:]}
        say(f"{name}: its turn reached {fmt_fraction(turn.roofline.fraction)} of the roofline; confirming it")
        (kernel,) = evaluator.confirm([source]).kernels
        facts = evaluator.device_facts
    finally:
        evaluator.close()
    roof, confirmed = turn.roofline, kernel.roofline
    theory = facts.bandwidth_gb_s if facts is not None else None
    return {
        "task": name, "status": turn.status.value, "bound": roof.bound, "bytes": roof.bytes, "flops": roof.flops,
        "bandwidth_gb_s": roof.bandwidth_gb_s, "flop_rate_tflop_s": roof.flop_rate_tflop_s, "dtype": roof.dtype,
        "floor_ms": roof.floor_ms, "turn_ms": turn.runtime.median_ms, "turn_fraction": roof.fraction,
        "confirmed_fraction": confirmed.fraction if confirmed is not None else None,
        "confirmed_ms": kernel.runtime.median_ms if kernel.runtime is not None else None,
        "eager_fraction": confirmed.reference_fraction if confirmed is not None else roof.reference_fraction,
        "compile_fraction": confirmed.compiled_fraction if confirmed is not None else roof.compiled_fraction,
        "speedup": kernel.speedup_median, "turn_speedup": turn.speedup, "verified": kernel.verified,
        "implausible": bool(kernel.implausible or turn.implausible),
        "theory_bandwidth_gb_s": theory, "copy_of_theory": roof.bandwidth_gb_s / theory if theory else None,
        "device_name": turn.device_name, "wall_s": round(time.monotonic() - start, 1),
    }


def _pct(value) -> str:
    return fmt_fraction(value) if value is not None else "-"


def table(rows: list[dict]) -> str:
    lines = ["| task | bound | floor | kernel, its turn | kernel, confirmed | eager | torch.compile | speedup "
             "| measured bandwidth (of theory) |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "bound" not in r:
            lines.append(f"| {r['task']} | {r['status']}: {r.get('error', '')[:80]} | | | | | | | |")
            continue
        work = f"{r['bytes'] / 1e6:.4g} MB" + (f", {r['flops']:.3g} FLOPs" if r["flops"] else "")
        theory = f" ({_pct(r['copy_of_theory'])} of {r['theory_bandwidth_gb_s']:.0f})" if r["copy_of_theory"] else ""
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "dropped"
        lines.append(f"| {r['task']} | {r['bound']} | {work}: {r['floor_ms']:.4g} ms | {_pct(r['turn_fraction'])} | "
                     f"{_pct(r['confirmed_fraction'])}{' FLAGGED' if r['implausible'] else ''} | "
                     f"{_pct(r['eager_fraction'])} | {_pct(r['compile_fraction'])} | {speedup} | "
                     f"{r['bandwidth_gb_s']:.4g} GB/s{theory} |")
    return "\n".join(lines)


def nsight(device: str, out: Path, say) -> list[str]:
    """Nsight Compute on the rmsnorm example's kernel, or why it cannot run here."""
    config = RunConfig(device="cuda")
    report = out / "ncu" / "rmsnorm"
    try:
        if device != "cuda":
            raise KevinError("the cpu device: Nsight Compute profiles CUDA kernels on an NVIDIA GPU")
        kernels = profile_kernel(delivered_kernel("rmsnorm", "cuda"), task_path=REPO / "examples" / "rmsnorm.py",
                                 class_name="Model", settings=config.eval_settings("cuda"), report=report)
    except KevinError as exc:
        lines = [f"ncu: not run: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else "")]
    else:
        lines = ncu_lines(NcuProfile(run_id="benchmark", trajectory=0, turn=0, report_path=f"{report}.ncu-rep",
                                     kernels=kernels))
    for line in lines:
        say(line)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the progress and the tables")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--tasks", default=",".join(EXAMPLES), help="comma-separated examples")
    parser.add_argument("--no-kernelbench", action="store_true", help="leave out the 6 GiB ReLU (cuda)")
    parser.add_argument("--rounds", type=int, default=None, help="at most this many confirmation rounds")
    parser.add_argument("--workers", type=int, default=None, help="confirmation workers (default: the device's)")
    parser.add_argument("--ncu", action="store_true", help="also Nsight Compute on the rmsnorm example's kernel")
    args = parser.parse_args()
    device = args.device or detect_device()
    progress = Progress(args.out)
    names = [n for n in args.tasks.split(",") if n]
    if device == "cuda" and not args.no_kernelbench:
        names += list(KERNELBENCH)
    elif not args.no_kernelbench:
        progress.say("relu_6gb: left out on the cpu device (its kernel is CUDA)")
    rows = []
    for name in names:
        progress.say(f"{name}: starting")
        row = measure(name, device, args.rounds, args.workers, progress.say)
        rows.append(row)
        progress.row(row)
        progress.say(table([row]).splitlines()[-1])
    ncu = nsight(device, args.out, progress.say) if args.ncu else []
    text = f"Roofline shares on {device} ({rows[0].get('device_name', '') if rows else ''}):\n\n{table(rows)}\n"
    if ncu:
        text += "\n" + "\n".join(ncu) + "\n"
    (args.out / "roofline.md").write_text(text, encoding="utf-8")
    (args.out / "roofline.json").write_text(json.dumps({"device": device, "rows": rows, "ncu": ncu}, indent=1))
    print(text)
    return 0 if all(r.get("verified") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
