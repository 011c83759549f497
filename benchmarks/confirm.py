#!/usr/bin/env python3
"""How stable a confirmation is: the same kernel confirmed several times in a row on each example.

For every example task (the last response of examples/<name>.<device>.jsonl, the kernel the
scripted run delivers) one evaluator confirms that kernel ``--times`` times in a row, each time
on fresh seeds in a fresh worker, exactly as a run confirms its best kernels when it ends
(``LocalEvaluator.confirm``). Printed side by side: each confirmation's median speedup over eager
with its 95% interval, and the spread of the medians, (max - min) / median of the medians.

Target: on cuda, the spread of the medians within a few percent on every example; a spread far
wider than the intervals says the rounds do not see what varies between workers.

Usage (repository root):
  python benchmarks/confirm.py [--device cuda|cpu] [--times N] [--rounds N] [--tasks a,b] [--out FILE.json]
``--rounds`` caps the head-to-head rounds (default: the device's ``confirm_rounds``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.config import RunConfig  # noqa: E402
from kevin_agent.evaluate import LocalEvaluator, detect_device  # noqa: E402
from kevin_agent.parsing import parse_response  # noqa: E402
from kevin_agent.task import load_task  # noqa: E402

EXAMPLES = ["rmsnorm", "bias_gelu", "softmax"]


def delivered_kernel(name: str, device: str) -> str:
    """The last scripted response's kernel: the one the example's run ends with."""
    lines = [line for line in (REPO / "examples" / f"{name}.{device}.jsonl").read_text().splitlines() if line.strip()]
    return parse_response(json.loads(lines[-1])["text"]).code


def prepared(name: str, device: str, rounds: int | None) -> tuple[LocalEvaluator, str, object]:
    """An evaluator of the example with its kernel built and evaluated once (as its run did)."""
    config = RunConfig(device=device, **({"confirm_rounds": rounds} if rounds else {}))
    evaluator = LocalEvaluator(load_task(REPO / "examples" / f"{name}.py"), config.eval_settings(device))
    evaluator.probe()
    source = delivered_kernel(name, device)
    (built,) = evaluator.evaluate([source])
    return evaluator, source, built


def confirm_repeatedly(name: str, evaluator: LocalEvaluator, source: str, built, times: int) -> dict:
    rows = []
    for _ in range(times):
        start = time.monotonic()
        (kernel,) = evaluator.confirm([source]).kernels
        rows.append({"verified": kernel.verified, "error": kernel.error[-300:], "median": kernel.speedup_median,
                     "ci95": kernel.ci95, "vs_compile": kernel.speedup_vs_compile_median, "runs": kernel.runs,
                     "implausible": kernel.implausible, "wall_s": round(time.monotonic() - start, 2)})
    medians = [r["median"] for r in rows if r["median"] is not None]
    middle = statistics.median(medians) if medians else None
    spread = (max(medians) - min(medians)) / middle * 100 if medians and middle else None
    return {"task": name, "turn_speedup": built.speedup, "turn_status": built.status.value, "rows": rows,
            "spread_pct": spread}


def table(results: list[dict]) -> str:
    times = max((len(r["rows"]) for r in results), default=0)
    head = "| task | its turn | " + " | ".join(f"#{i + 1} median (95% interval)" for i in range(times))
    lines = [head + " | (max-min)/median | rounds | s each |",
             "|---|---:|" + "---:|" * times + "---:|---:|---:|"]
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
        lines.append(f"| {res['task']} | {turn} | " + " | ".join(cells) + f" | {spread} | "
                     f"{'/'.join(map(str, runs))} | {wall:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--times", type=int, default=5, help="confirmations of each kernel in a row")
    parser.add_argument("--rounds", type=int, default=None, help="at most this many head-to-head rounds")
    parser.add_argument("--tasks", default=",".join(EXAMPLES), help="comma-separated examples")
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    device = args.device or detect_device()
    names = [n for n in args.tasks.split(",") if n]
    # The builds side by side (the device lock keeps their timings apart), the confirmations one
    # after another.
    with ThreadPoolExecutor(len(names)) as pool:
        ready = list(pool.map(lambda n: prepared(n, device, args.rounds), names))
    print(f"built and evaluated: {', '.join(names)}", file=sys.stderr, flush=True)
    results = []
    try:
        for name, (evaluator, source, built) in zip(names, ready):
            results.append(confirm_repeatedly(name, evaluator, source, built, args.times))
            # As it comes: a call cut short still shows the tasks it finished.
            print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        for evaluator, _, _ in ready:
            evaluator.close()
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
    print(f"{args.times} confirmations in a row of each example's delivered kernel on {device}:\n")
    print(table(results))
    return 0 if all(r["verified"] for res in results for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
