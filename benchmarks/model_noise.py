#!/usr/bin/env python3
"""How much a whole model's measured speedup moves when nothing changed: the noise floor under
``choose``'s ``min_saving`` (a kernel that could save less than it buys a change that its own
measurement cannot tell from noise).

An A/A test of ``kevin-opt e2e``: a group of the model (default ``examples/layer_stack.py``'s
``layers.*.act x3``) is extracted, and a "kernel" that computes it with the module's own PyTorch
code is delivered for it (the real install footer and guard, nothing compiled). ``e2e`` then
measures the whole model with it and without it ``--times`` times, each in fresh workers: every
speedup it reports is noise (plus the guard's own cost). Printed side by side: each measurement's
interleaved speedup and its two-workers-apart speedup, then their spread.

Usage (repository root):
  python benchmarks/model_noise.py [--model examples/layer_stack.py] [--module layers.0.act]
                                   [--times 8] [--rounds 2] [--device cpu] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.delivery.kernel_module import CLAIM_PREFIX, KernelClaim  # noqa: E402
from kevin_agent.model.delivered import envelope, installable  # noqa: E402
from kevin_agent.model.marks import extracted_from  # noqa: E402


def kevin(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kevin_agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def same_code(task_source: str) -> str:
    """The task's own Model, renamed ModelNew: the module's computation, unchanged."""
    body = task_source.split('"""', 2)[2]
    body = body[:body.index("def get_init_inputs")]
    return body.replace("class Model(", "class ModelNew(").strip("\n") + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "examples" / "layer_stack.py")
    parser.add_argument("--module", default="layers.0.act")
    parser.add_argument("--times", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kevin-noise-"))
    shutil.copy(args.model, work / args.model.name)
    proc = kevin("extract", args.model.name, "--module", args.module, "-o", "task.py", "--device", args.device,
                 cwd=work)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        return 1
    meta = extracted_from((work / "task.py").read_text())
    code = same_code((work / "task.py").read_text())
    env = envelope(meta, device=args.device, seed=0, verified=[s.key for s in meta.signatures], code=code)
    claim = KernelClaim(speedup=1.0, device=args.device, device_name=args.device).model_dump_json()
    (work / "same_kevin.py").write_text(f'"""The module\'s own code."""\n{CLAIM_PREFIX}{claim}\n\n'
                                        f"{installable(env, code, 'same_kevin')}")
    rows = []
    print(f"{args.model.name}: `{' '.join(meta.paths)}` replaced by its own code; e2e --rounds {args.rounds}, "
          f"{args.times} times\n")
    print("| # | speedup (interleaved) | speedup (workers apart) | ms without | ms with |")
    print("|---|---|---|---|---|")
    for i in range(args.times):
        proc = kevin("e2e", args.model.name, "--kernel", "same_kevin.py", "--rounds", str(args.rounds), "--device",
                     args.device, "--accept-slower", "--json", "e2e.json", cwd=work)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr)
            return 1
        r = json.loads((work / "e2e.json").read_text())
        rows.append(r)
        print(f"| {i + 1} | {r['speedup']:.3f}x | {r['workers_speedup']:.3f}x | {r['baseline_ms']:.3g} | "
              f"{r['kernel_ms']:.3g} |", flush=True)
    inter = [r["speedup"] for r in rows]
    apart = [r["workers_speedup"] for r in rows]

    def spread(values: list[float]) -> str:
        off = sorted(abs(v - 1.0) for v in values)
        return (f"median {statistics.median(values):.3f}x, range {min(values):.3f}-{max(values):.3f}x, "
                f"median |x - 1| {100 * statistics.median(off):.1f}%, largest {100 * off[-1]:.1f}%")

    print(f"\ninterleaved:   {spread(inter)}")
    print(f"workers apart: {spread(apart)}")
    if args.out:
        args.out.write_text(json.dumps({"model": str(args.model), "module": args.module, "rows": rows,
                                        "interleaved": inter, "apart": apart}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
