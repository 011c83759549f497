"""``kevin-opt bench PATH...``: its flags and what it does; ``resume``, ``show`` and ``history`` reach
a bench through ``stored``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..console import interactive, write_json
from ..errors import ExitCode

BENCH_DIR_HELP = ("where benches are stored (default: .kevin/benches at the top of the git repository that holds the "
                  "current directory, else in the current directory)")
LOOP = ("turns", "trajectories", "search", "beam_width", "target_speedup", "stop_at_roofline")
MODEL = ("backend", "model", "base_url", "responses", "temperature", "max_tokens", "context_tokens", "quantization",
         "kv_cache_dtype")
EVALUATION = ("device", "language", "class_name", "tolerance", "atol", "rtol", "correctness_trials", "timed_runs",
              "compare_compile", "confirm_top", "confirm_rounds", "confirm_workers", "seed")


def add_parser(sub, flag, positive_int, nonneg_float, choices_help) -> None:
    """``flag(group, setting, ...)`` adds a run setting's flag (``cli._flag``)."""
    p = sub.add_parser("bench", allow_abbrev=False,
                       help="run many task files with one run's settings and write the paper's table",
                       description="Run every task file of the PATHs (folders of KernelBench-convention task files, "
                                   "or text files listing them) with the run's settings, commit nothing, and write "
                                   "the paper's table (correct best@k/avg@k, mean speedup best@k/avg@k, fast_p, "
                                   "geometric mean) into the bench's folder. docs/bench.md says how each is defined.")
    p.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                   help="a folder of task files (a KernelBench checkout's level1/), or a text file listing task files")
    kinds = {"turns": positive_int, "trajectories": positive_int, "beam_width": positive_int,
             "target_speedup": nonneg_float, "stop_at_roofline": nonneg_float, "temperature": nonneg_float,
             "max_tokens": positive_int, "context_tokens": positive_int, "atol": nonneg_float, "rtol": nonneg_float,
             "correctness_trials": positive_int, "timed_runs": positive_int, "confirm_top": positive_int,
             "confirm_rounds": positive_int, "confirm_workers": positive_int, "seed": int}
    choices = {"language": ["cuda", "triton"], "tolerance": ["strict", "kernelbench"], "quantization": ["none", "fp8"], "kv_cache_dtype": ["auto", "fp8"]}
    for title, settings in (("loop", LOOP), ("model", MODEL), ("evaluation", EVALUATION)):
        group = p.add_argument_group(title)
        for setting in settings:
            kw: dict = {}
            if setting in kinds:
                kw["type"] = kinds[setting]
                kw["metavar"] = "N" if kinds[setting] in (positive_int, int) else "X"
            elif setting in ("search", "backend", "model", "device", "class_name"):
                kw["metavar"] = "NAME"
            elif setting in ("base_url", "responses"):
                kw["metavar"] = "URL" if setting == "base_url" else "PATH"
            if setting in choices:
                kw["choices"] = choices[setting]
            if setting in ("responses",):
                kw["type"] = Path
            if setting == "compare_compile":
                kw["action"] = argparse.BooleanOptionalAction
            if setting in ("backend", "device"):
                kw["help"] = choices_help(setting)
            flags = ("--class",) if setting == "class_name" else ()
            flag(group, setting, *flags, **kw)
    where = p.add_argument_group("where the tasks run")
    where.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                       help="run each task as a Ray task on a cluster (one GPU each; CPUs on the cpu device): "
                            "ADDRESS of its head (host:6379, or ray://host:10001), or none to start Ray on this "
                            "machine; needs the extra: pip install 'kevin-opt[ray]'")
    out = p.add_argument_group("output")
    out.add_argument("--bench-dir", type=Path, metavar="DIR", help=BENCH_DIR_HELP)
    out.add_argument("--headless", action="store_true", help="progress lines on stderr, no live line")
    out.add_argument("--json", dest="json_path", type=Path, metavar="PATH", help="also write the table's JSON here")


def benches_root(args) -> Path:
    from ..bench import default_benches_root

    return getattr(args, "bench_dir", None) or default_benches_root()


def _ray(address: str | None):
    if address is None:
        return None
    from ..bench.on_ray import RayCluster

    return RayCluster(address)


def cmd_bench(args, registry) -> int:
    from ..bench import Bench
    from ..config import given_settings

    overrides = given_settings(args)
    bench = Bench.new(args.paths, overrides, registry, root=benches_root(args), ray=_ray(args.ray))
    return drive(bench, args)


def cmd_resume_bench(args, registry) -> int:
    from ..bench import Bench

    bench = Bench.resumed(args.run_id, registry, root=benches_root(args), ray=_ray(getattr(args, "ray", None)))
    return drive(bench, args)


def drive(bench, args) -> int:
    """Drive the bench with progress on stderr, then print its table on stdout."""
    from ..bench import build_table, none_ran, render_markdown
    from ..run.interrupts import HeadlessSignals
    from .bench_progress import BenchPrinter

    printer = BenchPrinter(live=interactive(args) and sys.stderr.isatty())
    with HeadlessSignals() as signals, printer.ticking():
        code = bench.drive(printer, signals)
    table = build_table(bench.store)
    print(render_markdown(table), end="")
    store = bench.store
    say = f"kevin-opt: bench {store.info.bench_id} {table.status}: table in {store.dir / 'table.md'} " \
          f"(.json, .csv, fast_p.png)"
    if table.pending:
        say += f"; {len(table.pending)} tasks not finished: kevin-opt resume {store.info.bench_id}"
    print(say, file=sys.stderr)
    if none_ran(store):
        print(f"kevin-opt: error: no task of the bench ran: all {len(table.rows)} failed (their errors are in the "
              f"table above)", file=sys.stderr)
    if getattr(args, "json_path", None):
        write_json(args.json_path, table)
    return code


def show_bench(args) -> int:
    from ..bench import BenchStore, build_table, render_markdown

    store = BenchStore.open(benches_root(args), args.run_id)
    print(render_markdown(build_table(store)), end="")
    print(f"\nruns: kevin-opt show RUN (they are in {store.runs_root}); kernels in {store.kernels_dir}")
    return ExitCode.OK
