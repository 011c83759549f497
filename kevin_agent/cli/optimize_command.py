"""``kevin-opt optimize MODEL`` (and ``resume``/``show`` of an optimize): the headless front end of
``optimize.OptimizeSession``, its progress on stderr, ``--json`` the record, exit codes as a run's."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from ..config import given_settings, load_config
from ..console import note, write_json
from ..errors import ExitCode
from ..optimize import summary_lines
from ..registry import Registry
from ..results.optimize import GroupRun, OptimizeRecord
from ..store import OptimizeStore, default_runs_root, effective_optimize_status
from .progress import ProgressPrinter


def add_parser(sub, add_run_flags, registry, positive_int) -> None:
    from .model_commands import _fraction

    p = sub.add_parser("optimize", help="make a whole model faster: a kernel for each group worth one, one run "
                                        "each on one backend, all installed and measured together, one commit")
    p.add_argument("model_file", type=Path, metavar="MODEL", help="file with get_model() and get_inputs(), or a "
                   "KernelBench-format file (class Model, get_inputs, get_init_inputs)")
    plan = p.add_argument_group("the plan: which groups get a kernel")
    plan.add_argument("--modules", type=positive_int, default=None, metavar="N", help="at most N groups (default 4)")
    plan.add_argument("--min-saving", type=_fraction, default=None, metavar="F",
                      help="only groups that could save at least this part of the forward (default 0.02: about "
                           "what a whole model's timing moves when nothing changed)")
    plan.add_argument("--module", dest="named_modules", action="append", default=None, metavar="PATH",
                      help="give this module's group a kernel: a path as extract --module takes it (layers.0) or a "
                           "group's name as profile prints it (layers.*); repeat it for more groups. The plan is then "
                           "exactly the named groups, in the order named: the ranking, --modules and --min-saving do "
                           "not apply to them")
    plan.add_argument("--timeout", type=float, default=None, metavar="S",
                      help="wall-clock limit of each model worker (profile, extract, whole model), in seconds "
                           "(default 300)")
    p.add_argument("--plain", action="store_true", help="progress lines on stderr even on a terminal (as --headless); "
                   "on a terminal the model screen opens otherwise")
    add_run_flags(p, registry)


class OptimizeLines:
    """``protocols.OptimizeProgress`` on stderr: the plan, a line per group state, each run's turns."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self._said: dict[str, str] = {}

    def _say(self, text: str) -> None:
        note(text, self.stream)

    def planned(self, record: OptimizeRecord) -> None:
        for line in record.plan:
            print(line, file=self.stream, flush=True)

    def group_changed(self, record: OptimizeRecord, group: GroupRun) -> None:
        # A running group's run is named by the run's own first line (its id is known only once
        # it opens): "running turn 1/3" is said once, not again when the id arrives.
        named = group.run_id and group.state != "running"
        words = group.state_words() + (f" (run {group.run_id})" if named else "")
        if self._said.get(group.name) != words:
            self._said[group.name] = words
            index = record.groups.index(group) + 1
            self._say(f"[{index}/{len(record.groups)} {group.name}] {words}")

    def run_events(self, record: OptimizeRecord, group: GroupRun) -> ProgressPrinter:
        return ProgressPrinter(self.stream, turns=group.turns)

    def note(self, text: str) -> None:
        self._say(text)

    def combined(self, record: OptimizeRecord) -> None:
        from ..optimize.report import whole_model_lines

        for line in whole_model_lines(record):
            print(line, file=self.stream, flush=True)


def run_optimize(session, args) -> int:
    """On a terminal the model screen (``tui.optimize``), unless ``--plain``, ``--headless`` or
    ``--json`` (a summary for tools) ask for lines; else driven in this thread, signals aborting it
    resumably (``run.interrupts``)."""
    from ..console import interactive
    from ..run.interrupts import HeadlessSignals

    if interactive(args) and not getattr(args, "plain", False) and not getattr(args, "json_path", None):
        from ..tui.optimize import optimize_tui

        return optimize_tui(session)

    progress = OptimizeLines()
    record = session.record
    with HeadlessSignals() as signals:
        signals.attach(session)
        try:
            session.run(progress)
        except KeyboardInterrupt as exc:
            signals.signum = signals.signum or getattr(exc, "signum", signal.SIGINT)
        finally:
            signals.detach()
    for line in record.notes[-(3 if record.original else 2):] if record.status in ("delivered", "written") else []:
        note(line)
    if record.status == "interrupted" or signals.signum is not None:
        if signals.signum is not None:
            record.exit_code = ExitCode.for_signal(signals.signum)
            session.store.save()
        note(f"interrupted; finished module runs are kept. Continue with: kevin-opt resume {record.optimize_id}")
    elif record.status in ("nothing", "refused"):
        note(f"nothing delivered: {record.why}")
    if getattr(args, "json_path", None):
        write_json(args.json_path, record)
    return int(record.exit_code if record.exit_code is not None else ExitCode.NONE)


def cmd_optimize(args, registry: Registry) -> int:
    from ..model.choose import DEFAULT_MIN_SAVING, DEFAULT_MODULES
    from ..optimize import OptimizeSession

    model_dir = args.model_file.parent if args.model_file.parent.exists() else None
    config = load_config(given_settings(args), project_dir=model_dir)
    session = OptimizeSession.new(args.model_file, config, registry=registry,
                                  modules=args.modules or DEFAULT_MODULES,
                                  min_saving=DEFAULT_MIN_SAVING if args.min_saving is None else args.min_saving,
                                  named_modules=args.named_modules, replace=args.replace,
                                  accept_flagged=args.accept_flagged, timeout_s=args.timeout)
    note(f"optimize {session.record.optimize_id}: {args.model_file} on {session.config.device}")
    return run_optimize(session, args)


def cmd_resume_optimize(args, registry: Registry) -> int:
    from ..optimize import OptimizeSession, delivered_words

    stored = OptimizeStore.open(args.run_dir or default_runs_root(), args.run_id).record
    if (done := delivered_words(stored)) is not None:
        # Its kernels are in the model already: a second delivery would commit them again.
        note(f"optimize {stored.optimize_id} {done}; nothing to resume")
        return ExitCode.OK
    session = OptimizeSession.resumed(args.run_id, runs_root=args.run_dir, overrides=given_settings(args),
                                      registry=registry, replace=args.replace, accept_flagged=args.accept_flagged)
    done = [g.name for g in session.record.groups if g.finished]
    note(f"resuming optimize {session.record.optimize_id}" + (f"; kept: {', '.join(done)}" if done else ""))
    return run_optimize(session, args)


def cmd_show_optimize(args) -> int:
    store = OptimizeStore.open(args.run_dir or default_runs_root(), args.run_id)
    record = store.record
    record.status = effective_optimize_status(record, store.dir)
    print("\n".join(summary_lines(record)))
    if record.plan:
        print("\nthe plan:")
        print("\n".join(f"  {line}" for line in record.plan))
    for line in record.notes:
        print(line)
    return ExitCode.OK
