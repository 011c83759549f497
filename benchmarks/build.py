#!/usr/bin/env python3
"""Cold build time of every example kernel: plain load_inline against kevin-opt's build.

Usage: python benchmarks/build.py [--device cpu|cuda|both] [--limit N] [--jobs N] [--json PATH]

Each kernel (the code of every response in examples/*.{device}.jsonl that calls load_inline)
is built twice in a fresh worker process and a fresh folder, one build after the other:
plainly, then the fast way (``kevin_agent.evaluate.toolchain.build``). The fast builds share one
toolchain folder, warmed first (the precompiled header and the light header are made once
per toolchain; that one-time cost is printed on its own line). Times are wall seconds of the
whole worker (Python, torch import, build, import of the extension), as the evaluator sees
them. ``--jobs N`` measures N kernels at once (each kernel's two builds still one after the
other); on a shared or small machine, compare the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.evaluate.parent.builds import build_once, warm_toolchain  # noqa: E402
from kevin_agent.evaluate.toolchain.cache import build_paths  # noqa: E402
from kevin_agent.engine.parsing import parse_response  # noqa: E402


def kernels(device: str) -> list[tuple[str, str]]:
    """(label, candidate source) for every distinct example response with a load_inline build."""
    out, seen = [], set()
    for path in sorted((REPO / "examples").glob(f"*.{device}.jsonl")):
        for turn, line in enumerate(path.read_text().splitlines(), 1):
            code = parse_response(json.loads(line)["text"]).code if line.strip() else None
            if code and "load_inline" in code and code not in seen:
                seen.add(code)
                out.append((f"{path.name.split('.')[0]} turn {turn}", code))
    return out


def describe(folder: Path) -> str:
    rows = build_paths(folder)
    if not rows:
        return "-"
    row = rows[-1]
    parts = [p for p, on in (("pch", row.get("pch")), ("light", row.get("light"))) if on]
    return f"{row['path']}" + (f" ({', '.join(parts)})" if parts else "")


def run(device: str, limit: int | None, jobs: int, root: Path) -> dict:
    todo = kernels(device)[:limit]
    warm_s, warm_ok = warm_toolchain(root / "fast", device)
    print(f"\n{device}: one-time warm-up (precompiled header, light header): {warm_s:.1f} s"
          f"{'' if warm_ok else ' (FAILED: see ' + str(root / 'fast' / 'warm' / 'warm.log') + ')'}", flush=True)
    print("| kernel | plain s | kevin-opt s | ratio | built | kevin-opt path |\n|---|---|---|---|---|---|", flush=True)
    def measure(item: tuple[int, tuple[str, str]]) -> dict:
        i, (label, source) = item
        plain = build_once(source, root / "plain" / f"k{i}", device, fast=False)
        fast = build_once(source, root / "fast" / f"k{i}", device, fast=True)
        plain_s, plain_ok, fast_s, fast_ok = plain.compile_s, plain.ok, fast.compile_s, fast.ok
        ratio = fast_s / plain_s if plain_s else float("nan")
        path = describe(root / "fast" / f"k{i}")
        built = "both" if plain_ok and fast_ok else ("neither" if not plain_ok and not fast_ok else
                                                       ("plain only" if plain_ok else "kevin-opt only"))
        print(f"| {label} | {plain_s:.1f} | {fast_s:.1f} | {ratio:.2f} | {built} | {path} |", flush=True)
        return {"kernel": label, "plain_s": round(plain_s, 2), "fast_s": round(fast_s, 2),
                "ratio": round(ratio, 3), "plain_ok": plain_ok, "fast_ok": fast_ok, "path": path}

    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(measure, enumerate(todo)))
    ok = [r for r in rows if r["plain_ok"] and r["fast_ok"]]
    summary = {"device": device, "warm_s": round(warm_s, 1), "warm_ok": warm_ok, "kernels": rows}
    if ok:
        p50_plain = statistics.median(r["plain_s"] for r in ok)
        p50_fast = statistics.median(r["fast_s"] for r in ok)
        summary.update(p50_plain_s=p50_plain, p50_fast_s=p50_fast)
        print(f"p50 over {len(ok)} kernels built both ways: plain {p50_plain:.1f} s, kevin-opt {p50_fast:.1f} s, "
              f"ratio {p50_fast / p50_plain:.2f}")
    refused = [r["kernel"] for r in rows if r["plain_ok"] and not r["fast_ok"]]
    print(f"built plainly but not by kevin-opt: {len(refused)}" + (f" ({', '.join(refused)})" if refused else ""))
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "both"], default="both")
    parser.add_argument("--limit", type=int, default=None, help="at most this many kernels per device")
    parser.add_argument("--jobs", type=int, default=1, help="kernels measured at once")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    devices = ["cpu", "cuda"] if args.device == "both" else [args.device]
    results = []
    with tempfile.TemporaryDirectory(prefix="kevin-build-bench-") as tmp:
        for device in devices:
            results.append(run(device, args.limit, args.jobs, Path(tmp) / device))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["kernels"] and not [k for k in r["kernels"] if k["plain_ok"] and not k["fast_ok"]]
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
