#!/usr/bin/env python3
"""Where the memory lies, and what it does to a microsecond speedup.

A confirmation's rounds have narrow intervals, yet five confirmations of one kernel in five
workers have read medians 2-4% apart after the rounds went round 16 placements of the inputs
(docs/gpu-runs.md, runs 20, 27 and 28): something fixed for the life of a worker still moves the
ratio. This benchmark tells the suspects apart, in fresh processes timing each example's delivered
kernel against its eager reference with the headline's method (``Timer.one``):

  inputs   the rounds go round ``--pools`` placements of the inputs and of what the calls
           allocate (``torch.cuda.MemPool``s), the models' parameters staying where they were
           made: what a confirmation and a turn do today
  params   the same placements, each also holding its own copy of both models' parameters and
           buffers, swapped in for the round
  flush    as params, and the timer's flush buffer at one of eight places too

The three are interleaved round by round in every process, on the same placements of the inputs,
so that they differ only in what they move. Each process writes every round's raw times, and the
parent prints side by side, per condition and for the first 1, 4, 16 and all placements: the
spread over processes ((max - min) / median, and the standard deviation in %) of the median of the
round ratios; beside them other estimators over the same rounds (the ratio of the medians, the
mean over placements of each placement's median ratio), and how finely the event timer reads.

A condition whose spread falls as placements are added moves what matters; one that stays put
leaves something fixed for the worker's life.

Usage (repository root, cuda only):
  python benchmarks/placement.py [--tasks rmsnorm,softmax] [--processes 6] [--pools 64] [--turns 8]
                                 [--cache DIR] [--out FILE.json] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONDITIONS = ("inputs", "params", "flush")
FLUSH_PLACES = 8
SUBSETS = (1, 4, 16)


def spread(values: list[float]) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values)


def sd_pct(values: list[float]) -> float:
    return 100.0 * statistics.pstdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def _state(model) -> list:
    return [t for _, t in list(model.named_parameters()) + list(model.named_buffers())]


def _swap(tensors: list, copies: list) -> None:
    for t, c in zip(tensors, copies):
        t.data = c


def _pool(device: str):
    import torch

    return torch.cuda.MemPool() if device == "cuda" else None


def _using(pool):
    import contextlib

    import torch

    return torch.cuda.use_mem_pool(pool) if pool is not None else contextlib.nullcontext()


def child(task_path: str, kernel_path: str, build_dir: str, pools: int, turns: int, seed: int,
          device: str = "cuda") -> dict:
    """One fresh process: every round at placement r mod ``pools``, the three conditions in turn
    (on cpu, where there are no memory pools, plain copies: the script's dry run)."""
    import torch

    from kevin_agent.evaluate.worker.taskcode import import_file
    from kevin_agent.evaluate.worker.timing import Timer

    os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
    task = import_file(Path(task_path), "placement_task")
    kernel = import_file(Path(kernel_path), "placement_kernel")
    torch.manual_seed(seed)
    init = task.get_init_inputs() if hasattr(task, "get_init_inputs") else []
    ref = task.Model(*init).to(device)
    torch.manual_seed(seed)
    new = kernel.ModelNew(*init).to(device)
    new.load_state_dict(ref.state_dict(), strict=False)
    torch.manual_seed(seed + 1)
    host_inputs = task.get_inputs()
    timers = [Timer(device) for _ in range(FLUSH_PLACES)]
    ref_state, new_state = _state(ref), _state(new)
    home = ([t.data for t in ref_state], [t.data for t in new_state])
    places = []
    for _ in range(pools):
        pool = _pool(device)
        with _using(pool):
            args = [x.to(device) if isinstance(x, torch.Tensor) else x for x in host_inputs]
            copies = ([t.detach().clone() for t in ref_state], [t.detach().clone() for t in new_state])
        places.append((pool, args, copies))
    raw = {c: {"kernel": [], "reference": []} for c in CONDITIONS}
    with torch.no_grad():
        pool, args, _ = places[0]
        with _using(pool):
            for _ in range(10):
                new(*args)
                ref(*args)
        timers[0].sync()
        for r in range(pools * turns):
            pool, args, copies = places[r % pools]
            for cond in CONDITIONS:
                moved = cond != "inputs"
                if moved:
                    _swap(ref_state, copies[0])
                    _swap(new_state, copies[1])
                timer = timers[r % FLUSH_PLACES] if cond == "flush" else timers[0]
                with _using(pool):
                    raw[cond]["kernel"].append(timer.one(new, args).stream_ms)
                    raw[cond]["reference"].append(timer.one(ref, args).stream_ms)
                if moved:
                    _swap(ref_state, home[0])
                    _swap(new_state, home[1])
    return {"pools": pools, "raw": raw, "clock_mhz": _clock(device)}


def _clock(device: str):
    import torch

    if device != "cuda":
        return None
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no pynvml: no clock column
        return None


def estimators(kernel: list[float], reference: list[float], pools: int, subset: int) -> dict[str, float]:
    """The speedup over the rounds at placements ``< subset``, three ways."""
    keep = [i for i in range(len(kernel)) if i % pools < subset]
    k = [kernel[i] for i in keep]
    r = [reference[i] for i in keep]
    ratios = [a / max(b, 1e-9) for a, b in zip(r, k)]
    by_place: dict[int, list[float]] = {}
    for i, ratio in zip(keep, ratios):
        by_place.setdefault(i % pools, []).append(ratio)
    return {"median of ratios": statistics.median(ratios),
            "ratio of medians": statistics.median(r) / statistics.median(k),
            "mean of placement medians": statistics.fmean(statistics.median(v) for v in by_place.values()),
            "kernel us": statistics.median(k) * 1e3, "reference us": statistics.median(r) * 1e3}


def resolution_us(values: list[float]) -> float:
    """The smallest step between distinct readings (the event timer's granularity, in us)."""
    distinct = sorted(set(round(v * 1e6) for v in values))  # in ns
    steps = [b - a for a, b in zip(distinct, distinct[1:]) if b > a]
    return min(steps) / 1e3 if steps else 0.0


def analyse(name: str, rows: list[dict]) -> tuple[dict, list[str]]:
    pools = rows[0]["pools"]
    subsets = [s for s in SUBSETS if s < pools] + [pools]
    summary: dict = {"resolution_us": resolution_us(rows[0]["raw"]["inputs"]["kernel"])}
    lines = []
    for cond in CONDITIONS:
        for subset in subsets:
            per = [estimators(row["raw"][cond]["kernel"], row["raw"][cond]["reference"], pools, subset) for row in rows]
            cells = {}
            for key in per[0]:
                values = [p[key] for p in per]
                cells[key] = {"values": values, "spread_pct": spread(values), "sd_pct": sd_pct(values)}
            summary[f"{cond}/{subset}"] = cells
            m = cells["median of ratios"]
            lines.append(f"| {name} | {cond} | {subset} | {', '.join(f'{v:.3f}' for v in m['values'])} | "
                         f"{m['spread_pct']:.2f}% | {m['sd_pct']:.2f}% | "
                         f"{cells['ratio of medians']['spread_pct']:.2f}% | "
                         f"{cells['mean of placement medians']['spread_pct']:.2f}% | "
                         f"{cells['kernel us']['spread_pct']:.2f}% | {cells['reference us']['spread_pct']:.2f}% |")
    return summary, lines


HEAD = ["| task | condition | placements | median of ratios, per process | spread | sd | spread, ratio of medians "
        "| spread, mean of placement medians | spread, kernel us | spread, reference us |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]


def build(name: str, cache: Path, device: str) -> tuple[Path, Path, Path]:
    """(task, kernel file, its build folder): the example's delivered kernel built the fast way."""
    from kevin_agent.engine.parsing import parse_response
    from kevin_agent.evaluate.parent.builds import build_once

    lines = [ln for ln in (REPO / "examples" / f"{name}.{device}.jsonl").read_text().splitlines() if ln.strip()]
    source = parse_response(json.loads(lines[-1])["text"]).code
    folder = cache / f"placement-{name}"
    result = build_once(source, folder, device)
    if not result.ok:
        raise RuntimeError(f"{name}: the kernel did not build:\n{result.error[-2000:]}")
    return REPO / "examples" / f"{name}.py", result.candidate, folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="rmsnorm,softmax", help="examples, comma-separated")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run of the script (no memory pools; the numbers mean nothing)")
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--pools", type=int, default=64)
    ap.add_argument("--turns", type=int, default=8, help="rounds at each placement")
    ap.add_argument("--cache", type=Path, default=None,
                    help="build folder root (default: KEVIN_CACHE_DIR or a temp dir)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child, a.pools, a.turns, a.seed, a.device)))
        return 0
    from kevin_agent.evaluate import detect_device

    if a.device == "cuda" and detect_device() != "cuda":
        print("placement.py measures where a GPU's memory lies: it needs a CUDA GPU (this machine has none)",
              file=sys.stderr)
        return 2
    cache = a.cache or Path(os.environ.get("KEVIN_CACHE_DIR") or tempfile.mkdtemp(prefix="kevin-placement-"))
    names = [n for n in a.tasks.split(",") if n]
    with ThreadPoolExecutor(len(names)) as pool:
        built = list(pool.map(lambda n: build(n, cache, a.device), names))
    print(f"built: {', '.join(names)}", file=sys.stderr, flush=True)
    results: dict = {}
    lines = list(HEAD)
    for name, (task, kernel, folder) in zip(names, built):
        rows = []
        for i in range(a.processes):
            started = time.monotonic()
            proc = subprocess.run([sys.executable, __file__, "--child", str(task), str(kernel), str(folder),
                                   "--pools", str(a.pools), "--turns", str(a.turns), "--seed", str(1000 * i),
                                   "--device", a.device],
                                  check=False, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name} process {i + 1}: exit {proc.returncode}\n{proc.stderr[-2000:]}", flush=True)
                return 1
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["wall_s"] = round(time.monotonic() - started, 1)
            rows.append(row)
            print(f"{name} process {i + 1}: {row['wall_s']} s, clock {row['clock_mhz']} MHz", file=sys.stderr,
                  flush=True)
        summary, table = analyse(name, rows)
        results[name] = {"rows": rows, "summary": summary}
        lines += table
        print("\n".join(table) + f"\n{name}: the event timer reads in steps of {summary['resolution_us']:.3f} us",
              file=sys.stderr, flush=True)
        if a.out:
            a.out.write_text(json.dumps(results))
    print("\n".join(lines))
    for name in results:
        print(f"{name}: the event timer reads in steps of {results[name]['summary']['resolution_us']:.3f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
