#!/usr/bin/env python3
"""A bench of the examples' tasks, local, beside each task run alone: the wall time of each task in
the bench and its evaluation device time (``StageTimes.device`` over its candidates), next to the same
task as a single ``kevin-opt run``.

It assembles ``--out``/tasks (examples/<name>.py) and ``--out``/responses (<name>.jsonl: on cuda the
examples' two CUDA responses, a plain fused kernel then a vectorized one; on cpu a response without
a usable answer, then the examples' last, cached kernel), runs ``kevin-opt bench`` on them (one
backend for all, tasks in turn), then each task alone with the same settings. The bench's own
progress lines go to ``--out``/progress.log as they come; the rows to rows.jsonl; at the end
bench.md and bench.json there.

Reading it: the bench's per-task evaluation device time should match the single run's (the same
candidates, timed the same way); its wall time per task should be the single run's less the start of
a process and a backend (Kevin's 77-132 s engine start on the vllm backend, once per bench instead of
once per task). The two sides start from the same caches: by default each from an empty build and
reference cache of its own (``--out``/cache-bench, ``--out``/cache-alone: every build, every task's
reference data and, on cuda, torch.compile's baseline and the precompiled headers made once on each
side), so that neither finds what the other made. An earlier version ran the singles after the bench
on one cache: the singles found every build and reference the bench had made, and a bench task read
twice as long as its single. ``--caches shared`` runs both on $KEVIN_CACHE_DIR as it is (warm after a
first pass). Each row gives the build time summed over the task's candidates beside its wall.

Usage (repository root):
  python benchmarks/bench.py --out DIR [--device cuda|cpu] [--tasks rmsnorm,bias_gelu,softmax] [--no-singles]
                             [--caches fresh|shared]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.store import read_records  # noqa: E402

TASKS = ("rmsnorm", "bias_gelu", "softmax")


def say(out: Path, text: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {text}"
    print(line, file=sys.stderr, flush=True)
    with open(out / "progress.log", "a", encoding="utf-8") as log:
        log.write(line + "\n")


def assemble(out: Path, names: list[str], device: str) -> int:
    """The task folder and the script folder; the number of turns the scripts hold."""
    tasks, scripts = out / "tasks", out / "responses"
    tasks.mkdir(parents=True, exist_ok=True)
    scripts.mkdir(exist_ok=True)
    for name in names:
        (tasks / f"{name}.py").write_text((REPO / "examples" / f"{name}.py").read_text())
        lines = (REPO / "examples" / f"{name}.{device}.jsonl").read_text().splitlines()
        chosen = lines[:2] if device == "cuda" else [lines[0], lines[-1]]
        (scripts / f"{name}.jsonl").write_text("\n".join(chosen) + "\n")
    subprocess.run(["git", "init", "-q", str(out)], check=True)
    return 2


def settings(device: str, out: Path, turns: int) -> list[str]:
    quick = [] if device == "cuda" else ["--timed-runs", "5", "--correctness-trials", "2", "--confirm-rounds", "5",
                                         "--confirm-top", "1"]
    return ["--device", device, "--backend", "scripted", "--responses", str(out / "responses"), "--turns", str(turns),
            "--headless", *quick]


def run(cmd: list[str], out: Path, label: str, cache: Path | None) -> tuple[int, float]:
    """A kevin-opt command with its stderr appended to progress.log as it comes; (exit code, wall s).
    ``cache``: its build and reference cache (None: $KEVIN_CACHE_DIR as it is)."""
    say(out, f"{label}: {' '.join(cmd)}" + (f" (cache {cache})" if cache else ""))
    env = dict(os.environ, PYTHONUNBUFFERED="1", CI="true")
    if cache is not None:
        env["KEVIN_CACHE_DIR"] = str(cache)
    started = time.monotonic()
    with open(out / "progress.log", "a", encoding="utf-8") as log:
        proc = subprocess.run([sys.executable, "-m", "kevin_agent.cli", *cmd], cwd=out, env=env, stdout=subprocess.PIPE,
                              stderr=log, text=True)
    wall = time.monotonic() - started
    (out / f"{label}.stdout").write_text(proc.stdout)
    say(out, f"{label}: exit {proc.returncode} after {wall:.1f} s")
    return proc.returncode, wall


def device_seconds(run_dir: Path) -> float:
    return sum(r.eval.stage_s.device for r in read_records(run_dir) if r.eval is not None and r.eval.stage_s)


def compile_seconds(run_dir: Path) -> float:
    """The builds' time summed over the run's candidates (a cached build takes next to none)."""
    return sum(r.eval.stage_s.compile for r in read_records(run_dir) if r.eval is not None and r.eval.stage_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--no-singles", dest="singles", action="store_false")
    parser.add_argument("--caches", default="fresh", choices=["fresh", "shared"],
                        help="fresh: each side from an empty cache of its own (default); shared: $KEVIN_CACHE_DIR")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "progress.log").write_text("")
    (out / "rows.jsonl").write_text("")
    names = [n for n in args.tasks.split(",") if n]
    turns = assemble(out, names, args.device)
    flags = settings(args.device, out, turns)
    fresh = args.caches == "fresh"
    code, bench_wall = run(["bench", "tasks", *flags, "--bench-dir", str(out / "benches")], out, "bench",
                           out / "cache-bench" if fresh else None)
    if code != 0:
        return code
    (bench_dir,) = (out / "benches").iterdir()
    table = json.loads((bench_dir / "table.json").read_text())
    rows = []
    for row in table["rows"]:
        name = row["task_id"].split("/")[-1]
        entry = {"task": name, "bench_wall_s": row["wall_s"], "bench_device_s": row["eval_device_s"],
                 "bench_compile_s": round(compile_seconds(bench_dir / "runs" / row["run_id"]), 1),
                 "bench_speedup": row["speedup"], "correct": row["correct"]}
        if args.singles:
            summary = out / f"single-{name}.json"
            _, wall = run(["run", f"tasks/{name}.py", *flags, "--no-commit", "--min-speedup", "0", "--run-dir",
                           str(out / "single-runs"), "--json", str(summary)], out, f"single-{name}",
                          out / "cache-alone" if fresh else None)
            data = json.loads(summary.read_text())
            best = data.get("best") or {}
            entry.update(single_wall_s=round(wall, 1), single_device_s=round(device_seconds(Path(data["run_dir"])), 3),
                         single_compile_s=round(compile_seconds(Path(data["run_dir"])), 1),
                         single_speedup=best.get("speedup"))
        rows.append(entry)
        with open(out / "rows.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
    overall = table["overall"]
    lines = [f"# kevin-opt bench of {len(rows)} example tasks on {args.device} ({table['device_name']})", "",
             f"caches: {'each side its own, empty at the start' if fresh else 'shared, as they were'}; "
             f"bench wall {bench_wall:.1f} s (process, backend, every task, tables); "
             f"correct best@k {overall['correct_best_at_k']:.0%}, speedup best@k "
             f"{overall['eager']['speedup_best_at_k']:.2f}x, fast_1 {overall['eager']['fast_1']:.0%}", "",
             "| task | correct | bench: wall s | alone: wall s | bench: builds s | alone: builds s | "
             "bench: eval device s | alone: eval device s | bench speedup | alone speedup |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['correct']} | {r['bench_wall_s']:.1f} | {r.get('single_wall_s', '-')} | "
                     f"{r['bench_compile_s']} | {r.get('single_compile_s', '-')} | {r['bench_device_s']:.2f} | "
                     f"{r.get('single_device_s', '-')} | "
                     f"{r['bench_speedup'] or 0:.2f}x | {(r.get('single_speedup') or 0):.2f}x |")
    text = "\n".join(lines) + "\n"
    (out / "bench.md").write_text(text)
    (out / "bench.json").write_text(json.dumps({"device": args.device, "caches": args.caches,
                                                "bench_wall_s": bench_wall, "rows": rows,
                                                "overall": overall}, indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
