"""The whole-model subcommands: ``profile``, ``extract``, ``install``, ``e2e``; their flags and what
each does. ``cli`` registers them with ``add_parsers`` and hands them over with ``dispatch``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import given_settings, load_config
from ..console import interactive, note, write_json
from ..errors import ExitCode, KevinError

COMMANDS = {"profile", "extract", "install", "e2e"}
MODEL_HELP = "the model file: get_model() and get_inputs(), or a KernelBench whole-model file"


def add_parsers(sub, flag, positive_int, nonneg_float) -> None:
    """``flag(group, setting, ...)`` adds a run setting's flag (``cli._flag``)."""
    profile = sub.add_parser("profile", help="profile a whole model and rank its modules for a kernel")
    profile.add_argument("model_file", type=Path, metavar="MODEL", help=MODEL_HELP)
    _device_flags(profile, flag, "where the model runs while it is profiled")
    profile.add_argument("--forwards", type=positive_int, default=None, metavar="N",
                         help="forwards under the profiler (default 10); each module's time is its median over them")
    flag(profile, "bandwidth_gb_s", type=nonneg_float, metavar="GB_S")
    profile.add_argument("--json", dest="json_path", type=Path, metavar="PATH", help="write the profile as JSON")
    profile.add_argument("--plain", action="store_true", help="print the table even on a terminal")
    plan = profile.add_argument_group("the plan printed under the table: which groups are worth a kernel")
    plan.add_argument("--modules", type=positive_int, default=None, metavar="N",
                      help="at most N groups (default 4)")
    plan.add_argument("--min-saving", type=_fraction, default=None, metavar="F",
                      help="only groups that could save at least this part of the forward (default 0.02: about "
                           "what a whole model's timing moves when nothing changed)")
    run = profile.add_argument_group("the run a choice in the terminal UI starts")
    for setting in ("backend", "model", "base_url"):
        flag(run, setting, metavar="NAME" if setting != "base_url" else "URL")
    flag(run, "responses", type=Path, metavar="PATH")
    flag(run, "turns", type=positive_int, metavar="N")
    flag(run, "trajectories", type=positive_int, metavar="N")

    extract = sub.add_parser("extract", help="write one module of a model as a task file")
    extract.add_argument("model_file", type=Path, metavar="MODEL", help=MODEL_HELP)
    extract.add_argument("--module", required=True, metavar="PATH", help="its path in the model (blocks.3.mlp)")
    extract.add_argument("-o", "--output", type=Path, metavar="PATH",
                         help="the task file to write (default <model>_<path>.py beside the model)")
    extract.add_argument("--replace", action="store_true", help="overwrite the task file if it exists")
    _device_flags(extract, flag, "where the model runs while the module is recorded and the task is checked "
                                 "against it")

    install = sub.add_parser("install", help="show the change to a model file that installs delivered kernels "
                                             "(--write writes it)")
    install.add_argument("model_file", type=Path, metavar="MODEL", help=MODEL_HELP)
    install.add_argument("--kernel", type=Path, action="append", required=True, metavar="PATH",
                         help="a delivered kernel module (<task>_kevin.py); again for each kernel: --kernel A "
                              "--kernel B")
    install.add_argument("--write", action="store_true", help="write the change into the model file")
    install.add_argument("--replace", action="store_true",
                         help="with --write: write into the model file even though it has uncommitted changes (they "
                              "stay in it; the change only adds lines), or git does not track it (without --replace "
                              "such a file is left untouched and the change written beside it)")

    e2e = sub.add_parser("e2e", help="time the whole model with and without delivered kernels")
    e2e.add_argument("model_file", type=Path, metavar="MODEL", help=MODEL_HELP)
    e2e.add_argument("--kernel", type=Path, action="append", required=True, metavar="PATH",
                     help="a delivered kernel module (<task>_kevin.py) to run inside the model; again for each "
                          "kernel: with several, each one's effect is measured and one that breaks the outputs or "
                          "slows the model is dropped")
    e2e.add_argument("--profile", dest="profile_json", type=Path, metavar="PATH",
                     help="the model's profile (kevin-opt profile --json) for Amdahl's prediction "
                          "(default: profile it now)")
    e2e.add_argument("--rounds", type=positive_int, default=None, metavar="N",
                     help="rounds of one worker without and one with the kernel (default 2)")
    e2e.add_argument("--accept-slower", action="store_true",
                     help="exit 0 even when the kernels make the whole model slower")
    e2e.add_argument("--json", dest="json_path", type=Path, metavar="PATH", help="write the result as JSON")
    _device_flags(e2e, flag, "where the whole model runs, with the kernel and without it")
    flag(e2e, "tolerance", choices=["strict", "kernelbench"])
    flag(e2e, "atol", type=nonneg_float, metavar="X")
    flag(e2e, "rtol", type=nonneg_float, metavar="X")
    flag(e2e, "timed_runs", type=positive_int, metavar="N")
    flag(e2e, "compare_compile", action=argparse.BooleanOptionalAction,
         help="also time the model under torch.compile, without the kernels and with them (default on for cuda)")
    flag(e2e, "e2e_mode", "--mode", choices=["eager", "compile"])


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a part of the forward (0 <= F < 1, e.g. 0.02 for 2%)")
    return value


def _device_flags(p: argparse.ArgumentParser, flag, where: str) -> None:
    flag(p, "device", choices=["cpu", "cuda"], help=f"{where}: cpu or cuda (default cuda when a GPU is present, "
                                                    "else cpu)")
    flag(p, "seed", type=int, metavar="N")
    flag(p, "cpu_threads", type=int, metavar="N")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="wall-clock limit of each worker, in seconds (default 300)")


def _settings(args):
    from ..run.launch import resolve_device

    config = load_config(given_settings(args), project_dir=args.model_file.parent if args.model_file.parent.exists()
                         else None)
    return config, config.eval_settings(resolve_device(config))


def dispatch(args) -> int:
    from ..model.modelfile import load_model_file

    model_file = load_model_file(args.model_file)
    return {"profile": cmd_profile, "extract": cmd_extract, "install": cmd_install, "e2e": cmd_e2e}[args.command](
        args, model_file)


def cmd_profile(args, model_file) -> int:
    from ..model.choose import DEFAULT_MIN_SAVING, DEFAULT_MODULES, choose, plan_lines
    from ..model.profile import DEFAULT_FORWARDS, profile_model
    from ..model.table import signature_lines, summary_lines, table_lines

    config, settings = _settings(args)
    if interactive(args) and not args.plain and not args.json_path:
        from ..tui.profile import profile_tui

        return profile_tui(model_file, config, settings, forwards=args.forwards or DEFAULT_FORWARDS)
    note(f"profiling {model_file.given} on {settings.device} (a worker: warm-up, then the profiler)")
    profile = profile_model(model_file, settings, forwards=args.forwards or DEFAULT_FORWARDS, timeout_s=args.timeout)
    width = max(80, min(160, _columns()))
    print("\n".join([*summary_lines(profile), "", *table_lines(profile, width), "", *signature_lines(profile), "",
                     *plan_lines(choose(profile, modules=args.modules or DEFAULT_MODULES,
                                        min_saving=DEFAULT_MIN_SAVING if args.min_saving is None else args.min_saving))]))
    if profile.ranked_groups:
        top = profile.ranked_groups[0]
        print(f"\nnext: kevin-opt extract {model_file.given} --module {top.path} -o {_stem(model_file, top.members)}")
    if args.json_path:
        write_json(args.json_path, profile)
    return ExitCode.OK


def _stem(model_file, members: list[str]) -> str:
    from ..model.extract import default_task_path

    return default_task_path(model_file, members).name


def _shown(path: Path) -> Path:
    """``path`` as the person would type it: relative to where they are, when it is below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


def cmd_extract(args, model_file) -> int:
    from ..model.extract import extract_task
    from ..model.groups import group_name

    config, settings = _settings(args)
    target = extract_task(model_file, args.module, args.output, settings, replace=args.replace,
                          timeout_s=args.timeout)
    from ..model.marks import extracted_from

    meta = extracted_from(target.read_text(encoding="utf-8"))
    target = _shown(target)
    sigs = "; ".join(f"{s.key} x{s.calls}" for s in meta.signatures)
    if len(meta.paths) > 1:
        print(f"wrote {target}: `{group_name(meta.paths)}` ({meta.class_name}), one task for {len(meta.paths)} "
              f"identical modules, by the {meta.capture} capture of {meta.module}, checked bit for bit against "
              f"each of them ({', '.join(meta.paths)}) on its own weights and every recorded input")
    else:
        print(f"wrote {target}: `{meta.module or '(the whole model)'}` ({meta.class_name}) by its {meta.capture} "
              "capture, checked bit for bit against the module on every recorded input")
    for path, why in meta.not_members.items():
        print(f"left out: {path} looks the same but the task does not reproduce it ({why}); it keeps its "
              "original forward")
    print(f"signatures (calls per forward): {sigs}")
    print("\n".join(next_run(target, config, settings.device)))
    return ExitCode.OK


def next_run(task: Path, config, device: str) -> list[str]:
    """The run to start on ``task``, with a backend that can work here: the default (vLLM in this
    process) needs a GPU and the vllm package; without them, a server elsewhere or a script."""
    import importlib.util

    run = f"kevin-opt {task} --device {device}"
    if config.backend != "vllm":
        return [f"next: {run}  (the {config.backend} backend, as configured)"]
    missing = [why for why, lacking in (("no GPU", device != "cuda"),
                                        ("no vllm package", importlib.util.find_spec("vllm") is None)) if lacking]
    if not missing:
        return [f"next: {run}"]
    return [f"next ({' and '.join(missing)} here, so not the default vLLM backend):",
            f"  {run} --backend openai --base-url http://HOST:PORT/v1   (Kevin-32B served on a GPU machine)",
            f"  {run} --backend scripted --responses FILE   (hand-written answers: the loop without a model)"]


def cmd_install(args, model_file) -> int:
    from ..delivery.install import plan_change, write_change

    change = plan_change(model_file, args.kernel)
    if change.done:
        print(f"{model_file.given} already installs {change.stem}")
        return ExitCode.OK
    if change.already:
        print(f"{model_file.given} already installs {', '.join(change.already)}")
    if args.write:
        target = _install_target(model_file, change, replace=args.replace)
        write_change(model_file, change, replace=args.replace, to=target.path)
        if target.keeping == "beside":
            print(f"wrote the model with the change into {_shown(target.path)}:\n{change.diff}")
            note(target.words())
        else:
            print(f"wrote the change into {model_file.given}:\n{change.diff}")
        return ExitCode.OK
    if change.new_text is not None:
        print(f"the change that installs {change.stem} into `{change.module}` (kevin-opt install --write writes it):")
        print(change.diff.rstrip("\n"))
    else:
        print(f"to install {change.stem} into `{change.module}`, add where the model is built ({change.why_not}):")
        print("\n".join(f"    {line}" for line in change.usage()))
    if change.why_not and change.new_text is not None:
        print(f"note: {change.why_not}")
    return ExitCode.OK


def _install_target(model_file, change, *, replace: bool):
    """Where ``install --write`` writes: into the model file where git restores it (or --replace
    says so), else beside it, the original untouched (``delivery.original``); an existing file
    beside it that is not this very change is refused."""
    from ..delivery import gitops
    from ..delivery.original import ModelTarget, model_target
    from ..model.modelfile import ModelError

    if replace:
        return ModelTarget(original=model_file.path, path=model_file.path, keeping="in place")
    with gitops.opened(model_file.path) as repo:
        target = model_target(model_file.path, repo, commit=False)
    beside = target.path
    if target.keeping == "beside" and beside.exists() and beside.read_text(encoding="utf-8") != change.new_text:
        raise ModelError(f"{_shown(beside)} exists: the change to {model_file.given} would be written there, "
                         f"because {target.why}",
                         f"move {beside.name} away, or commit {model_file.given} first; --replace writes the change "
                         f"into {model_file.given} itself")
    return target


def cmd_e2e(args, model_file) -> int:
    from ..delivery.e2e import DEFAULT_ROUNDS, measure
    from ..model.profile import profile_model
    from ..model.records import ModelProfile
    from ..model.table import e2e_lines

    _, settings = _settings(args)
    if args.profile_json is not None:
        try:
            profile = ModelProfile.model_validate_json(args.profile_json.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise KevinError(f"{args.profile_json}: not a profile ({str(exc).splitlines()[0]})",
                             "pass the JSON that kevin-opt profile --json wrote") from None
    else:
        note(f"profiling {model_file.given} for Amdahl's prediction (pass --profile JSON to reuse one)")
        profile = profile_model(model_file, settings, timeout_s=args.timeout)
    several = len(args.kernel) > 1
    note(f"timing the whole model without and with the kernel{'s (each alone, and all but each)' if several else ''}, "
         "each in fresh workers")
    result = measure(model_file, args.kernel, settings, profile=profile, rounds=args.rounds or DEFAULT_ROUNDS,
                     timeout_s=args.timeout)
    print("\n".join(e2e_lines(result)))
    if args.json_path:
        write_json(args.json_path, result)
    if several and not result.kept:
        print("no kernel kept: each one breaks the outputs or slows the whole model", file=sys.stderr)
        return ExitCode.NONE
    if not result.outputs_match:
        return ExitCode.NONE
    if result.slower and not args.accept_slower:
        print("not accepted: pass --accept-slower to accept a kernel that slows the whole model down",
              file=sys.stderr)
        return ExitCode.NONE
    return ExitCode.OK

