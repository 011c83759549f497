"""Many tasks: ``kevin-opt bench PATH...`` runs task files with one run's settings, nothing
delivered, and writes the paper's table over them (``docs/bench.md``).

    bench = Bench.new(paths, overrides, registry, root=..., ray=None)   # or Bench.resumed(bench_id, ...)
    code = bench.drive(sink, signals)                                   # every pending task; the table

``tasks`` finds the task files, ``store`` keeps the bench's folder, ``one_task`` runs one task
(the same here and in a Ray task), ``local`` runs them in turn on one backend, ``on_ray`` spreads
them over a Ray cluster, ``table`` writes the table in every form.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ..config import RunConfig, load_config
from ..errors import ConfigError, ExitCode
from ..protocols import BenchSink, KnowsItsCapacity, Replaying
from ..registry import Registry
from ..run.interrupts import HeadlessSignals
from .driver import bench_settings, device_name_of, new_bench
from .store import BenchStore, default_benches_root, find_run_dir, list_benches
from .table import build_table, render_markdown, write_table
from .tasks import find_tasks

__all__ = ["Bench", "BenchStore", "build_table", "default_benches_root", "find_run_dir", "find_tasks",
           "list_benches", "render_markdown"]


def _settled(config: RunConfig, backend) -> RunConfig:
    """Trajectories not given: the paper's 16 for a model served elsewhere; what fits (up to 16) for
    an engine that knows its capacity, and 1 for replayed scripts, as a run decides them."""
    from ..backends.capacity import PAPER_TRAJECTORIES, default_trajectories

    if config.trajectories is not None:
        return config
    if isinstance(backend, KnowsItsCapacity):
        trajectories = default_trajectories(backend.sequences_that_fit)
    elif isinstance(backend, Replaying):
        trajectories = 1
    else:
        trajectories = PAPER_TRAJECTORIES
    return config.model_copy(update={"trajectories": trajectories})


class Bench:
    """A bench being driven by this process: its store, its settings, where its tasks run."""

    def __init__(self, store: BenchStore, config: RunConfig, registry: Registry, ray, backend) -> None:
        """``backend``: made and checked once; the tasks on this machine share it (on Ray each task
        opens its own, and this one only checked that the endpoint answers)."""
        self.store, self.config, self.registry, self.ray = store, config, registry, ray
        self._backend = backend

    @classmethod
    def new(cls, paths: Sequence[Path], overrides: dict, registry: Registry, *, root: Path, ray=None) -> Bench:
        """Tasks found (exit 2 when none), the cluster and the backend checked (exit 3), then the
        bench's folder made; nothing runs yet."""
        from ..run.launch import check_scripts, keep_out_of_git, resolve_device

        config = load_config(overrides)
        config = config.model_copy(update={"device": resolve_device(config)})
        # Bad paths, and scripts missing or short, are refused before anything connects.
        check_scripts(config, [(Path(t.path), [Path(t.path).stem]) for t in find_tasks(paths)])
        if ray is not None:
            ray.connect()
        backend = cls._check_backend(config, registry, ray)
        try:
            config = _settled(config, backend)
            store = new_bench(paths, config, bench_settings({**overrides, "device": config.device,
                                                             "trajectories": config.trajectories}),
                              root, where=ray.where if ray is not None else "local", model=backend.model)
            if ".kevin" in store.dir.resolve().parts:
                keep_out_of_git(store.dir)  # as a run's .kevin/runs: git status never shows the bench
        except BaseException:
            backend.close()
            raise
        return cls(store, config, registry, ray, backend)

    @classmethod
    def resumed(cls, bench_id: str, registry: Registry, *, root: Path, ray=None) -> Bench:
        """A stored bench, taken by this process (refused while another drives it), to run the tasks it
        has no result for; an interrupted task's run goes on from its last finished turn."""
        store = BenchStore.open(root, bench_id)
        store.take()
        try:
            config = load_config(dict(store.info.settings))
            if ray is not None:
                ray.connect()
            backend = cls._check_backend(config, registry, ray)
            store.update_info(where=ray.where if ray is not None else "local")
        except BaseException:
            store.release()
            raise
        return cls(store, config, registry, ray, backend)

    @staticmethod
    def _check_backend(config: RunConfig, registry: Registry, ray):
        """The backend, made and checked once (an endpoint that does not answer is exit 3 here,
        before any task starts). On Ray each task opens its own; this one only checks."""
        from ..run.launch import open_backend

        if ray is not None and config.backend not in registry.replaying and config.backend != "openai":
            raise ConfigError(f"--ray serves the model from one OpenAI-compatible endpoint or replays scripts; "
                              f"the {config.backend} backend is not spread over a cluster yet",
                              "serve the model with `vllm serve ... --data-parallel-size N` and pass "
                              "--backend openai --base-url URL (docs/bench.md says why)")
        return open_backend(config, registry)

    def drive(self, sink: BenchSink, signals: HeadlessSignals) -> int:
        """Run every pending task, rewrite the table, say in bench.json how it ended; the exit code."""
        store = self.store
        started = time.monotonic()
        done = len(store.results())
        sink.bench_started(store.info.bench_id, store.dir, len(store.info.tasks), done, store.info.where)
        if not done:
            for path, why in store.info.skipped.items():
                sink.note(f"skipped {path}: {why}")
        store.update_info(status="running")
        finished = False
        try:
            if self.ray is not None:
                signals.detach()  # a signal is heard between two waits, not raised inside Ray's calls
                finished = self.ray.run(store, self.config, sink, signals,
                                        replaying=self.config.backend in self.registry.replaying)
            else:
                from .local import run_local

                finished = run_local(store, self.config, self._backend, self.registry, sink, signals)
        finally:
            self._backend.close()
            if self.ray is not None:
                self.ray.close()
            status = "completed" if finished and not store.pending() else "interrupted"
            store.update_info(status=status, wall_s=store.info.wall_s + time.monotonic() - started)
            store.release()
            write_table(store, device_name=device_name_of(store))
        if signals.signum is not None:
            return ExitCode.for_signal(signals.signum)
        if not finished:
            return ExitCode.INTERRUPTED
        return ExitCode.NONE if none_ran(store) else ExitCode.OK


def none_ran(store: BenchStore) -> bool:
    """Every task has a row and each is a failure (no task's run got going): the bench measured nothing."""
    results = store.results()
    return bool(results) and not store.pending() and all(r.status == "failed" for r in results.values())
