#!/usr/bin/env python3
"""How stable a confirmation is: the same kernel confirmed several times in a row on each example.

For every example task (the last response of examples/<name>.<device>.jsonl, the kernel the
scripted run delivers) one evaluator confirms that kernel ``--times`` times in a row, each time
on fresh seeds in a fresh worker, exactly as a run confirms its best kernels when it ends
(``LocalEvaluator.confirm``). Printed side by side: each confirmation's median speedup over eager
with its 95% interval, and the spread of the medians, (max - min) / median of the medians.

Beside them, the kernel's own turn (the number a run, and ``kevin-opt check``, reports for it), and
the time with each call's launches in it where that differs from the headline.

Target: on cuda, the medians within 2% of each other on every task, also with ``--busy 16``
(sixteen C++ compiles of PyTorch's headers running beside the confirmations, as a turn's builds
do), and the turn's number within 3% of theirs; a spread far wider than the intervals says the
rounds do not see what varies between workers.

Each confirmation runs as a run's does: in the device's ``confirm_workers`` workers (4 on cuda),
their rounds pooled; "one worker's spread" is how far those workers' own medians lay apart inside
one confirmation (the median over the confirmations), what a single worker would have risked.

Usage (repository root):
  python benchmarks/confirm.py [--device cuda|cpu] [--times N] [--rounds N] [--tasks a,b] [--kernelbench N]
                               [--busy N [--busy-only]] [--workers N] [--out FILE.json]
``--rounds`` caps the head-to-head rounds (default: the device's ``confirm_rounds``); ``--kernelbench N``
adds the KernelBench-size tasks of benchmarks/tasks (their honest kernels), confirmed N times each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.config import RunConfig  # noqa: E402
from kevin_agent.evaluate import LocalEvaluator, detect_device  # noqa: E402
from kevin_agent.engine.parsing import parse_response  # noqa: E402
from kevin_agent.task import load_task  # noqa: E402

EXAMPLES = ["rmsnorm", "bias_gelu", "softmax"]


KERNELBENCH = {"relu_6gb": "relu_6gb_cuda.py", "rmsnorm_kb": "rmsnorm_kb_cuda.py"}
"""KernelBench-size tasks in benchmarks/tasks and their honest kernels."""


def delivered_kernel(name: str, device: str) -> str:
    """The last scripted response's kernel: the one the example's run ends with."""
    lines = [line for line in (REPO / "examples" / f"{name}.{device}.jsonl").read_text().splitlines() if line.strip()]
    return parse_response(json.loads(lines[-1])["text"]).code


def task_and_kernel(name: str, device: str) -> tuple[Path, str]:
    if name in KERNELBENCH:
        tasks = REPO / "benchmarks" / "tasks"
        return tasks / f"{name}.py", (tasks / KERNELBENCH[name]).read_text()
    return REPO / "examples" / f"{name}.py", delivered_kernel(name, device)


def prepared(name: str, device: str, rounds: int | None, workers: int | None) -> tuple[LocalEvaluator, str, object]:
    """An evaluator of the task with its kernel built and evaluated once (as its run did)."""
    config = RunConfig(device=device, **({"confirm_rounds": rounds} if rounds else {}),
                       **({"confirm_workers": workers} if workers else {}))
    path, source = task_and_kernel(name, device)
    evaluator = LocalEvaluator(load_task(path), config.eval_settings(device))
    evaluator.probe()
    (built,) = evaluator.evaluate([source])
    return evaluator, source, built


@contextlib.contextmanager
def busy_builds(count: int):
    """``count`` compiles of ``torch/extension.h`` running over and over beside the block (each one
    core of the host, as a turn's builds load it)."""
    import torch

    include = Path(torch.__file__).parent / "include"
    flags = (f"-isystem {include} -isystem {include}/torch/csrc/api/include "
             f"-isystem {sysconfig.get_path('include')} -std=c++17 -fsyntax-only -x c++ -")
    loop = f"while :; do echo '#include <torch/extension.h>' | c++ {flags} >/dev/null 2>&1; done"
    procs = [subprocess.Popen(["bash", "-c", loop], start_new_session=True) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def confirm_repeatedly(name: str, evaluator: LocalEvaluator, source: str, built, times: int) -> dict:
    rows = []
    for _ in range(times):
        start = time.monotonic()
        (kernel,) = evaluator.confirm([source]).kernels
        launched = kernel.launched
        rows.append({"verified": kernel.verified, "error": kernel.error[-300:], "median": kernel.speedup_median,
                     "ci95": kernel.ci95, "vs_compile": kernel.speedup_vs_compile_median, "runs": kernel.runs,
                     "worker_medians": kernel.worker_medians,
                     "launched": launched.speedup if launched else None,
                     "implausible": kernel.implausible, "wall_s": round(time.monotonic() - start, 2)})
    medians = [r["median"] for r in rows if r["median"] is not None]
    middle = statistics.median(medians) if medians else None
    spread = (max(medians) - min(medians)) / middle * 100 if medians and middle else None
    turn_off = (built.speedup / middle - 1) * 100 if built.speedup and middle else None
    return {"task": name, "turn_speedup": built.speedup, "turn_status": built.status.value, "rows": rows,
            "spread_pct": spread, "turn_vs_confirmed_pct": turn_off,
            "turn_launched": built.launched.speedup if built.launched else None}


def table(results: list[dict]) -> str:
    times = max((len(r["rows"]) for r in results), default=0)
    head = "| task | its turn | " + " | ".join(f"#{i + 1} median (95% interval)" for i in range(times))
    lines = [head + " | (max-min)/median | its turn vs median | with launches | one worker's spread | rounds "
             "| s each |", "|---|---:|" + "---:|" * times + "---:|---:|---:|---:|---:|---:|"]
    for res in results:
        cells = []
        for row in res["rows"]:
            if row["median"] is None:
                cells.append(f"dropped: {row['error'][:60]}")
                continue
            low, high = row["ci95"]
            cells.append(f"{row['median']:.3f}x ({low:.3f}-{high:.3f})" + (" FLAGGED" if row["implausible"] else ""))
        runs = sorted({row["runs"] for row in res["rows"]})
        wall = statistics.median(row["wall_s"] for row in res["rows"]) if res["rows"] else 0
        turn = f"{res['turn_speedup']:.3f}x" if res["turn_speedup"] else res["turn_status"]
        spread = f"{res['spread_pct']:.2f}%" if res["spread_pct"] is not None else "-"
        off = f"{res['turn_vs_confirmed_pct']:+.2f}%" if res.get("turn_vs_confirmed_pct") is not None else "-"
        launched = [row["launched"] for row in res["rows"] if row.get("launched")]
        with_launches = f"{statistics.median(launched):.3f}x" if launched else "-"
        # Inside each confirmation, how far its workers' own medians lay apart (what one worker
        # alone would have read): the median of that over the confirmations.
        inside = [(max(m) - min(m)) / statistics.median(m) * 100
                  for m in (row.get("worker_medians") or [] for row in res["rows"]) if len(m) > 1]
        workers = f"{statistics.median(inside):.2f}%" if inside else "-"
        lines.append(f"| {res['task']} | {turn} | " + " | ".join(cells) + f" | {spread} | {off} | {with_launches} | "
                     f"{workers} | {'/'.join(map(str, runs))} | {wall:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--times", type=int, default=5, help="confirmations of each kernel in a row")
    parser.add_argument("--rounds", type=int, default=None, help="at most this many head-to-head rounds")
    parser.add_argument("--tasks", default=",".join(EXAMPLES), help="comma-separated examples")
    parser.add_argument("--kernelbench", type=int, default=0, metavar="TIMES",
                        help="add the KernelBench-size tasks (cuda), each confirmed this many times")
    parser.add_argument("--busy", type=int, default=0,
                        help="also confirm the --tasks beside this many busy C++ compiles")
    parser.add_argument("--busy-only", action="store_true", help="with --busy: only beside the compiles")
    parser.add_argument("--workers", type=int, default=None,
                        help="confirmation workers whose rounds are pooled (default: the device's confirm_workers)")
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    device = args.device or detect_device()
    examples = [n for n in args.tasks.split(",") if n]
    names = examples + (list(KERNELBENCH) if args.kernelbench else [])
    # The builds side by side (the device lock keeps their timings apart), the confirmations one
    # after another.
    with ThreadPoolExecutor(len(names)) as pool:
        ready = list(pool.map(lambda n: prepared(n, device, args.rounds, args.workers), names))
    print(f"built and evaluated: {', '.join(names)}", file=sys.stderr, flush=True)
    results = []
    try:
        for busy in ([args.busy] if args.busy and args.busy_only else [0, args.busy] if args.busy else [0]):
            with busy_builds(busy):
                for name, (evaluator, source, built) in zip(names, ready):
                    if busy and name not in examples:
                        continue
                    label = name if not busy else f"{name}, {busy} builds beside"
                    times = args.kernelbench if name in KERNELBENCH else args.times
                    results.append(confirm_repeatedly(label, evaluator, source, built, times))
                    # As it comes: a call cut short still shows the tasks it finished.
                    print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        for evaluator, _, _ in ready:
            evaluator.close()
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
    print(f"{args.times} confirmations in a row of each task's kernel on {device}:\n")
    print(table(results))
    return 0 if all(r["verified"] for res in results for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
