"""``kevin-opt e2e``: the whole model with and without a delivered kernel, each in a fresh worker.

The kernel is built the way the run built it, in the build cache's folder for its code (a
cache hit when the run that made it ran here), so that importing it in the worker finds it
built. Each round starts two workers: one runs the model as it is and writes its outputs; one
installs the kernel, compares the model's outputs with those, and times the model with the
kernel and without it (its guard taken out) call by call, interleaved. The speedup is the median
of those rounds' ratios: load on a shared machine weighs on both sides of each ratio alike,
where two workers timed apart can each meet another moment.
"""

from __future__ import annotations

import hashlib
import statistics
import tempfile
import time
from pathlib import Path

from ..config import EvalSettings
from ..errors import KevinError
from ..evaluate import compile_in
from ..evaluate.toolchain import cache
from ..model.delivered import FOOTER_MARK
from ..model.jobs import E2ERun
from ..model.marks import read_envelope
from ..model.modelfile import ModelError, ModelFile
from ..model.process import checked, run_model_job
from ..model.ranking import amdahl
from ..model.records import InstallEnvelope, ModelProfile
from ..results.records import E2EResult
from ..workers import scrubbed_env
from .kernel_module import CLAIM_PREFIX, read_claim

DEFAULT_ROUNDS = 2


def build_kernel(kernel: Path, settings: EvalSettings) -> Path:
    """The extensions folder holding the kernel's build, built now if it is not there."""
    env = read_envelope(kernel)
    code = kernel_code(kernel, env)
    folder = settings.cache_dir / cache.build_key(code, settings.device, settings.fast_build)
    build = compile_in(folder, code, settings=settings, job={"settings": settings},
                       env=scrubbed_env({"TORCH_EXTENSIONS_DIR": str(folder), **cache.toolchain_env(settings.device)}))
    if not build.ok:
        raise KevinError(f"{kernel}: the kernel does not build here: {build.error.strip()[-1500:]}",
                         "the module was built where its run ran; check the compiler and torch versions")
    return folder


def measure(model_file: ModelFile, kernel: Path, settings: EvalSettings, *, profile: ModelProfile | None,
            rounds: int = DEFAULT_ROUNDS, timeout_s: float | None = None) -> E2EResult:
    env = read_envelope(kernel)
    if env is None:
        raise ModelError(f"{kernel}: is not a kernel module that installs itself",
                         "pass the *_kevin.py that a run on an extracted task (kevin-opt extract) delivered")
    if env.device != settings.device:
        raise ModelError(f"{kernel}: was verified on {env.device}, not {settings.device}",
                         f"pass --device {env.device}")
    started = time.monotonic()
    folder = build_kernel(kernel, settings)
    limit = timeout_s or settings.run_timeout_s
    base: list[E2ERun] = []
    with_kernel: list[E2ERun] = []
    with tempfile.TemporaryDirectory(prefix="kevin-e2e-") as scratch:
        outputs = str(Path(scratch) / "outputs.pt")
        job = {"mode": "e2e", "settings": settings, "model_path": str(model_file.path), "modules": [env.module],
               "outputs_path": outputs}
        # Both with the build's folder: a model file that installs the kernel itself imports it in both.
        built = {"TORCH_EXTENSIONS_DIR": str(folder)}
        for _ in range(rounds):
            base.append(_run(job, model_file, limit, built).e2e)
            with_kernel.append(_run({**job, "kernel_path": str(kernel.resolve())}, model_file, limit, built).e2e)
    baseline_ms = min(r.forward_ms for r in base)
    kernel_ms = min(r.forward_ms for r in with_kernel)
    module = profile.module(env.module) if profile is not None else None
    claim = read_claim(kernel)
    speedup = statistics.median(r.speedup for r in with_kernel)
    share = module.share if module is not None else None
    predicted = amdahl(share, claim.speedup) if share is not None and claim is not None else None
    first = with_kernel[0]
    mismatched = next((r for r in with_kernel if not r.outputs_match), None)
    return E2EResult(
        model_file=model_file.given, kernel_file=str(kernel), module=env.module, device=settings.device,
        device_name=profile.device_name if profile is not None else settings.device, baseline_ms=baseline_ms,
        kernel_ms=kernel_ms, speedup=speedup, workers_speedup=baseline_ms / kernel_ms, share=share, module_speedup=claim.speedup if claim else None,
        predicted=predicted, outputs_match=mismatched is None, max_abs_err=first.max_abs_err,
        max_rel_err=first.max_rel_err, mismatch=mismatched.mismatch if mismatched else "",
        tolerance=settings.tolerance, kernel_calls=first.kernel_calls, fallback_calls=first.fallback_calls,
        rounds=rounds, slower=speedup < 1.0, wall_s=round(time.monotonic() - started, 3))


def _run(job: dict, model_file: ModelFile, limit: float, env: dict | None = None):
    return checked(run_model_job(job, timeout_s=limit, extra_env=env), model_file)


def kernel_code(path: Path, env: InstallEnvelope) -> str:
    """The kernel's code in a delivered module, exactly as the run built it (the build cache is
    keyed by that text): after the claim line and its blank line, before the footer's two blank
    lines, with or without the newline the module added at its end."""
    lines = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    begin = next((i + 1 for i, ln in enumerate(lines) if ln.startswith(CLAIM_PREFIX)), 0)
    end = next((i for i, ln in enumerate(lines) if ln.startswith(FOOTER_MARK)), len(lines))
    region = "".join(lines[begin:end])[1:-2]
    for code in (region, region[:-1]):
        if hashlib.sha256(code.encode()).hexdigest() == env.code_sha256:
            return code
    return region
