"""The model worker: ``python -m kevin_agent.model.worker.main JOB.json``.

Started by ``model.process`` as every worker is (``workers``: its own session, a scrubbed
environment, a reply file). Modes: ``profile`` (``profiling``), ``extract`` (``capture``), ``e2e``
(``whole_model``: the whole model timed, with or without kernels installed, its outputs written or
compared).
"""

from __future__ import annotations

import os
import time

import torch

from ...evaluate.plausibility import bandwidth
from ...evaluate.worker import FLOP_DTYPES, Timer, describe, device_name, flop_dtype, versions
from ...workers import Parent, serve
from ..groups import in_model_order, same_computation
from ..jobs import ModelJob, ModelReply
from ..records import ModelProfile
from . import capture, profiling, whole_model
from .identity import Reads, identity
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
    return timer.time(loaded.call, [], warmup=settings.warmup_runs, runs=settings.timed_runs).median_ms


def do_profile(job: ModelJob, parent: Parent) -> ModelReply:
    s = job.settings
    loaded = load(s, job.model_path)
    parent.note("recording")
    recorded = profiling.record_calls(loaded)
    for _ in range(s.warmup_runs):
        forward(loaded)
    parent.note("profiling")
    paths, stats = profiling.profile_calls(loaded, job.forwards, s.device)
    modules = profiling.module_profiles(loaded, recorded, paths, stats, job.forwards)
    parent.note("timing")
    forward_ms = _timed_forward_ms(loaded, s)
    measured = Timer(s.device).bandwidth_bytes_per_ms() if s.bandwidth_gb_s is None else 0.0
    flops = profiling.module_flops(loaded)
    dtype = flop_dtype(loaded.tensors(), s.device)
    rate = Timer(s.device).flop_rate_per_ms(FLOP_DTYPES[dtype]) if dtype and any(flops.values()) else None
    modules = [m.model_copy(update={"flops": flops.get(m.path, 0.0)}) for m in modules]
    profile = ModelProfile(
        model_file=job.model_path, device=s.device, device_name=device_name(s.device), forward_ms=forward_ms,
        profiled_forward_ms=modules[0].time_ms if modules else 0.0, forwards=job.forwards,
        bandwidth_gb_s=bandwidth(measured, s.bandwidth_gb_s) / 1e6,
        bandwidth_source="measured" if s.bandwidth_gb_s is None else "given",
        flop_rate_tflop_s=rate / 1e9 if rate else None, flop_dtype=dtype if rate else "",
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
    parent.note("recording")
    with Reads(loaded.model) as reads:
        calls = capture.record_module(loaded, list(dict.fromkeys(p for paths in alike.values() for p in paths)))
    key = {p: same_computation(identity(have[p], reads), calls[p].signatures) for paths in alike.values() for p in paths}
    tasks = []
    for path in job.modules:
        members = [p for p in alike[path] if p == path or (key[path] is not None and key[p] == key[path])]
        parent.note(f"capturing {path}" + (f" and the {len(members) - 1} modules like it" if len(members) > 1 else ""))
        tasks.append(capture.capture(loaded, path, in_model_order(members), calls, job.model_file_name, s.seed))
    return ModelReply(ok=True, tasks=tasks, device_name=device_name(s.device), versions=versions())


def do_e2e(job: ModelJob, parent: Parent) -> ModelReply:
    return ModelReply(ok=True, e2e=whole_model.run(job, parent), device_name=device_name(job.settings.device),
                      versions=versions())


MODES = {"profile": do_profile, "extract": do_extract, "e2e": do_e2e}


def work(job: ModelJob, parent: Parent) -> ModelReply:
    started = time.monotonic()
    try:
        reply = MODES[job.mode](job, parent)
    except ModelProblem as exc:
        return ModelReply(ok=False, error_kind=exc.kind, error=exc.message, hint=exc.hint, paths=exc.paths)
    except Exception as exc:
        # The person's code runs only inside ``loading``'s calls, which say what failed there as a
        # ModelProblem: anything else raised here is kevin-opt's own machinery failing.
        return ModelReply(ok=False, error_kind="internal", error=internal_error(job.mode, exc))
    if reply.profile is not None:
        reply.profile.wall_s = round(time.monotonic() - started, 3)
    return reply


def internal_error(mode: str, exc: BaseException) -> str:
    import traceback

    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" (at {os.path.basename(where.filename)}:{where.lineno})" if where else ""
    return f"kevin-opt's {mode} worker failed{at}: {type(exc).__name__}: {str(exc).strip()[:500]}"


def main(argv: list[str] | None = None) -> None:
    # The person's atexit hooks and extension destructors are not ours to wait for (``serve`` ends at once).
    serve(ModelJob, work, lambda job, exc: ModelReply(ok=False, error_kind="model", error=describe(exc, job.model_path)),
          argv)


if __name__ == "__main__":
    main()
