"""Opening a run, new or resumed: the one place that wires task, evaluator, backend and store
into an ``Engine``.

The order matters for the person's time: the task is loaded and probed (cheap, and the usual
source of mistakes) before the backend is created (which may load a 32B model).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..config import RunConfig, load_config
from ..delivery import gitops
from ..engine.loop import Engine
from ..errors import ConfigError, TaskError
from ..events import Notice
from ..gpus import detect_gpus, eval_worker_env, plan_gpus
from ..protocols import Backend, ChecksFirst, EventSink, KnowsItsCapacity, Replaying
from ..registry import Registry, build_registry
from ..results import RunInfo, TaskRef
from ..store import RunStore, default_runs_root, new_run_id, now_iso
from ..task import Task, load_task


def resolve_device(config: RunConfig) -> str:
    if config.device:
        return config.device
    from ..evaluate import detect_device

    return detect_device()


def _placement(config: RunConfig):
    """Where the kernels run, whether their timing may overlap generation, and, with several GPUs,
    the layout in words for the run's first line; an impossible --eval-gpu is refused here, before
    anything starts."""
    gpus = detect_gpus() if config.device == "cuda" else []
    plan = plan_gpus(config, gpus)
    settings = config.eval_settings()
    if config.device == "cuda" and gpus:
        settings = settings.model_copy(update={"visible_devices": eval_worker_env(plan, gpus)["CUDA_VISIBLE_DEVICES"]})
    if config.device == "cuda" and config.backend == "vllm" and plan.eval_gpu in plan.model_gpus:
        # The probe runs before the model is loaded: the model's share is not free then, but will be gone.
        settings = settings.model_copy(update={"model_memory_fraction": config.gpu_memory_utilization})
    said = plan.why if len(gpus) >= 2 and config.backend == "vllm" else ""
    return settings, plan.overlaps, said


def _probe_and_connect(registry: Registry, task: Task, config: RunConfig, settings, *, backend: Backend | None,
                       names: Sequence[str] = (), skip: int = 0, on_probed=None):
    """Evaluator first (the task is probed, cheap and the usual source of mistakes), then the
    backend (which may load a 32B model), unless the run was given one; nothing the run made is
    left running if either fails. A backend that replays scripts is cued for this task: its
    script (``names``, else the task file's stem), from the responses a resumed run used on."""
    evaluator = registry.make_evaluator(task, settings)
    given = backend is not None
    try:
        task.probe = evaluator.probe()
        if on_probed is not None:
            on_probed(evaluator)
        if backend is None:
            backend = registry.make_backend(config, skip=skip)
    except BaseException:
        evaluator.close()
        raise
    try:
        if not given and isinstance(backend, ChecksFirst):
            backend.check()
        if isinstance(backend, Replaying):
            backend.cue(script_names(names, task.path, config.device), skip)
        elif given and config.backend in registry.replaying:
            raise ConfigError(f"the {config.backend} backend replays one run's responses and cannot serve "
                              "several runs", "give it a cue(names, skip) method (see protocols.Replaying)")
    except BaseException:
        evaluator.close()
        if not given:
            backend.close()
        raise
    return evaluator, backend


def script_names(names: Sequence[str], task_path: Path, device: str | None) -> list[str]:
    """What a folder of scripts may file a task's under: each of ``names`` (else the task file's
    stem), then the same with the device (``rmsnorm.cpu``, as the examples name theirs)."""
    base = list(names) or [Path(task_path).stem]
    return base + [f"{name}.{device}" for name in base if device]


def check_scripts(config: RunConfig, tasks: Sequence[tuple[Path, Sequence[str]]]) -> None:
    """With replayed scripts, each task's (its file, the names its script may be filed under) is
    there and answers every turn asked for, checked before anything starts; one ``UsageError`` that
    names every task whose script is missing or short."""
    if config.backend != "scripted" or config.responses is None:
        return
    from ..backends.scripted import check_script
    from ..errors import UsageError

    problems: list[UsageError] = []
    for task_path, names in tasks:
        try:
            check_script(config.responses, script_names(names, task_path, config.device), turns=config.turns,
                         trajectories=config.trajectories or 1)
        except UsageError as exc:
            problems.append(exc)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise UsageError(f"{len(problems)} tasks cannot be answered from --responses {config.responses}:\n"
                         + "\n".join(f"  {p.message}" for p in problems),
                         "add the scripts (or responses) they lack, lower --turns, or leave those tasks out")


def open_backend(config: RunConfig, registry: Registry | None = None) -> Backend:
    """One backend for many runs (a model's modules, a bench's tasks: Kevin loaded once), checked
    once; each run is given it and leaves it open: closing it is the caller's."""
    registry = registry or build_registry()
    backend = registry.make_backend(config)
    try:
        if isinstance(backend, ChecksFirst):
            backend.check()
    except BaseException:
        backend.close()
        raise
    return backend


def keep_out_of_git(runs_root: Path) -> None:
    """The default run store sits in the person's repository; ``git status`` never shows it."""
    with gitops.opened(runs_root) as repo:
        if repo is None or repo.bare:
            return
        try:
            gitops.ensure_excluded(repo)
        except (OSError, gitops.git.GitCommandError):
            pass  # only cosmetic: the run goes on


def _say_refusals_ahead(task: Task, config: RunConfig, evaluator, sink: EventSink, replace: bool) -> None:
    """What the delivery at the end would refuse, said before the first turn."""
    from ..delivery import refusals_ahead

    for text in refusals_ahead(task, config, device=config.device, device_name=evaluator.device_name,
                               replace=replace):
        sink.emit(Notice(level="warning", topic="delivery", message=text))


def start_run(config: RunConfig, task_file: Path, sink: EventSink, *, registry: Registry | None = None,
              backend: Backend | None = None, names: Sequence[str] = (), replace: bool = False) -> Engine:
    """A new run, ready to go. ``backend``: one given to many runs (``open_backend``), used and
    left open; without it the run makes its own and closes it. ``names``: what a ``--responses``
    folder files the task's script under. ``replace``: --replace was given (the delivery may
    overwrite what git could not restore)."""
    registry = registry or build_registry()
    # A mistyped name fails before anything is loaded.
    registry.backend_factory(config.backend)
    registry.search_factory(config.search)
    if config.device:
        registry.device_factory(config.device)
    task = load_task(task_file, config.class_name)
    config = config.model_copy(update={"device": resolve_device(config)})
    check_scripts(config, [(task.path, names)])
    settings, overlaps, layout = _placement(config)
    owned = backend is None
    evaluator, backend = _probe_and_connect(registry, task, config, settings, backend=backend, names=names)
    _say_refusals_ahead(task, config, evaluator, sink, replace)
    config, note = _settle_trajectories(config, backend)
    if layout:
        note = f"{layout}; {note}"
    root = config.run_dir or default_runs_root(task.path.parent)
    info = RunInfo(
        run_id=new_run_id(task.name), created_at=now_iso(),
        task=TaskRef(path=str(task.path), name=task.name, class_name=task.class_name, digest=task.digest),
        device=config.device, device_name=evaluator.device_name, device_facts=evaluator.device_facts,
        backend=config.backend, model=backend.model,
        turns=config.turns, trajectories=config.trajectories, config=config.public_dict(),
        versions={"kevin-opt": __version__, "python": platform.python_version(), **evaluator.versions()},
    )
    try:
        root.mkdir(parents=True, exist_ok=True)
        store = RunStore.create(root, info)
    except OSError as exc:
        evaluator.close()
        if owned:
            backend.close()
        raise ConfigError(f"cannot create the run directory under {root} ({exc.strerror})",
                          "pass a writable --run-dir") from None
    if config.run_dir is None:
        keep_out_of_git(root)
    return Engine(task=task, config=config, backend=backend, evaluator=evaluator, store=store, sink=sink,
                  check=registry.check, search=registry.make_search(config), start_note=note,
                  overlap_generation=overlaps, owns_backend=owned)


def _settle_trajectories(config: RunConfig, backend) -> tuple[RunConfig, str]:
    """Trajectories not given: as many as the backend serves without preemption (the vllm
    backend knows its KV cache once started), up to the paper's 16. Also the first line's note."""
    from ..backends.capacity import (
        default_trajectories,
        model_shape,
        room_flags,
        sequences_with_fp8_weights,
        trajectories_note,
    )

    fit = backend.sequences_that_fit if isinstance(backend, KnowsItsCapacity) else None
    chosen = config.trajectories is None
    trajectories = default_trajectories(fit) if chosen else config.trajectories
    with_fp8 = None
    if fit is not None and config.quantization != "fp8" and (shape := model_shape(config.model)) is not None:
        with_fp8 = sequences_with_fp8_weights(shape, fit, context_tokens=config.context_tokens,
                                              kv_cache_dtype=config.kv_cache_dtype)
    note = trajectories_note(trajectories, config.turns, sequences_that_fit=fit,
                             context_tokens=config.context_tokens, chosen=chosen,
                             room=room_flags(config.kv_cache_dtype, config.quantization), with_fp8_weights=with_fp8)
    if fit is not None:  # an engine of its own: say what it serves with
        weights = "fp8 weights" if config.quantization == "fp8" else "bf16 weights"
        note = f"{weights}, {'fp8' if config.kv_cache_dtype == 'fp8' else 'bf16'} KV cache; {note}"
    return config.model_copy(update={"trajectories": trajectories}), note


def take_run(run_id: str, runs_root: Path | None = None) -> RunStore:
    """The stored run, owned by this process: one driven by a live process is refused
    (``RunLocked``, exit 2) before anything is loaded."""
    store = RunStore.open(runs_root or default_runs_root(), run_id)
    store.take()
    return store


def resume_run(run: str | RunStore, sink: EventSink, *, runs_root: Path | None = None,
               overrides: dict | None = None, registry: Registry | None = None, backend: Backend | None = None,
               names: Sequence[str] = (), replace: bool = False) -> Engine:
    """Continue a stored run (a run id, or a store ``take_run`` gave); ``backend`` and ``names``
    as for ``start_run``. If it cannot be continued, the run is given up again."""
    registry = registry or build_registry()
    store = run if isinstance(run, RunStore) else take_run(run, runs_root)
    try:
        return _resume(store, sink, overrides, registry, replace, backend, names)
    except BaseException:
        store.release()
        raise


def _resume(store: RunStore, sink: EventSink, overrides: dict | None, registry: Registry, replace: bool,
            backend: Backend | None, names: Sequence[str]) -> Engine:
    info = store.info
    saved = {k: v for k, v in info.config.items() if k in RunConfig.model_fields and k != "api_key"}
    config = load_config({**saved, **{k: v for k, v in (overrides or {}).items() if v is not None}})
    config = config.model_copy(update={"device": info.device, "language": info.language})
    task_path = Path(info.task.path)
    try:
        task = load_task(task_path, info.task.class_name)
    except TaskError as exc:
        raise TaskError(f"cannot resume {info.run_id}: {exc.message}", exc.hint) from None
    if task.digest != info.task.digest:
        sink.emit(Notice(level="warning", message=f"{task_path} changed since run {info.run_id} started; "
                                                   "the reference is the file as it is now"))
    if config.turns != info.turns:
        store.update_info(turns=config.turns)

    def warn_if_moved(evaluator) -> None:
        if evaluator.device_name and info.device_name and evaluator.device_name != info.device_name:
            sink.emit(Notice(level="warning", message=f"this run started on {info.device_name} and resumes "
                                                       f"on {evaluator.device_name}; speedups are not comparable"))

    settings, overlaps, _ = _placement(config)
    owned = backend is None
    # Every response the run used, cancelled ones too, is skipped by a backend that replays them.
    evaluator, backend = _probe_and_connect(registry, task, config, settings, backend=backend, names=names,
                                            skip=len(store.all_records()), on_probed=warn_if_moved)
    _say_refusals_ahead(task, config, evaluator, sink, replace)
    return Engine(task=task, config=config, backend=backend, evaluator=evaluator, store=store, sink=sink,
                  check=registry.check, search=registry.make_search(config), overlap_generation=overlaps,
                  owns_backend=owned)
