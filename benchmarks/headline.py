#!/usr/bin/env python3
"""What moves the headline time of a launch-bound call, measured in one process on cuda.

The eager reference of examples/rmsnorm.py (six small PyTorch kernels) and one fused kernel (the
example's delivered one) are timed by fresh ``Timer`` instances, as fresh workers time them, under
several ways of taking the time: the lead as shipped (twice the host's queueing time, doubled while
the GPU waits), fixed leads, one timer reused, and head-to-head rounds. Printed side by side: each
way's medians over the instances and their spread, (max - min) / mean. A spread that follows the
lead says the lead changes the GPU's own time (its clocks), one that follows the instance says the
timer's buffers do.

Usage: python benchmarks/headline.py [--instances N] [--runs N] [--extensions DIR] [--out FILE.json]
``--extensions``: where the kernel's build lies (a build folder of the cache; built there the fast
way if it is not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=6)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--extensions", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    import os

    from kevin_agent.evaluate.toolchain.build import building
    from kevin_agent.evaluate.worker import runs, timing
    from kevin_agent.evaluate.worker.placements import Placements
    from kevin_agent.engine.parsing import parse_response

    if not torch.cuda.is_available():
        print("no GPU: nothing to measure", file=sys.stderr)
        return 2
    spec = (REPO / "examples" / "rmsnorm.py").read_text()
    task: dict = {}
    exec(compile(spec, "rmsnorm.py", "exec"), task)  # the example task: Model, get_inputs, get_init_inputs
    torch.manual_seed(0)
    eager = task["Model"](*task["get_init_inputs"]()).cuda()
    inputs = [v.cuda() for v in task["get_inputs"]()]
    lines = [line for line in (REPO / "examples" / "rmsnorm.cuda.jsonl").read_text().splitlines() if line.strip()]
    kernel_code = parse_response(json.loads(lines[-1])["text"]).code
    module: dict = {}
    if args.extensions is not None:
        os.environ["TORCH_EXTENSIONS_DIR"] = str(args.extensions)
    with building(fast=True):
        exec(compile(kernel_code, "kernel.py", "exec"), module)
    torch.manual_seed(0)
    fused = module["ModelNew"](*task["get_init_inputs"]()).cuda()
    fused.load_state_dict(eager.state_dict(), strict=False)

    def fixed(timer, fn, ms: float) -> None:
        timer._leads[id(fn)] = timing._Lead(fn, ms, ms)

    def each(make, what) -> list[float]:
        return [what(make()) for _ in range(args.instances)]

    def time_one(fn, lead_ms=None):
        def go(timer) -> float:
            if lead_ms is not None:
                fixed(timer, fn, lead_ms)
            return timer.time(fn, inputs, warmup=10, runs=args.runs).median_ms
        return go

    new = lambda: timing.Timer("cuda")  # noqa: E731
    shared = timing.Timer("cuda")
    cases: dict[str, list[float]] = {}
    leads: list[float] = []
    for name, fn in (("eager", eager), ("fused", fused)):
        def shipped(timer, fn=fn) -> float:
            value = timer.time(fn, inputs, warmup=10, runs=args.runs).median_ms
            leads.append(timer._leads[id(fn)].ms)
            return value
        cases[f"{name}, lead as shipped"] = each(new, shipped)
        for ms in (0.05, 0.5, 2.0):
            cases[f"{name}, lead {ms} ms"] = each(new, time_one(fn, ms))
        cases[f"{name}, one timer reused, lead 0.2 ms"] = each(lambda: shared, time_one(fn, 0.2))

    def rounds(timer) -> float:
        k, r = timer.rounds([fused, eager], Placements([inputs]), warmup=10, rounds=args.runs)
        return runs.speedup_of(r, k)
    speedups = each(new, rounds)

    def back_to_back(timer) -> float:
        k = timer.runs(fused, inputs, warmup=10, runs=args.runs)
        r = timer.runs(eager, inputs, warmup=10, runs=args.runs)
        return statistics.median(r.stream_ms) / statistics.median(k.stream_ms)
    separate = each(new, back_to_back)

    def spread(values: list[float]) -> float:
        return (max(values) - min(values)) / (sum(values) / len(values)) * 100

    out = ["| way | medians (us) | spread |", "|---|---|---:|"]
    for name, values in cases.items():
        out.append(f"| {name} | {', '.join(f'{v * 1000:.2f}' for v in values)} | {spread(values):.2f}% |")
    out += ["", f"leads as shipped (ms): {', '.join(f'{v:.3f}' for v in leads)}", "",
            "| speedup of the fused kernel | values | spread |", "|---|---|---:|",
            f"| rounds, median of ratios | {', '.join(f'{v:.3f}' for v in speedups)} | {spread(speedups):.2f}% |",
            f"| back to back, ratio of medians | {', '.join(f'{v:.3f}' for v in separate)} | {spread(separate):.2f}% |"]
    print("\n".join(out))
    if args.out is not None:
        args.out.write_text(json.dumps({"cases": cases, "leads": leads, "rounds": speedups,
                                        "back_to_back": separate}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
