"""``kevin-opt``: the command line. The only layer (with the TUI) that prints.

Exit codes (the headless contract): 0 a verified kernel met --min-speedup (and was written,
and committed unless --no-commit); 1 none did; 2 bad input or usage; 3 the environment
cannot run it (no GPU, no backend); 130 interrupted (resume with ``kevin-opt resume``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .errors import KevinError

SUBCOMMANDS = {"run", "check", "history", "show", "resume"}
EXIT_OK, EXIT_NONE, EXIT_USAGE, EXIT_ENV, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own exit code is already 2; add a pointer to --help
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"kevin-opt: error: {message}\n  hint: see `{self.prog} --help`\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _add_run_flags(p: argparse.ArgumentParser, *, resume: bool = False) -> None:
    g = p.add_argument_group("loop")
    g.add_argument("--turns", type=_positive_int, help="refinement turns per trajectory (default 8)")
    if not resume:
        g.add_argument("--trajectories", type=_positive_int, help="parallel trajectories (default 1)")
    g.add_argument("--target-speedup", type=_nonneg_float, metavar="X", help="stop once a verified kernel reaches X")
    g.add_argument("--min-speedup", type=_nonneg_float, metavar="X",
                   help="speedup a verified kernel must reach to succeed and be committed (default 1.0)")
    m = p.add_argument_group("model")
    if not resume:
        m.add_argument("--backend", choices=["vllm", "openai", "scripted"], help="default vllm")
        m.add_argument("--model", help="model name (default cognition-ai/Kevin-32B)")
        m.add_argument("--responses", type=Path, metavar="PATH", help="JSONL of responses for --backend scripted")
        m.add_argument("--temperature", type=_nonneg_float, help="sampling temperature (default 0.9)")
        m.add_argument("--max-tokens", type=_positive_int, help="longest response in tokens (default 16384)")
        m.add_argument("--context-tokens", type=_positive_int, help="model context length (default 32768)")
        m.add_argument("--tensor-parallel-size", type=_positive_int, help="vLLM: GPUs for the model (default 1)")
        m.add_argument("--gpu-memory-utilization", type=float, metavar="F",
                       help="vLLM: share of GPU memory for the model (default 0.80)")
    m.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    e = p.add_argument_group("evaluation")
    if not resume:
        e.add_argument("--device", choices=["cuda", "cpu"], help="default cuda when a GPU is present, else cpu")
        e.add_argument("--class", dest="class_name", metavar="NAME", help="the reference class (default Model)")
    e.add_argument("--atol", type=_nonneg_float, help="absolute tolerance (default per dtype)")
    e.add_argument("--rtol", type=_nonneg_float, help="relative tolerance (default per dtype)")
    e.add_argument("--correctness-trials", type=_positive_int, help="correctness trials (default 5)")
    e.add_argument("--timed-runs", type=_positive_int, help="timed runs per measurement")
    e.add_argument("--compare-compile", action=argparse.BooleanOptionalAction, default=None,
                   help="also time torch.compile of the reference (default: on for cuda, off for cpu)")
    o = p.add_argument_group("output")
    o.add_argument("--headless", action="store_true", help="plain progress on stderr, no TUI")
    o.add_argument("--json", dest="json_path", type=Path, metavar="PATH", help="write a JSON summary")
    o.add_argument("--no-commit", action="store_true", help="write the kernel and report, do not commit")
    o.add_argument("--branch", metavar="NAME", help="commit on this new branch (the checkout stays where it is)")
    o.add_argument("--out", type=Path, metavar="PATH", help="kernel module path (default <task>_kevin.py)")
    o.add_argument("--run-dir", type=Path, metavar="DIR", help="where runs are stored (default .kevin/runs)")


def build_parser(reporters: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kevin-opt",
        description="Kevin-32B writes kernels for your PyTorch module; kevin-opt compiles, verifies, times "
                    "and commits the fastest verified one. `kevin-opt FILE` is `kevin-opt run FILE`.",
    )
    parser.add_argument("--version", action="version", version=f"kevin-opt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="optimize a task file (the default command)")
    run.add_argument("file", type=Path, metavar="FILE", help="Python file with the module to optimize")
    _add_run_flags(run)

    resume = sub.add_parser("resume", help="continue an interrupted run from its last finished turn")
    resume.add_argument("run_id", metavar="RUN")
    _add_run_flags(resume, resume=True)

    for p in (run, resume):
        for name, reporter in (reporters or {}).items():
            p.add_argument(reporter.cli_option, dest=f"reporter_{name}", type=Path, metavar="PATH", help=reporter.help)

    check = sub.add_parser("check", help="check and evaluate one candidate file against a task, no model")
    check.add_argument("reference", type=Path, metavar="REF")
    check.add_argument("candidate", type=Path, metavar="CANDIDATE")
    check.add_argument("--device", choices=["cuda", "cpu"])
    check.add_argument("--class", dest="class_name", metavar="NAME")
    check.add_argument("--json", dest="json_path", type=Path, metavar="PATH")
    check.add_argument("--atol", type=_nonneg_float)
    check.add_argument("--rtol", type=_nonneg_float)
    check.add_argument("--correctness-trials", type=_positive_int)
    check.add_argument("--timed-runs", type=_positive_int)
    check.add_argument("--compare-compile", action=argparse.BooleanOptionalAction, default=None)

    history = sub.add_parser("history", help="list runs")
    history.add_argument("--run-dir", type=Path, metavar="DIR")
    history.add_argument("--plain", action="store_true", help="print a table even on a terminal")
    history.add_argument("--json", dest="json_out", action="store_true", help="print the list as JSON")

    show = sub.add_parser("show", help="show a run, or one turn of it")
    show.add_argument("run_id", metavar="RUN")
    show.add_argument("--turn", type=_positive_int, metavar="N")
    show.add_argument("--trajectory", type=int, default=0, metavar="T")
    show.add_argument("--run-dir", type=Path, metavar="DIR")
    show.add_argument("--prompt", action="store_true", help="also print the prompt")
    show.add_argument("--response", action="store_true", help="also print the full response")
    return parser


def normalize_argv(argv: list[str]) -> list[str]:
    """`kevin-opt FILE ...` means `kevin-opt run FILE ...`."""
    for i, arg in enumerate(argv):
        if arg in ("-h", "--help", "--version"):
            return argv
        if not arg.startswith("-"):
            return argv if arg in SUBCOMMANDS else [*argv[:i], "run", *argv[i:]]
    return argv


def interactive(args) -> bool:
    if getattr(args, "headless", False):
        return False
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        return False
    return sys.stdout.isatty() and sys.stdin.isatty()


def main(argv: list[str] | None = None) -> int:
    argv = normalize_argv(list(sys.argv[1:] if argv is None else argv))
    from .registry import build_registry

    registry = build_registry()
    for problem in registry.load_errors:
        print(f"kevin-opt: warning: {problem}", file=sys.stderr)
    parser = build_parser(registry.reporters)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from . import commands

    try:
        return commands.dispatch(args, registry)
    except KevinError as exc:
        print(f"kevin-opt: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kevin-opt: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def write_json(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise KevinError(f"cannot write {path} ({exc.strerror})", "pass a writable --json path") from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
