"""What each ``kevin-opt`` subcommand does; ``cli.py`` only parses."""

from __future__ import annotations

import ast
import signal
import sys
from pathlib import Path

from ..config import given_settings, load_config
from ..console import interactive, note, write_json
from ..errors import ExitCode, UsageError
from ..formatting import (best_words, confirmed_line, counted, fmt_launched, fmt_memory, fmt_roofline, fmt_seconds,
                         fmt_signatures, fmt_speedup, marked_speedup, ncu_lines, second_look, stage_times)
from ..registry import Registry
from ..results import Status
from ..results.records import CheckRecord, to_json
from ..results.lineage import tree_lines
from ..results.winner import best_of_run, confirmed_turns
from ..store import RunStore, default_runs_root, effective_status
from .progress import ProgressPrinter, turn_error, turn_line
from .stored import KINDS, damaged_lines, kind_of, run_lines



def dispatch(args, registry: Registry) -> int:
    if args.command == "run":
        return cmd_run(args, registry)
    if args.command == "bench":
        from .bench_commands import cmd_bench

        return cmd_bench(args, registry)
    if args.command == "resume":
        if (kind := kind_of(args.run_id, args)) is not None:
            return kind.resume(args, registry)
        return cmd_run(args, registry, resume=True)
    if args.command == "check":
        return cmd_check(args, registry)
    if args.command == "history":
        return cmd_history(args, registry)
    if args.command == "show":
        if (kind := kind_of(args.run_id, args)) is not None:
            return kind.show(args)
        return cmd_show(args)
    raise UsageError(f"unknown command {args.command!r}")


# --- run / resume ------------------------------------------------------------------------------
def cmd_run(args, registry: Registry, *, resume: bool = False) -> int:
    """`run FILE` and `resume RUN`: in the TUI on a terminal, else headless; one run session."""
    from ..run import launch
    from ..run.finish import Outputs
    from ..run.session import RunSession

    outputs = Outputs.from_args(args, registry)
    delivery = dict(replace=args.replace, accept_flagged=args.accept_flagged)
    if resume:
        # Taken before anything loads: a run another process drives is refused here (exit 2).
        store = launch.take_run(args.run_id, args.run_dir)
        session = RunSession.resumed(store, overrides=given_settings(args), registry=registry, **delivery)
        runs_root = store.dir.parent
    else:
        config = load_config(given_settings(args), project_dir=args.file.parent if args.file.parent.exists() else None)
        session = RunSession.new(config, args.file, registry=registry, **delivery)
        runs_root = config.run_dir or default_runs_root(args.file.expanduser().resolve().parent)
    if interactive(args):
        from ..tui import run_tui

        return run_tui(session, runs_root=runs_root, outputs=outputs, registry=registry)
    return run_headless(session, outputs, registry)


def run_headless(session, outputs, registry: Registry) -> int:
    """Drive a run in this thread with progress on stderr; signals end it through ``interrupts``."""
    from ..run.interrupts import HeadlessSignals

    printer = ProgressPrinter()
    with HeadlessSignals() as signals, printer.ticking():
        try:
            engine = session.open(printer)
        except KeyboardInterrupt as exc:
            session.ending.signum = getattr(exc, "signum", signal.SIGINT)
            return session.close(outputs, registry)
        try:
            signals.attach(engine)
            try:
                session.drive()
            finally:
                signals.detach()
            if signals.signum is not None:
                session.ending.signum = signals.signum  # the first signal says how the run ended
            if session.ending.wants_delivery():
                session.deliver(session.plan(), say=note)
            return session.close(outputs, registry)
        finally:
            session.release()


# --- check -------------------------------------------------------------------------------------
def read_candidate(path: Path) -> str:
    """A candidate is a .py file, or a saved model response holding a code block."""
    from ..engine.parsing import parse_response

    if not path.is_file():
        raise UsageError(f"{path}: no such candidate file", "pass a Python file that defines ModelNew")
    text = path.read_text(encoding="utf-8")
    try:
        ast.parse(text)
        return text
    except SyntaxError:
        parsed = parse_response(text)
        # Not Python: a saved response with a code block, or broken code for the checks to report.
        return parsed.code or text


def probe_and_evaluate(evaluator, task, source: str):
    """Probe the task and evaluate ``source``: submitted first, so that its build goes on while the
    probe makes the reference data (a cold build and a large task's probe take seconds each)."""
    future = evaluator.submit(source)
    task.probe = evaluator.probe()
    return future.result()


def cmd_check(args, registry: Registry) -> int:
    from ..results import Status
    from ..run.launch import resolve_device
    from ..task import load_task

    config = load_config(given_settings(args))
    task = load_task(args.reference, config.class_name)
    source = read_candidate(args.candidate)
    device = resolve_device(config)
    check = registry.check(source, device, language=config.language)
    result, facts = None, None
    if check.passed:
        evaluator = registry.make_evaluator(task, config.eval_settings(device))
        facts = evaluator.device_facts
        try:
            result = probe_and_evaluate(evaluator, task, source)
        finally:
            evaluator.close()
    status = result.status if result else Status.CHECK_FAILED
    reasons = [f"{v.rule}: {v.message}" for v in check.violations]
    if result is not None:
        if result.error:
            reasons.append(result.error)
        reasons.extend(result.flags)
    out = CheckRecord.of(status.value, result, reasons, tolerance=config.tolerance,
                         reference_tf32=config.reference_tf32, device_facts=facts)
    line = f"{status.value}"
    if out.correct:
        line += f": {fmt_speedup(out.speedup)} ({out.runtime_ms:.3f} ms vs {out.reference_ms:.3f} ms eager)"
    print(line)
    if result is not None and (roof := fmt_roofline(result.roofline)) is not None:
        print(f"  {roof}")
    if facts is not None and (peaks := facts.peaks_words()):
        print(f"  device: {facts.name}, in theory {peaks} ({facts.source})")
    if result is not None and (launched := fmt_launched(result.launched, result.speedup)) is not None:
        print(f"  {launched}")
    if result is not None and (at_signatures := fmt_signatures(result)) is not None:
        print(f"  {at_signatures}")
    if result is not None and result.memory is not None:
        print(f"  {fmt_memory(result.memory)}")
    for reason in reasons:
        print(f"  {reason.strip()}")
    if args.json_path:
        write_json(args.json_path, out)
    return ExitCode.OK if out.correct else ExitCode.NONE


# --- history / show ------------------------------------------------------------------------------
def cmd_history(args, registry: Registry) -> int:
    from ..history import gather
    from .bench_commands import benches_root

    root = args.run_dir or default_runs_root()
    if interactive(args) and not args.plain and not args.json_out:
        from ..tui import history_tui

        return history_tui(root, registry, benches_root(args))
    stored = gather(root, benches_root(args))
    record = stored.record()
    if args.json_out:
        print(to_json(record), end="")
        return ExitCode.OK
    if stored.empty:
        print(stored.nothing_words())
        return ExitCode.OK
    # BEST holds confirmed medians and turns' own numbers: each value says which it is.
    best = {info.run_id: marked_speedup(*best_of_run(info, records)) for info, records in stored.runs}
    blocks = [*(kind.lines(getattr(record, kind.json_field)) for kind in KINDS), run_lines(record.runs, best),
              damaged_lines(record.damaged)]
    print("\n\n".join("\n".join(lines) for lines in blocks if lines))
    return ExitCode.OK


def cmd_show(args) -> int:
    if args.ncu and args.turn is None:
        raise UsageError("--ncu profiles one turn's kernel", "name it with --turn N (and --trajectory T)")
    root = args.run_dir or default_runs_root()
    if args.run_dir is None and not any(root.glob(f"{args.run_id}*/run.json")):
        from ..bench import find_run_dir
        from .bench_commands import benches_root

        root = find_run_dir(args.run_id, benches_root(args)) or root  # a bench's task's run
    store = RunStore.open(root, args.run_id)
    info, records = store.info, store.records()
    if args.turn is None:
        print(f"run {info.run_id}  {effective_status(info, store.dir)}")
        print(f"task {info.task.path} ({info.task.class_name}) on {info.device} ({info.device_name})"
              + (", Triton kernels" if info.language == "triton" else ""))
        if info.device_facts is not None and (peaks := info.device_facts.peaks_words()):
            print(f"device in theory: {peaks} ({info.device_facts.source})")
        search = info.config.get("search", "independent")
        print(f"model {info.model} via {info.backend}; {info.trajectories} x {counted(info.turns, 'turn')}, {search} search")
        confirmed = confirmed_turns(info, records)
        # In the order they happened within each trajectory, cancelled generations included.
        for rec in sorted(store.all_records(), key=lambda r: (r.trajectory, r.turn, r.finished)):
            origin = f" (from t{prev[0]} turn {prev[1]})" if (prev := rec.previous()) and prev[0] != rec.trajectory else ""
            second = confirmed.get((rec.trajectory, rec.turn)) if rec.finished else None
            print(f"  [t{rec.trajectory} turn {rec.turn}]{origin} {turn_line(rec)}"
                  + (f"  -> {second_look(second)}" if second is not None else ""))
        winner = (info.best.trajectory, info.best.turn) if info.best else None
        if info.trajectories > 1 or any(r.parent_trajectory is not None for r in records):
            print("\ntrajectories (which turn continued which; * marks the winner's path):")
            print("\n".join(f"  {line}" for line in tree_lines(records, winner)))
        if info.confirmation is not None:
            print("\nconfirmed (verified again on fresh seeds, timed head to head):")
            for kernel in info.confirmation.kernels:
                print(f"  {confirmed_line(kernel)}")
        if info.best:
            print(f"best {best_words(info.best)}")
        if info.commit:
            print(f"commit {info.commit}")
        return ExitCode.OK
    rec = store.record(args.trajectory, args.turn)
    if rec is None:
        have = ", ".join(f"t{r.trajectory}/{r.turn}" for r in records) or "none"
        raise UsageError(f"run {info.run_id} has no turn {args.turn} in trajectory {args.trajectory}",
                         f"finished turns: {have}")
    if args.ncu:
        from ..run.nsight import profile_turn

        print(f"profiling trajectory {rec.trajectory} turn {rec.turn} with Nsight Compute ...", file=sys.stderr)
        print("\n".join(ncu_lines(profile_turn(store.dir, rec.trajectory, rec.turn))))
        return ExitCode.OK
    print(f"run {info.run_id}  trajectory {rec.trajectory}  turn {rec.turn}  status {rec.status.value}")
    if (prev := rec.previous()) is not None and prev[0] != rec.trajectory:
        print(f"continued trajectory {prev[0]} after its turn {prev[1]}")
    second = confirmed_turns(info, records).get((rec.trajectory, rec.turn))
    if rec.speedup is not None:
        print(f"speedup {fmt_speedup(rec.speedup)} (this turn's own measurement)")
        if rec.eval is not None and (roof := fmt_roofline(rec.eval.roofline)) is not None:
            print(roof)
    if second is not None:
        print(second_look(second))
    if times := stage_times(rec):
        print("time " + " · ".join(f"{name} {fmt_seconds(s)}" for name, s in times))
    if rec.status is not Status.CORRECT and not (rec.check and not rec.check.passed):
        print("\n## error\n" + turn_error(rec))
    print("\n## summary\n" + (rec.summary.strip() or "(none)"))
    print("\n## feedback\n" + rec.feedback.strip())
    if rec.check and not rec.check.passed:
        print("\n## static checks\n" + "\n".join(f"- {v.rule}: {v.message}" for v in rec.check.violations))
    if rec.eval and rec.eval.compile_log.strip() and rec.status is Status.COMPILE_ERROR:
        print("\n## compile log\n" + rec.eval.compile_log.strip()[-4000:])
    print("\n## kernel\n" + (rec.code.strip() or "(no code)"))
    if args.prompt:
        print("\n## prompt\n" + rec.prompt)
    if args.response:
        print("\n## response\n" + rec.response)
    return ExitCode.OK
