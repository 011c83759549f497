"""``kevin-opt``: the command line. It parses; ``commands`` does the work.

A flag that sets a run setting has the setting's name as its ``dest``: its help text and default
come from the field in ``config.py``, and ``config.given_settings`` passes every such flag on
without a list of names, so a new option is a field there and one ``_flag`` line here.
Exit codes are ``errors.ExitCode``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from .. import __version__
from ..config import RunConfig, field_help
from ..errors import ExitCode, KevinError
from .bench_commands import BENCH_DIR_HELP
from .bench_commands import add_parser as add_bench_parser
from .model_commands import COMMANDS as MODEL_COMMANDS
from .model_commands import add_parsers as add_model_parsers
from .optimize_command import add_parser as add_optimize_parser

SUBCOMMANDS = {"run", "check", "history", "show", "resume", "optimize", "bench", *MODEL_COMMANDS}
STORE_HELP = ("where the runs are stored (default: .kevin/runs at the top of the git repository that holds the "
              "current directory, else in the current directory)")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        # `--turn 2 --fast` is a typo, not `--turns 2 --fast-build`: every flag is spelled out.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        # What is wrong and where to read more, as git does; not the whole usage first, which
        # pushes the one line that matters off the screen.
        self.exit(ExitCode.USAGE, f"kevin-opt: error: {message}\n  hint: see `{self.prog} --help`\n")


def _bounded(convert, noun: str, ok, bound: str):
    """An argparse type: ``convert`` of the text, refused with ``bound`` where ``ok`` says no."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{bound}, got {value}")
        return value

    return parse


_positive_int = _bounded(int, "a whole number", lambda v: v >= 1, "must be at least 1")
_nonneg_float = _bounded(float, "a number", lambda v: v >= 0, "must not be negative")
_positive_float = _bounded(float, "a number", lambda v: v > 0, "must be more than 0")


def _flag(group, setting: str, *names: str, help: str | None = None, **kw) -> None:
    """A flag for the run setting ``setting``; unset stays None so lower layers can fill it."""
    assert setting in RunConfig.model_fields, setting
    flags = names or (f"--{setting.replace('_', '-')}",)
    text = help or field_help(setting)
    if text[:2].istitle():  # "Where kernels run" reads as argparse's own lines do; "JSONL of ..." stays
        text = text[0].lower() + text[1:]
    text = text.replace("%", "%%")  # argparse formats help with %
    group.add_argument(*flags, dest=setting, default=None, help=text, **kw)


def _choices_help(setting: str, names) -> str:
    return f"{field_help(setting)}; one of: {', '.join(sorted(names))}"


def _add_run_flags(p: argparse.ArgumentParser, registry, *, resume: bool = False) -> None:
    g = p.add_argument_group("loop")
    _flag(g, "turns", type=_positive_int, metavar="N")
    if not resume:
        _flag(g, "trajectories", type=_positive_int, metavar="N")
    if not resume:
        _flag(g, "search", metavar="NAME")
        _flag(g, "beam_width", type=_positive_int, metavar="K")
    _flag(g, "target_speedup", type=_nonneg_float, metavar="X")
    _flag(g, "stop_at_roofline", type=_positive_float, metavar="F")
    _flag(g, "min_speedup", type=_nonneg_float, metavar="X")
    m = p.add_argument_group("model")
    if not resume:
        _flag(m, "backend", metavar="NAME", help=_choices_help("backend", registry.backends))
        _flag(m, "model", metavar="NAME")
        _flag(m, "responses", type=Path, metavar="PATH")
        _flag(m, "temperature", type=_nonneg_float, metavar="X")
        _flag(m, "max_tokens", type=_positive_int, metavar="N")
        _flag(m, "context_tokens", type=_positive_int, metavar="N")
        _flag(m, "tensor_parallel_size", type=_positive_int, metavar="N")
        _flag(m, "gpu_memory_utilization", type=float, metavar="F")
        _flag(m, "kv_cache_dtype", choices=["auto", "fp8"])
        _flag(m, "quantization", choices=["none", "fp8"])
        _flag(m, "prefix_caching", action=argparse.BooleanOptionalAction)
        _flag(m, "cuda_graphs", action=argparse.BooleanOptionalAction)
        _flag(m, "speculative", choices=["off", "ngram"])
    _flag(m, "base_url", metavar="URL")
    e = p.add_argument_group("evaluation")
    if not resume:
        _flag(e, "device", metavar="NAME", help=_choices_help("device", registry.devices))
        _flag(e, "class_name", "--class", metavar="NAME")
    _flag(e, "eval_gpu", type=int, metavar="N")
    _flag(e, "confirm_top", type=_positive_int, metavar="N")
    _flag(e, "confirm_rounds", type=_positive_int, metavar="N")
    _flag(e, "confirm_workers", type=_positive_int, metavar="N")
    _add_eval_flags(e)
    o = p.add_argument_group("output")
    o.add_argument("--headless", action="store_true", help="plain progress on stderr, no terminal UI")
    o.add_argument("--json", dest="json_path", type=Path, metavar="PATH", help="write a JSON summary")
    _flag(o, "commit", "--no-commit", action="store_false",
          help="write the best kernel and its report next to the task, but commit nothing")
    o.add_argument("--replace", action="store_true",
                   help="overwrite target files git could not restore (untracked), and a kernel module that "
                        "claims a better speedup on this device")
    o.add_argument("--accept-flagged", action="store_true",
                   help="deliver the best kernel even when it is flagged as faster than the physical floor allows")
    _flag(o, "e2e", "--no-e2e", action="store_false",
          help="on a task kevin-opt extract wrote, commit without first running the whole model with the kernel")
    _flag(o, "accept_slower", "--accept-slower", action="store_true")
    _flag(o, "e2e_mode", "--mode", choices=["eager", "compile"])
    _flag(o, "branch", metavar="NAME")
    _flag(o, "out", type=Path, metavar="PATH")
    _flag(o, "run_dir", type=Path, metavar="DIR")
    for name, reporter in registry.reporters.items():
        o.add_argument(reporter.cli_option, dest=f"reporter_{name}", type=Path, metavar="PATH", help=reporter.help)


def _add_eval_flags(group) -> None:
    _flag(group, "language", choices=["cuda", "triton"])
    _flag(group, "tolerance", choices=["strict", "kernelbench"])
    _flag(group, "atol", type=_nonneg_float, metavar="X")
    _flag(group, "rtol", type=_nonneg_float, metavar="X")
    _flag(group, "reference_tf32", action=argparse.BooleanOptionalAction)
    _flag(group, "correctness_trials", type=_positive_int, metavar="N")
    _flag(group, "timed_runs", type=_positive_int, metavar="N")
    _flag(group, "compare_compile", action=argparse.BooleanOptionalAction)
    _flag(group, "fast_build", action=argparse.BooleanOptionalAction)
    _flag(group, "bandwidth_gb_s", type=_nonneg_float, metavar="GB_S")
    _flag(group, "eval_memory_gib", type=_nonneg_float, metavar="GIB")


def build_parser(registry) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kevin-opt",
        description="Kevin-32B writes kernels for your PyTorch module; kevin-opt compiles, verifies, times "
                    "and commits the fastest verified one. `kevin-opt FILE` is `kevin-opt run FILE`.",
    )
    parser.add_argument("--version", action="version", version=f"kevin-opt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="optimize a task file (the default command)")
    run.add_argument("file", type=Path, metavar="FILE", help="the Python file with the module to optimize")
    _add_run_flags(run, registry)

    resume = sub.add_parser("resume", help="continue an interrupted run from its last finished turn, an optimize "
                                           "from where it stopped, or a bench's unfinished tasks")
    resume.add_argument("run_id", metavar="RUN", help="the run, optimize or bench id, as `kevin-opt history` lists it")
    _add_run_flags(resume, registry, resume=True)
    resume.add_argument("--bench-dir", type=Path, metavar="DIR", help=BENCH_DIR_HELP)
    resume.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="a bench: run its unfinished tasks on a Ray cluster (see `kevin-opt bench --help`)")

    check = sub.add_parser("check", help="check and evaluate one candidate file against a task, no model")
    check.add_argument("reference", type=Path, metavar="REF", help="the task file with the reference module")
    check.add_argument("candidate", type=Path, metavar="CANDIDATE",
                       help="a Python file that defines ModelNew, or a saved response with one")
    _flag(check, "device", metavar="NAME", help=_choices_help("device", registry.devices))
    _flag(check, "class_name", "--class", metavar="NAME")
    check.add_argument("--json", dest="json_path", type=Path, metavar="PATH", help="write the result as JSON")
    _add_eval_flags(check)

    history = sub.add_parser("history", help="list runs and optimizes")
    history.add_argument("--run-dir", type=Path, metavar="DIR", help=STORE_HELP)
    history.add_argument("--plain", action="store_true", help="print a table even on a terminal")
    history.add_argument("--json", dest="json_out", action="store_true", help="print the list as JSON")
    history.add_argument("--bench-dir", type=Path, metavar="DIR", help=BENCH_DIR_HELP)

    show = sub.add_parser("show", help="show a run or one turn of it, an optimize, or a bench's table")
    show.add_argument("run_id", metavar="RUN", help="the run, optimize or bench id, as `kevin-opt history` lists it")
    show.add_argument("--turn", type=_positive_int, metavar="N", help="show this turn in full")
    show.add_argument("--trajectory", type=int, default=0, metavar="T",
                      help="the trajectory of --turn (default 0)")
    show.add_argument("--run-dir", type=Path, metavar="DIR", help=STORE_HELP)
    show.add_argument("--bench-dir", type=Path, metavar="DIR", help=BENCH_DIR_HELP)
    show.add_argument("--prompt", action="store_true", help="also print the prompt")
    show.add_argument("--response", action="store_true", help="also print the full response")
    show.add_argument("--ncu", action="store_true",
                      help="profile the turn's kernel with Nsight Compute (needs --turn, an NVIDIA GPU and ncu); "
                           "the full report is kept in the run directory")
    add_model_parsers(sub, _flag, _positive_int, _nonneg_float)
    add_optimize_parser(sub, _add_run_flags, registry, _positive_int)

    add_bench_parser(sub, _flag, _positive_int, _nonneg_float,
                     lambda setting: _choices_help(setting, registry.backends if setting == "backend"
                                                   else registry.devices))
    return parser


def _refuse_unknown(parser: argparse.ArgumentParser, command: str | None, extra: list[str]) -> None:
    """Exit 2 naming the arguments no parser took, by the subcommand's usage; a flag that begins a
    real one (``--turn``) is named with it, since no flag is taken by its first letters."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    owner = sub.choices.get(command, parser) if command else parser
    known = [o for a in owner._actions for o in a.option_strings if o.startswith("--")]
    said = []
    for arg in extra:
        flag = arg.split("=", 1)[0]
        meant = [o for o in known if flag.startswith("--") and o.startswith(flag)]
        said.append(f"{arg} (did you mean {' or '.join(meant[:3])}?)" if meant else arg)
    owner.error(f"unrecognized arguments: {' '.join(said)}")


def normalize_argv(argv: list[str]) -> list[str]:
    """`kevin-opt FILE ...` means `kevin-opt run FILE ...`."""
    for i, arg in enumerate(argv):
        if arg in ("-h", "--help", "--version"):
            return argv
        if not arg.startswith("-"):
            return argv if arg in SUBCOMMANDS else [*argv[:i], "run", *argv[i:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = normalize_argv(list(sys.argv[1:] if argv is None else argv))
    from ..console import print_error
    from ..registry import build_registry

    registry = build_registry()
    for problem in registry.load_errors:
        print(f"kevin-opt: warning: {problem}", file=sys.stderr)
    parser = build_parser(registry)
    args, extra = parser.parse_known_args(argv)
    if extra:
        _refuse_unknown(parser, args.command, extra)
    if args.command is None:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    from . import commands, model_commands, optimize_command

    try:
        try:
            if args.command in MODEL_COMMANDS:
                code = int(model_commands.dispatch(args))
            elif args.command == "optimize":
                code = int(optimize_command.cmd_optimize(args, registry))
            else:
                code = int(commands.dispatch(args, registry))
        except KevinError as exc:
            code = print_error(exc)
        except KeyboardInterrupt as exc:
            print("kevin-opt: interrupted", file=sys.stderr)
            code = ExitCode.for_signal(getattr(exc, "signum", signal.SIGINT))
        sys.stdout.flush()  # a reader gone shows here, where it is caught, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """stdout's reader left (``kevin-opt history | head -3``): end quietly, with the exit status of
    a process that SIGPIPE ended, as git and coreutils do."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's last flush has nothing to fail on
    return ExitCode.for_signal(signal.SIGPIPE)
