"""The model worker: ``python -m kevin_agent.model.worker.main JOB.json``.

Started by ``model.process`` as the evaluation's workers are (its own session, a scrubbed
environment, a reply file). Modes: ``profile`` (``profiling``), ``extract`` (``capture``), ``e2e``
(``whole_model``: the whole model timed, with or without kernels installed, its outputs written or
compared).
"""

from __future__ import annotations

import time

import torch

from ...evaluate.plausibility import bandwidth
from ...evaluate.worker.candidate import device_name, versions
from ...evaluate.worker.main import Parent, finish, start
from ...evaluate.worker.taskcode import describe
from ...evaluate.worker.timing import Timer
from ..groups import in_model_order, same_computation
from ..jobs import ModelJob, ModelReply
from ..records import ModelProfile
from . import capture, profiling, whole_model
from .identity import identity
from .loading import (
    LoadedModel,
    ModelProblem,
    build_model,
    forward,
    import_model_file,
    load,
)
from .source import ConstructorLog


def _timed_forward_ms(loaded: LoadedModel, settings) -> float:
    timer = Timer(settings.device)
    return timer.time(loaded.model, loaded.inputs, warmup=settings.warmup_runs, runs=settings.timed_runs).median_ms


def do_profile(job: ModelJob, parent: Parent) -> ModelReply:
    s = job.settings
    loaded = load(s, job.model_path)
    parent.say("recording")
    recorded = profiling.record_calls(loaded)
    for _ in range(s.warmup_runs):
        forward(loaded)
    parent.say("profiling")
    paths, stats = profiling.profile_calls(loaded, job.forwards, s.device)
    modules = profiling.module_profiles(loaded, recorded, paths, stats, job.forwards)
    parent.say("timing")
    forward_ms = _timed_forward_ms(loaded, s)
    measured = Timer(s.device).bandwidth_bytes_per_ms() if s.bandwidth_gb_s is None else 0.0
    profile = ModelProfile(
        model_file=job.model_path, device=s.device, device_name=device_name(s.device), forward_ms=forward_ms,
        profiled_forward_ms=modules[0].time_ms if modules else 0.0, forwards=job.forwards,
        bandwidth_gb_s=bandwidth(measured, s.bandwidth_gb_s) / 1e6,
        bandwidth_source="measured" if s.bandwidth_gb_s is None else "given",
        cpu_threads=torch.get_num_threads() if s.device == "cpu" else None, versions=versions(), modules=modules)
    return ModelReply(ok=True, profile=profile, device_name=profile.device_name, versions=profile.versions)


def do_extract(job: ModelJob, parent: Parent) -> ModelReply:
    s = job.settings
    if s.device == "cuda" and not torch.cuda.is_available():
        raise ModelProblem("environment", "no CUDA GPU is visible to torch", "pass --device cpu")
    module = import_model_file(job.model_path)
    log = ConstructorLog(module)
    try:
        loaded = build_model(module, job.model_path, s)
    finally:
        log.restore()
    have = dict(loaded.model.named_modules())
    missing = [p for p in job.modules if p not in have]
    if missing:
        raise ModelProblem("module", f"the model has no module {missing[0]!r}", paths=list(have))
    # Every instance of an asked module's class is recorded: those that compute the same thing at
    # the same signatures are its group, and the group's task is checked against each of them.
    alike = {path: [p for p, m in have.items() if p and type(m) is type(have[path])] or [path]
             for path in job.modules}
    parent.say("recording")
    calls = capture.record_module(loaded, list(dict.fromkeys(p for paths in alike.values() for p in paths)))
    key = {p: same_computation(identity(have[p]), calls[p].signatures) for paths in alike.values() for p in paths}
    tasks = []
    for path in job.modules:
        members = [p for p in alike[path] if p == path or (key[path] is not None and key[p] == key[path])]
        parent.say(f"capturing {path}" + (f" and the {len(members) - 1} modules like it" if len(members) > 1 else ""))
        tasks.append(capture.capture(loaded, path, in_model_order(members), calls, job.model_file_name, s.seed))
    return ModelReply(ok=True, tasks=tasks, device_name=device_name(s.device), versions=versions())


def do_e2e(job: ModelJob, parent: Parent) -> ModelReply:
    return ModelReply(ok=True, e2e=whole_model.run(job, parent), device_name=device_name(job.settings.device),
                      versions=versions())


MODES = {"profile": do_profile, "extract": do_extract, "e2e": do_e2e}


def main(argv: list[str] | None = None) -> None:
    job, parent = start(ModelJob, argv)
    started = time.monotonic()
    try:
        reply = MODES[job.mode](job, parent)
    except ModelProblem as exc:
        reply = ModelReply(ok=False, error_kind=exc.kind, error=exc.message, hint=exc.hint, paths=exc.paths)
    except BaseException as exc:
        reply = ModelReply(ok=False, error_kind="model", error=describe(exc, job.model_path))
    if reply.profile is not None:
        reply.profile.wall_s = round(time.monotonic() - started, 3)
    finish(job, parent, reply)  # the person's atexit hooks and extension destructors are not ours to wait for


if __name__ == "__main__":
    main()
