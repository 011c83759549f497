"""``kevin-opt optimize MODEL``: a whole model made faster in one sequence, the same for every front end:

    session = OptimizeSession.new(model, config, registry=...)   # or OptimizeSession.resumed(opt_id)
    record = session.run(progress)          # profile -> choose -> extract -> one run per group
                                            # -> the whole model with the kernels -> deliver once
    session.abort()                         # from a signal handler or another thread

Every group's run is a ``RunSession`` on one backend made once here (``open_backend``: Kevin
loaded once), its kernel written into the optimize's folder and never committed by the run. The
kernels that keep the whole model's outputs and speed are then delivered together in one commit
(``deliver``). The record (``results.optimize``) is saved after every change, so ``resumed`` keeps
the finished runs, resumes the interrupted one from its last finished turn, and runs the rest.
Nothing here prints: a front end hears everything through ``protocols.OptimizeProgress``.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from ..config import RunConfig, load_config
from ..errors import DeliveryRefused, ExitCode, KevinError
from ..events import TurnFinished
from ..model.choose import choose, plan_lines
from ..model.extract import default_task_path, extract_tasks
from ..model.marks import read_envelope
from ..model.modelfile import ModelFile, load_model_file
from ..model.profile import profile_model
from ..model.records import ModelProfile
from ..protocols import Backend, EventSink, OptimizeProgress
from ..registry import Registry, build_registry
from ..results.optimize import GroupRun, OptimizeRecord
from ..run.launch import keep_out_of_git, open_backend, resolve_device
from ..run.session import RunSession
from ..store import OptimizeStore, RunStore, default_runs_root, new_optimize_id, now_iso
from . import deliver as delivering

SECRET_SETTINGS = {"api_key"}


class OptimizeSession:
    """One optimize: its store (record and lock), the settings of its runs, the backend they share."""

    def __init__(self, store: OptimizeStore, config: RunConfig, registry: Registry, *, replace: bool = False,
                 accept_flagged: bool = False, timeout_s: float | None = None) -> None:
        self.store, self.config, self.registry = store, config, registry
        self.replace, self.accept_flagged, self.timeout_s = replace, accept_flagged, timeout_s
        self.backend: Backend | None = None
        self.consent: Callable[[OptimizeRecord, list[Path]], bool] | None = None
        """Asked, with the files it would write, before the delivery writes anything: the terminal UI
        asks the person (a run's rule); headless, the flags alone decide."""
        self._aborted = threading.Event()
        self._current: RunSession | None = None
        self._discard = False
        """The optimize is refused before its first run: its folder is removed as it closes."""

    @property
    def record(self) -> OptimizeRecord:
        return self.store.record

    # --- making one ------------------------------------------------------------------------------
    @classmethod
    def new(cls, model_path: Path, config: RunConfig, *, registry: Registry | None = None, modules: int,
            min_saving: float, named_modules: list[str] | None = None, replace: bool = False,
            accept_flagged: bool = False, timeout_s: float | None = None) -> OptimizeSession:
        """A new optimize of ``model_path``: the model file checked and its record made (and owned).
        ``named_modules`` (``--module``) are the plan's groups, in order, instead of the ranking's."""
        registry = registry or build_registry()
        registry.backend_factory(config.backend)  # a mistyped name fails before the profile
        model_file = load_model_file(model_path)
        # What the delivery would refuse of the model file and the report is known now: said before
        # the profile, and nothing recorded (the kernel modules' names wait for the plan).
        refused = delivering.refusals(model_file, [], replace=replace, commit=config.commit, branch=config.branch)
        if refused:
            raise DeliveryRefused("nothing written: " + "; ".join(refused),
                                  "the optimize did not start and nothing was recorded")
        config = config.model_copy(update={"device": resolve_device(config)})
        root = config.run_dir or default_runs_root(model_file.path.parent)
        keep_out_of_git(root)
        saved = {k: v for k, v in config.model_dump(mode="json").items() if k not in SECRET_SETTINGS}
        record = OptimizeRecord(optimize_id=new_optimize_id(model_file.path.stem), model_file=str(model_file.path),
                                created_at=now_iso(), device=config.device, config=saved, modules=modules,
                                min_saving=min_saving, named_modules=list(named_modules or []))
        root.mkdir(parents=True, exist_ok=True)
        return cls(OptimizeStore.create(root, record), config, registry, replace=replace,
                   accept_flagged=accept_flagged, timeout_s=timeout_s)

    @classmethod
    def resumed(cls, optimize_id: str, *, runs_root: Path | None = None, overrides: dict | None = None,
                registry: Registry | None = None, replace: bool = False, accept_flagged: bool = False,
                timeout_s: float | None = None) -> OptimizeSession:
        """A stored optimize, owned by this process (one a live process drives is refused, exit 2)."""
        store = OptimizeStore.open(runs_root or default_runs_root(), optimize_id)
        store.take()
        record = store.record
        given = {k: v for k, v in (overrides or {}).items() if v is not None}
        config = load_config({**{k: v for k, v in record.config.items() if k in RunConfig.model_fields}, **given})
        config = config.model_copy(update={"device": record.device, "run_dir": store.root})
        record.status, record.why, record.exit_code = "running", "", None
        store.save()
        return cls(store, config, registry or build_registry(), replace=replace, accept_flagged=accept_flagged,
                   timeout_s=timeout_s)

    # --- the sequence --------------------------------------------------------------------------------
    def abort(self) -> None:
        """End the optimize now, resumably: the running module run is aborted as a signal aborts a
        run, the worker in flight killed, and no further step starts. Safe from any thread."""
        from ..run.interrupts import kill_run_processes

        self._aborted.set()
        current = self._current
        if current is not None and current.engine is not None:
            current.engine.abort()
        else:
            kill_run_processes()

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

    def run(self, progress: OptimizeProgress) -> OptimizeRecord:
        """Carry the optimize out from where its record stands; ``record.exit_code`` says how it ended
        (an interrupt leaves it ``interrupted`` and resumable). User-facing errors propagate after the
        record says so."""
        record = self.record
        try:
            model_file = load_model_file(record.model_file)
            profile = self._profile(model_file, progress)
            if record.groups:
                progress.planned(record)  # resumed: the plan it carries on with
            elif not self._plan(profile, progress):
                return self._end("nothing", ExitCode.NONE, record.plan[0] if record.plan else "")
            refused = delivering.refusals(model_file, self._names(model_file), replace=self.replace,
                                          commit=self.config.commit, branch=self.config.branch)
            if refused:
                # Said as soon as the plan names the kernel modules, and nothing kept of it: no run
                # started, so there is nothing to resume (a resumed optimize keeps its record).
                self._discard = not any(g.run_id for g in record.groups)
                return self._end("refused", ExitCode.NONE, "nothing written: " + "; ".join(refused))
            self._extract(model_file, progress)
            for group in record.groups:
                if self.aborted:
                    break
                if not group.finished:
                    self._run_group(group, progress)
            if self.aborted:
                return self._end("interrupted", ExitCode.INTERRUPTED, "interrupted")
            if not any(g.state == "verified" or g.state == "kept" for g in record.groups):
                return self._end("nothing", ExitCode.NONE, "no group's run verified a kernel")
            outcome = delivering.combine_and_deliver(self, model_file, profile, progress)
            if self.aborted:
                return self._end("interrupted", ExitCode.INTERRUPTED, "interrupted")
            return outcome
        except KeyboardInterrupt:
            self._end("interrupted", ExitCode.INTERRUPTED, "interrupted")
            raise
        except KevinError as exc:
            if self.aborted:
                return self._end("interrupted", ExitCode.INTERRUPTED, "interrupted")
            self._end("failed", exc.exit_code, exc.message)
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Close the shared backend and give the optimize up."""
        backend, self.backend = self.backend, None
        try:
            if backend is not None:
                backend.close()
        finally:
            if self._discard:
                self.store.release()
                shutil.rmtree(self.store.dir, ignore_errors=True)
            else:
                self.store.save()
                self.store.release()

    def _end(self, status, code: int, why: str) -> OptimizeRecord:
        self.record.status, self.record.exit_code, self.record.why = status, int(code), why
        self.store.save()
        return self.record

    def save(self, progress: OptimizeProgress | None = None, group: GroupRun | None = None) -> None:
        self.store.save()
        if progress is not None and group is not None:
            progress.group_changed(self.record, group)

    # --- profile, plan, tasks ----------------------------------------------------------------------
    def settings(self):
        return self.config.eval_settings(self.config.device)

    def _profile(self, model_file: ModelFile, progress: OptimizeProgress) -> ModelProfile:
        path = self.store.profile_path
        if path.is_file():
            return ModelProfile.model_validate_json(path.read_text(encoding="utf-8"))
        progress.note(f"profiling {model_file.given} on {self.config.device} (a worker: warm-up, then the profiler)")
        profile = profile_model(model_file, self.settings(), timeout_s=self.timeout_s, on_note=progress.note)
        path.write_text(profile.model_dump_json(indent=2, by_alias=True) + "\n", encoding="utf-8")
        self.record.device_name, self.record.forward_ms = profile.device_name, profile.forward_ms
        self.store.save()
        return profile

    def _plan(self, profile: ModelProfile, progress: OptimizeProgress) -> bool:
        try:
            plan = choose(profile, modules=self.record.modules, min_saving=self.record.min_saving,
                          named_modules=self.record.named_modules)
        except KevinError:
            # A module named that no plan can hold: said once the profile knows the groups, and
            # nothing kept, as a refused delivery's plan is (no run started: nothing to resume).
            self._discard = True
            raise
        self.record.plan = plan_lines(plan)
        self.record.groups = [GroupRun(name=g.name, members=g.members, class_name=g.class_name, share=g.share,
                                       own_saving=g.own_saving, turns=self.config.turns) for g in plan.chosen]
        self.store.save()
        progress.planned(self.record)
        return bool(plan.chosen)

    def _names(self, model_file: ModelFile) -> list[Path]:
        """The kernel modules the groups would deliver, beside the model."""
        return [model_file.path.parent / f"{default_task_path(model_file, g.members).stem}_kevin.py"
                for g in self.record.groups]

    def _extract(self, model_file: ModelFile, progress: OptimizeProgress) -> None:
        """Each queued group's task, all from one worker, into the optimize's folder; a group that
        cannot be captured is skipped with the reason."""
        todo = [g for g in self.record.groups if g.task_file is None and not g.finished]
        if not todo:
            return
        for g in todo:
            g.state = "extracting"
            self.save(progress, g)
        progress.note(f"extracting {len(todo)} task{'s' if len(todo) != 1 else ''} from {model_file.given}, "
                      "each checked against every member")
        captured = extract_tasks(model_file, [g.members[0] for g in todo], self.settings(), timeout_s=self.timeout_s)
        for g, task in zip(todo, captured):
            if task.error:
                g.state, g.why = "skipped", f"cannot be captured as a task: {task.error}"
            else:
                # named for the members the plan installs it at (a group narrowed around a named one
                # is checked against all its alike modules, but delivered at its own)
                kept = [m for m in (task.members or g.members) if m in g.members] or task.members or g.members
                target = self.store.tasks / default_task_path(model_file, kept).name
                target.write_text(task.source, encoding="utf-8")
                g.task_file, g.state = str(target), "queued"
            self.save(progress, g)

    # --- one group's run -------------------------------------------------------------------------
    def _backend(self) -> Backend:
        if self.backend is None:
            self.backend = open_backend(self.config, self.registry)
        return self.backend

    def _run_group(self, group: GroupRun, progress: OptimizeProgress) -> None:
        """The group's run on the shared backend (new, or its stored one resumed), delivered into the
        optimize's folder: the run writes its kernel module there and commits nothing."""
        task = Path(group.task_file)
        names = [task.stem, *group.members, group.class_name]
        delivery = dict(replace=True, accept_flagged=self.accept_flagged)
        backend = self._backend()
        if group.run_id is not None and (self.store.root / group.run_id).is_dir():
            store = RunStore.open(self.store.root, group.run_id)
            store.take()
            overrides = {"turns": self.config.turns, "commit": False, "e2e": False}
            session = RunSession.resumed(store, overrides=overrides, registry=self.registry, backend=backend,
                                         names=names, **delivery)
        else:
            config = self.config.model_copy(update={"commit": False, "e2e": False, "out": None, "branch": None,
                                                    "run_dir": self.store.root})
            session = RunSession.new(config, task, registry=self.registry, backend=backend, names=names, **delivery)
        group.state, group.why = "running", ""
        self.save(progress, group)
        self._current = session
        try:
            engine = session.open(_GroupSink(self, group, progress))
            group.run_id, group.turns = engine.store.info.run_id, engine.config.turns
            group.turn = len(engine.store.records())
            self.save(progress, group)
            if self.aborted:
                engine.abort()
            ending = session.drive()
            if ending.interrupted or self.aborted:
                group.state = "running"  # resumed from its last finished turn
                return
            if ending.error is not None:
                if ending.error.exit_code == ExitCode.ENVIRONMENT:
                    raise ending.error
                group.state, group.why = "failed", ending.error.message
                return
            if not ending.wants_delivery():
                group.state, group.why = "no kernel", f"the run ended {ending.outcome.reason}"
                return
            plan = session.plan()
            done = session.deliver(plan)
            if done.kernel_path is None or not done.written:
                group.state, group.why = "no kernel", plan.why_not_written() or plan.nothing or "nothing delivered"
                return
            claim = plan.kernel
            group.state, group.kernel_file = "verified", str(done.kernel_path)
            group.speedup = claim.confirmation.speedup_median if claim.confirmation else claim.speedup
            group.confirmation = claim.confirmation
            env = read_envelope(done.kernel_path)
            group.signatures = list(env.signatures) if env is not None else []
        except KevinError as exc:
            if self.aborted:
                group.state = "running"
                return
            if exc.exit_code == ExitCode.ENVIRONMENT:
                raise
            group.state, group.why = "failed", exc.message
        finally:
            self._current = None
            session.release()
            self.save(progress, group)


class _GroupSink:
    """A group's run's events: passed to the front end's sink, the group's turn count kept."""

    def __init__(self, optimize: OptimizeSession, group: GroupRun, progress: OptimizeProgress) -> None:
        self.optimize, self.group, self.progress = optimize, group, progress
        self.inner: EventSink = progress.run_events(optimize.record, group)

    def emit(self, event) -> None:
        self.inner.emit(event)
        if isinstance(event, TurnFinished):
            self.group.turn = max(self.group.turn, event.record.turn)
            self.optimize.save(self.progress, self.group)
