"""The model worker: ``python -m kevin_agent.model.worker.main JOB.json``.

Started by ``model.process`` as every worker is (``workers``: its own session, a scrubbed
environment, a reply file). Modes: ``profile`` (``profiling``), ``extract`` (``capture``), ``e2e``
(the whole model timed, with or without a kernel installed, its outputs written or compared).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from ...evaluate.plausibility import bandwidth
from ...evaluate.rounds import ratios
from ...evaluate.worker import (FLOP_DTYPES, Mismatch, Outcome, Placements, Timer, compare, describe, device_name,
                               flop_dtype, import_file, versions)
from ...workers import Parent, serve
from ..jobs import E2ERun, ModelJob, ModelReply
from ..records import ModelProfile
from . import capture, profiling
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
    dtype = flop_dtype(loaded.inputs, s.device)
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
    have = [name for name, _ in loaded.model.named_modules()]
    missing = [p for p in job.modules if p not in have]
    if missing:
        raise ModelProblem("module", f"the model has no module {missing[0]!r}", paths=have)
    parent.note("recording")
    calls = capture.record_module(loaded, job.modules)
    tasks = []
    for path in job.modules:
        parent.note(f"capturing {path}")
        tasks.append(capture.capture(loaded, path, calls[path], job.model_file_name, s.seed))
    return ModelReply(ok=True, tasks=tasks, device_name=device_name(s.device), versions=versions())


def _installed_guard(module: torch.nn.Module):
    """The guard a delivered kernel module put on ``module`` (the model file may install it
    itself, once ``kevin-opt install --write`` changed it), or None."""
    guard = module.__dict__.get("forward")
    return guard if hasattr(guard, "original") and hasattr(guard, "kernel_calls") else None


def do_e2e(job: ModelJob, parent: Parent) -> ModelReply:
    """The whole model's forward, timed. Without ``kernel_path``: the model without the kernel
    (taken out where the model file installs it), its outputs written. With it: the kernel
    installed, the outputs compared with those, and the model timed with the kernel and without
    it (its guard taken out and put back between calls) in rounds, interleaved, so that load on
    the machine weighs on both alike."""
    s = job.settings
    loaded = load(s, job.model_path)
    module = loaded.model.get_submodule(job.modules[0])
    guard = _installed_guard(module)
    if not job.kernel_path:
        if guard is not None:
            module.forward = guard.original
        torch.save(forward(loaded), job.outputs_path)
        parent.note("timing")
        return ModelReply(ok=True, e2e=E2ERun(forward_ms=_timed_forward_ms(loaded, s)),
                          device_name=device_name(s.device), versions=versions())
    if guard is None:
        parent.note("installing")
        try:
            kernel = import_file(job.kernel_path, "kevin_kernel")
            kernel.install(loaded.model, job.modules[0])
        except Exception as exc:
            raise ModelProblem("kernel", f"installing {Path(job.kernel_path).name} failed: "
                                         f"{describe(exc, job.kernel_path)}") from None
        guard = module.forward
    guard.kernel_calls = guard.fallback_calls = 0
    out = forward(loaded)
    run = E2ERun(forward_ms=0.0, kernel_calls=guard.kernel_calls, fallback_calls=guard.fallback_calls)
    outcome = Outcome()
    try:
        compare(out, torch.load(job.outputs_path, weights_only=True), s.atol, s.rtol, outcome, s.tolerance)
    except Mismatch as exc:
        run.outputs_match, run.mismatch = False, str(exc)
    run.max_abs_err, run.max_rel_err = outcome.max_abs_err, outcome.max_rel_err
    parent.note("timing")

    def without(*inputs):
        module.forward = guard.original
        try:
            return loaded.model(*inputs)
        finally:
            module.forward = guard

    plain, installed = Timer(s.device).rounds([without, loaded.model], Placements([loaded.inputs]), warmup=s.warmup_runs,
                                              rounds=s.timed_runs)
    run.forward_ms, run.plain_ms = installed.stream.median_ms, plain.stream.median_ms
    run.speedup = statistics.median(ratios(plain.stream_ms, installed.stream_ms))
    return ModelReply(ok=True, e2e=run, device_name=device_name(s.device), versions=versions())


MODES = {"profile": do_profile, "extract": do_extract, "e2e": do_e2e}


def work(job: ModelJob, parent: Parent) -> ModelReply:
    started = time.monotonic()
    try:
        reply = MODES[job.mode](job, parent)
    except ModelProblem as exc:
        return ModelReply(ok=False, error_kind=exc.kind, error=exc.message, hint=exc.hint, paths=exc.paths)
    if reply.profile is not None:
        reply.profile.wall_s = round(time.monotonic() - started, 3)
    return reply


def main(argv: list[str] | None = None) -> None:
    # The person's atexit hooks and extension destructors are not ours to wait for (``serve`` ends at once).
    serve(ModelJob, work, lambda job, exc: ModelReply(ok=False, error_kind="model", error=describe(exc, job.model_path)),
          argv)


if __name__ == "__main__":
    main()
