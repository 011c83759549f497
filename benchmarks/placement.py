#!/usr/bin/env python3
"""Where the memory lies, and what it does to a microsecond speedup.

A confirmation's rounds have narrow intervals, yet five confirmations of one kernel in five
workers have read medians 6% apart (docs/gpu-runs.md, run 18): something fixed for the life of
a worker moves the ratio. This benchmark tests the one suspect the rounds cannot see, placement:
where the module's parameters, its inputs, its temporaries and the timer's flush buffer happen to
lie in the GPU's memory.

Each of ``--processes`` fresh processes builds ``--pools`` placements of the task, each in a memory
pool of its own (``torch.cuda.MemPool``: its own segments, so its own addresses for everything the
calls allocate, temporaries included), each with a copy of the module, of the inputs, a timer and
``torch.compile`` of the module (the stand-in for a fused kernel). Rounds then time, in every
placement, the eager module and the compiled one with ``Timer.one`` (the headline's method), and
the ratio eager / compiled per round.

Printed side by side from the one run: per process, the median ratio in each placement and over
all placements together; then the spread over processes, (max - min) / median, of placement 0's
ratio (what a worker with one placement reads) against the pooled ratio (what a worker going
round ``--pools`` placements would read), and the mean spread across placements inside one
process. A within-process spread as large as the between-process one says placement is what
moves the number, and going round placements inside one worker is what steadies it.

Usage (repository root, cuda only):
  python benchmarks/placement.py [--tasks examples/rmsnorm.py,...] [--processes 5] [--pools 4]
                                 [--rounds 200] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def spread(values: list[float]) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values)


def child(task: str, pools: int, rounds: int) -> dict:
    import importlib.util

    import torch

    from kevin_agent.evaluate.worker.timing import Timer

    spec = importlib.util.spec_from_file_location("placement_task", task)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    init = module.get_init_inputs() if hasattr(module, "get_init_inputs") else []
    host_model = module.Model(*init)
    host_inputs = module.get_inputs()
    places = []
    for _ in range(pools):
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            model = module.Model(*init).cuda()
            model.load_state_dict(host_model.state_dict())
            args = [x.cuda() if isinstance(x, torch.Tensor) else x for x in host_inputs]
            timer = Timer("cuda")
        compiled = torch.compile(model)
        places.append({"pool": pool, "model": model, "compiled": compiled, "args": args, "timer": timer,
                       "eager": [], "fused": [], "ratio": []})
    clocks = []
    with torch.no_grad():
        for place in places:
            with torch.cuda.use_mem_pool(place["pool"]):
                for _ in range(10):
                    place["model"](*place["args"])
                    place["compiled"](*place["args"])
        torch.cuda.synchronize()
        for r in range(rounds):
            for place in places:
                with torch.cuda.use_mem_pool(place["pool"]):
                    eager = place["timer"].one(place["model"], place["args"]).stream_ms
                    fused = place["timer"].one(place["compiled"], place["args"]).stream_ms
                place["eager"].append(eager)
                place["fused"].append(fused)
                place["ratio"].append(eager / max(fused, 1e-9))
            if r % 50 == 0:
                with contextlib.suppress(ImportError, RuntimeError):  # no pynvml: no clock column
                    clocks.append(torch.cuda.clock_rate())
    med = statistics.median
    return {
        "placements": [{"ratio": med(p["ratio"]), "eager_ms": med(p["eager"]), "fused_ms": med(p["fused"])}
                       for p in places],
        "pooled": med([x for p in places for x in p["ratio"]]),
        "clock_mhz": med(clocks) if clocks else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="examples/rmsnorm.py,examples/softmax.py,examples/bias_gelu.py")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--pools", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.pools, a.rounds)))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("placement.py measures where a GPU's memory lies: it needs a CUDA GPU (this machine has none)",
              file=sys.stderr)
        return 2
    results = {}
    for task in a.tasks.split(","):
        name = Path(task).stem
        rows = []
        for i in range(a.processes):
            started = time.monotonic()
            proc = subprocess.run([sys.executable, __file__, "--child", task, "--pools", str(a.pools),
                                   "--rounds", str(a.rounds)], check=False, capture_output=True, text=True, env=os.environ)
            if proc.returncode != 0:
                print(f"{name} process {i + 1}: exit {proc.returncode}\n{proc.stderr[-2000:]}", flush=True)
                return 1
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["wall_s"] = round(time.monotonic() - started, 1)
            rows.append(row)
            cells = " | ".join(f"{p['ratio']:.3f}" for p in row["placements"])
            print(f"| {name} | {i + 1} | {cells} | {row['pooled']:.3f} | {row['placements'][0]['eager_ms'] * 1e3:.1f} "
                  f"| {row['placements'][0]['fused_ms'] * 1e3:.1f} | {row['clock_mhz']} | {row['wall_s']} |", flush=True)
        single = spread([r["placements"][0]["ratio"] for r in rows])
        pooled = spread([r["pooled"] for r in rows])
        inside = statistics.mean(spread([p["ratio"] for p in r["placements"]]) for r in rows)
        results[name] = {"rows": rows, "spread_one_placement_pct": single, "spread_pooled_pct": pooled,
                         "spread_inside_process_pct": inside}
        print(f"{name}: over processes, one placement {single:.2f}%, {a.pools} placements pooled {pooled:.2f}%; "
              f"across placements inside a process {inside:.2f}% (mean)", flush=True)
        if a.out:
            a.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
