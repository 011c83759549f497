#!/usr/bin/env python3
"""From a whole model to a kernel in it, as a person would run it: a LLaMA-style block
(benchmarks/tasks/llama_block.py, random weights from a config) profiled, its SwiGLU gate
(``mlp.act``) extracted as a task, a hand-written fused kernel for it run through a scripted
one-turn run (verified at every recorded signature, confirmed, delivered and committed after the
whole model was run with it), installed, and the whole block timed with and without it next to
Amdahl's prediction from the profile.

Printed side by side: each step's exit code and wall time; the module's rank, share and headroom
in the profile; the kernel's confirmed speedup; the whole model's speedup as the run's own check
and as ``kevin-opt e2e`` measured it, and Amdahl's prediction, with their ratio (target: within
20%).

Usage (repository root):
  python benchmarks/model_e2e.py [--device cuda|cpu] [--hidden N] [--seq N] [--dtype bfloat16|float32]
                                 [--rounds N] [--out FILE.json] [--work DIR]
On the GPU the defaults are the issue's size: hidden 4096, sequence 2048, bf16. On the CPU they are
hidden 256, sequence 256, float32, so the same path runs to completion in a few minutes. Progress is
written to ``--out`` after every step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "benchmarks" / "tasks"
MODULE = "mlp.act"


def kevin(*args: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "kevin_agent.cli", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc = subprocess.CompletedProcess(exc.cmd, 124, exc.stdout or "", (exc.stderr or "") + "\n[timed out]")
    return proc, round(time.monotonic() - start, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--rounds", type=int, default=2, help="e2e rounds of fresh workers")
    parser.add_argument("--confirm-rounds", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=420, help="seconds per step")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None, help="the scratch repository (default: a temporary folder)")
    args = parser.parse_args()
    gpu = args.device == "cuda"
    size = {"LLAMA_BLOCK_HIDDEN": str(args.hidden or (4096 if gpu else 256)),
            "LLAMA_BLOCK_SEQ": str(args.seq or (2048 if gpu else 256)),
            "LLAMA_BLOCK_DTYPE": args.dtype or ("bfloat16" if gpu else "float32")}
    env = {**os.environ, **size, "CI": "true"}
    repo = args.work or Path(tempfile.mkdtemp(prefix="kevin-model-e2e-"))
    repo.mkdir(parents=True, exist_ok=True)
    shutil.copy(TASKS / "llama_block.py", repo / "llama_block.py")
    kernel = (TASKS / f"llama_block_act_{'cuda' if gpu else 'cpu'}.py").read_text()
    (repo / "responses.jsonl").write_text(json.dumps({
        "reasoning": "hand-written for the benchmark: one fused pass over gate and up",
        "text": f"```python\n{kernel}```\nOne kernel computes silu(gate) * up in a single pass."}) + "\n")
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "config", "user.name", "Model E2E"],
                ["git", "config", "user.email", "model-e2e@example.com"], ["git", "add", "."],
                ["git", "commit", "-q", "-m", "my model"]):
        subprocess.run(cmd, cwd=repo, check=True, capture_output=True)
    result: dict = {"device": args.device, "size": size, "repo": str(repo), "steps": []}

    def save() -> None:
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")

    def step(name: str, *cli: str) -> subprocess.CompletedProcess:
        proc, wall = kevin(*cli, cwd=repo, env=env, timeout=args.timeout)
        result["steps"].append({"step": name, "exit": proc.returncode, "wall_s": wall,
                                "stderr_tail": proc.stderr[-1200:] if proc.returncode else ""})
        save()
        print(f"{name}: exit {proc.returncode} in {wall} s", file=sys.stderr, flush=True)
        return proc

    device = ["--device", args.device]
    if step("profile", "profile", "llama_block.py", *device, "--json", "profile.json").returncode != 0:
        return report(result)
    profile = json.loads((repo / "profile.json").read_text())
    modules = {m["path"]: m for m in profile["modules"]}
    act = modules.get(MODULE, {})
    result["profile"] = {"forward_ms": profile["forward_ms"], "ranked": [m["path"] for m in profile["modules"] if m["rank"]],
                         "act_rank": act.get("rank"), "act_share": act.get("share"), "act_headroom": act.get("headroom")}
    save()
    if step("extract", "extract", "llama_block.py", "--module", MODULE, *device, "-o", "block_act.py").returncode != 0:
        return report(result)
    run = step("run", "block_act.py", *device, "--backend", "scripted", "--responses", "responses.jsonl", "--turns", "1",
               "--min-speedup", "0", "--headless", "--confirm-rounds", str(args.confirm_rounds), "--json", "run.json")
    if not (repo / "run.json").is_file():
        return report(result)
    summary = json.loads((repo / "run.json").read_text())
    best = summary.get("best") or {}
    result["run"] = {"exit": run.returncode, "status": [t["status"] for t in summary["turns"]],
                     "speedup": best.get("speedup"), "turn_speedup": best.get("run_speedup"),
                     "weighted_speedup": best.get("weighted_speedup"), "commit": summary.get("commit"),
                     "e2e": summary.get("e2e")}
    save()
    if not (repo / "block_act_kevin.py").is_file():
        return report(result)
    step("install", "install", "llama_block.py", "--kernel", "block_act_kevin.py")
    step("e2e", "e2e", "llama_block.py", "--kernel", "block_act_kevin.py", *device, "--profile", "profile.json",
         "--rounds", str(args.rounds), "--json", "e2e.json")
    if (repo / "e2e.json").is_file():
        result["e2e"] = json.loads((repo / "e2e.json").read_text())
    save()
    return report(result)


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def _x(v) -> str:
    return "-" if v is None else f"{v:.3f}x"


def report(result: dict) -> int:
    print(f"{'step':<10} {'exit':>4} {'wall s':>8}")
    for s in result["steps"]:
        print(f"{s['step']:<10} {s['exit']:>4} {s['wall_s']:>8}")
        if s["exit"] and s["stderr_tail"]:
            print("  " + s["stderr_tail"].strip().splitlines()[-1][:200])
    prof, run, e2e = result.get("profile"), result.get("run"), result.get("e2e")
    if prof:
        print(f"\nprofile: {prof['forward_ms']:.3g} ms per forward; ranked {', '.join(prof['ranked'][:4])}; "
              f"{MODULE}: rank {prof['act_rank']}, share {_pct(prof['act_share'])}, headroom {_pct(prof['act_headroom'])}")
    if run:
        print(f"run: {', '.join(run['status'])}; kernel {_x(run['speedup'])} confirmed (its turn {_x(run['turn_speedup'])}, "
              f"weighted over signatures {_x(run['weighted_speedup'])}); commit {(run['commit'] or '-')[:12]}")
        if run.get("e2e"):
            print(f"run's whole-model check: {run['e2e']['speedup']:.3f}x, outputs match {run['e2e']['outputs_match']}")
    if e2e:
        ratio = e2e["speedup"] / e2e["predicted"] if e2e.get("predicted") else None
        print(f"e2e: {e2e['speedup']:.3f}x (workers apart {e2e['workers_speedup']:.3f}x); Amdahl predicts "
              f"{_x(e2e['predicted'])}; measured / predicted {ratio:.3f}" if ratio else f"e2e: {e2e['speedup']:.3f}x")
    ok = bool(e2e) and all(s["exit"] == 0 for s in result["steps"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
