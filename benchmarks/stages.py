#!/usr/bin/env python3
"""Where one candidate's evaluation goes: time by stage and, on cuda, memory at its peak.

For each task and candidate: an evaluator in this process with worker profiles
(``EvalSettings.profile_dir``), the probe timed, then the candidate evaluated twice, first as a
run's first candidate (a cold build unless the cache has it, a worker that was made after the
probe) and then again (a cached build, a worker that waited for it). Printed side by side: the
probe, each stage of both evaluations, the device time, the peak against the task's footprint and
the evaluation's plan. With ``--memory-history`` (cuda) each worker also records the allocator's
history, and the tables under it name what was live (and what was cached) when the worker's
reservation peaked, by the line of the project, the task or the candidate that allocated it.

Usage: benchmarks/stages.py [--device cuda|cpu] [--case TASK:CANDIDATE ...] [--no-compare-compile]
                            [--memory-history] [--out DIR]
Cases default to the 6 GiB ReLU of benchmarks/tasks on cuda and examples/rmsnorm.py with its last
scripted kernel on cpu; ``turn`` names the turn benchmark's 8192 x 8192 affine task (1024 x 1024 on
cpu) with its first correct candidate. Progress goes to stderr and ``DIR/stages.json`` as it goes.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from kevin_agent.evaluate import EvalSettings, LocalEvaluator, detect_device  # noqa: E402
from kevin_agent.task import load_task  # noqa: E402

STAGES = ("queue", "compile", "load", "correctness", "timing")
_T0 = time.monotonic()


def note(text: str) -> None:
    print(f"[stages.py +{time.monotonic() - _T0:6.1f} s] {text}", file=sys.stderr, flush=True)


def resolve_case(case: str, device: str, work: Path) -> tuple[str, Path, str]:
    """(label, task file, candidate source) of a ``TASK:CANDIDATE`` pair, or of a named case."""
    if case == "turn":
        import turn

        size = 8192 if device == "cuda" else 1024
        task = work / "affine_relu.py"
        task.write_text(turn.TASK.format(rows=size, cols=size))
        return f"affine {size} x {size}", task, turn.candidates(device, f"stages{os.getpid()}")[0][1]
    if case == "example":
        from turn import example_kernel

        task, source = example_kernel(device)
        return task.stem, task, source
    task_name, _, candidate = case.partition(":")
    task = Path(task_name)
    return task.stem, task, Path(candidate).read_text(encoding="utf-8")


def _label(frames: list[dict], roots: tuple[str, ...]) -> str:
    """The innermost frame in the project, the task or the candidate (else the innermost of all)."""
    for frame in frames:
        name = frame.get("filename", "")
        if any(root in name for root in roots):
            short = name.split("kevin_agent/")[-1] if "kevin_agent/" in name else Path(name).name
            return f"{short}:{frame.get('line')} {frame.get('name')}"
    if frames:
        return f"{Path(frames[0].get('filename', '?')).name}:{frames[0].get('line')} {frames[0].get('name')}"
    return "(no frames)"


def _drop(blocks: dict[int, tuple[int, str]], start: int, size: int) -> None:
    for addr in [a for a, (n, _) in blocks.items() if a < start + size and start < a + n]:
        del blocks[addr]


def _by_line(blocks: dict[int, tuple[int, str]]) -> list[dict]:
    by_line: dict[str, int] = defaultdict(int)
    for size, label in blocks.values():
        by_line[label] += size
    return [{"line": k, "gib": v / 2**30} for k, v in sorted(by_line.items(), key=lambda kv: -kv[1])[:10]]


def peak_of(pickle_path: Path, roots: tuple[str, ...]) -> dict:
    """Replay one worker's allocator history: its reservation's peak, what was live then, and what
    the reserved but unused blocks last held (memory cached by the allocator counts as reserved)."""
    snapshot = pickle.loads(pickle_path.read_bytes())
    reserved = peak = 0
    live: dict[int, tuple[int, str]] = {}
    freed: dict[int, tuple[int, str]] = {}
    at_peak: tuple[dict, dict] = ({}, {})
    for trace in snapshot.get("device_traces", []):
        for event in trace:
            action, size, addr = event.get("action"), int(event.get("size", 0)), event.get("addr", 0)
            if action in ("segment_alloc", "segment_map"):
                reserved += size
                if reserved > peak:
                    peak, at_peak = reserved, (dict(live), dict(freed))
            elif action in ("segment_free", "segment_unmap"):
                reserved -= size
                _drop(freed, addr, size)
            elif action == "alloc":
                _drop(freed, addr, size)
                live[addr] = (size, _label(event.get("frames", []), roots))
            elif action == "free_completed" and addr in live:
                freed[addr] = live.pop(addr)
    return {"worker": pickle_path.stem.removesuffix(".memory"), "peak_reserved_gib": peak / 2**30,
            "live_at_peak_gib": sum(s for s, _ in at_peak[0].values()) / 2**30,
            "live_by_line": _by_line(at_peak[0]), "cached_by_line": _by_line(at_peak[1])}


def ninja_steps(cache: Path, since: float) -> list[dict]:
    """Each step of the builds written since ``since`` (ninja's own log: start and end in ms)."""
    steps = []
    for log in cache.rglob(".ninja_log"):
        if log.stat().st_mtime < since:
            continue
        for line in log.read_text(errors="replace").splitlines()[1:]:
            parts = line.split("\t")
            if len(parts) >= 4:
                steps.append({"build": log.parent.parent.name, "target": parts[3],
                              "start_s": int(parts[0]) / 1000, "end_s": int(parts[1]) / 1000})
    return steps


def evaluate_case(label: str, task: Path, source: str, device: str, cache: Path, work: Path,
                  compare_compile: bool, memory_history: bool) -> dict:
    profiles = work / "profiles" / label.replace(" ", "_")
    settings = EvalSettings(device=device, cache_dir=cache, profile_dir=profiles, compare_compile=compare_compile,
                            profile_memory=memory_history)
    ev = LocalEvaluator(load_task(task), settings)
    row: dict = {"case": label}
    started = time.time()
    try:
        start = time.monotonic()
        ev.probe()
        row["probe_s"] = time.monotonic() - start
        note(f"{label}: probe {row['probe_s']:.1f} s")
        for which in ("first", "again"):
            start = time.monotonic()
            result = ev.evaluate([source])[0]
            st = result.stage_s
            row[which] = {"status": result.status.value, "wall_s": time.monotonic() - start,
                          "stage_s": st.model_dump() if st else None, "device_s": st.device if st else None,
                          "speedup": result.speedup, "cached_build": result.cached_build,
                          "memory": result.memory.model_dump() if result.memory else None,
                          "error": (result.error or "")[-300:]}
            note(f"{label}: {which} {result.status.value} in {row[which]['wall_s']:.1f} s, stages {row[which]['stage_s']}")
    finally:
        ev.close()
    row["ninja"] = ninja_steps(cache, since=started)
    roots = ("kevin_agent/", str(task), "candidate.py")
    row["memory_peaks"] = [peak_of(p, roots) for p in sorted(profiles.glob("*.memory.pickle"))]
    return row


def fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    lines = ["| case | probe s | | status | wall s | " + " | ".join(STAGES) + " | device s | peak / footprint | plan / footprint |",
             "|---|---:|---|---|---:|" + "---:|" * len(STAGES) + "---:|---:|---:|"]
    for row in rows:
        for which in ("first", "again"):
            ev = row.get(which)
            if ev is None:
                continue
            st, mem = ev["stage_s"] or {}, ev["memory"] or {}
            fp = mem.get("footprint_bytes") or 0
            ratio = mem["peak_reserved_bytes"] / fp if fp else None
            plan = mem["planned_bytes"] / fp if fp else None
            lines.append(f"| {row['case']} | {fmt(row['probe_s'], '.1f') if which == 'first' else ''} | {which} | "
                         f"{ev['status']} | {fmt(ev['wall_s'], '.1f')} | "
                         + " | ".join(fmt(st.get(s)) for s in STAGES)
                         + f" | {fmt(ev['device_s'])} | {fmt(ratio)} | {fmt(plan)} |")
    for row in rows:
        for step in row.get("ninja", []):
            lines.append(f"{row['case']}: build step {step['target']} {step['start_s']:.1f}-{step['end_s']:.1f} s")
    for row in rows:
        for peak in row.get("memory_peaks", []):
            lines.append(f"\n{row['case']}, worker {peak['worker']}: reservation peaked at "
                         f"{peak['peak_reserved_gib']:.2f} GiB, {peak['live_at_peak_gib']:.2f} GiB live then:")
            lines += [f"  {p['gib']:7.3f} GiB  {p['line']}" for p in peak["live_by_line"]]
            if peak["cached_by_line"]:
                lines.append("  reserved but unused then, last allocated by:")
                lines += [f"  {p['gib']:7.3f} GiB  {p['line']}" for p in peak["cached_by_line"]]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--case", action="append", default=None,
                    help="TASK:CANDIDATE (files), 'turn' or 'example'; repeatable")
    ap.add_argument("--no-compare-compile", action="store_true")
    ap.add_argument("--memory-history", action="store_true",
                    help="cuda: record the workers' allocator history and name what was live at each peak "
                         "(slows every allocation: the stage times are then not the evaluation's own)")
    ap.add_argument("--out", type=Path, default=None, help="folder for stages.json and the profiles")
    args = ap.parse_args()
    device = args.device or detect_device()
    if device == "cuda" and detect_device() != "cuda":
        print("stages.py: --device cuda needs an NVIDIA GPU; run it with --device cpu here", file=sys.stderr)
        return 2
    tasks = REPO / "benchmarks" / "tasks"
    cases = args.case or ([f"{tasks / 'relu_6gb.py'}:{tasks / 'relu_6gb_cuda.py'}"] if device == "cuda" else ["example"])
    work = args.out or Path(tempfile.mkdtemp(prefix="kevin-stages-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ.get("KEVIN_CACHE_DIR") or work / "cache")
    rows: list[dict] = []
    for case in cases:
        label, task, source = resolve_case(case, device, work)
        try:
            rows.append(evaluate_case(label, task, source, device, cache, work, not args.no_compare_compile,
                                     args.memory_history))
        except Exception as exc:  # one failed case must not hide the others
            rows.append({"case": label, "error": f"{type(exc).__name__}: {exc}"[:500]})
            note(f"{label}: {rows[-1]['error']}")
        (work / "stages.json").write_text(json.dumps(rows, indent=1))
    if (work / "profiles").is_dir():
        with tarfile.open(work / "profiles.tar.gz", "w:gz") as tar:
            tar.add(work / "profiles", arcname="profiles", filter=lambda t: None if t.name.endswith(".pickle") else t)
    print(table([r for r in rows if "error" not in r]))
    for r in rows:
        if "error" in r:
            print(f"{r['case']}: {r['error']}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
