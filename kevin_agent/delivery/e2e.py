"""``kevin-opt e2e``: the whole model with and without delivered kernels, each side in fresh workers.

Each kernel is built the way its run built it, in the build cache's folder for its code (a cache
hit when the run that made it ran here), so that importing it in the worker finds it built. Each
round starts two workers: one runs the model without the kernels and writes its outputs; one
installs every kernel at every module it goes into, compares the model's outputs with those, and
times the model with the kernels and without them call by call, interleaved. The speedup is the
median of those rounds' ratios: load on a shared machine weighs on both sides of each ratio alike,
where two workers timed apart can each meet another moment.

With several kernels the worker also runs the model with each alone and with all but each, and
times all but each beside the rest: a kernel whose presence changes the outputs, or without which
the model is faster (in two measurements running: one moment of a busy machine drops nothing), is
dropped with the reason, and the kept ones are measured again together.
The prediction is Amdahl's for the combination, from each kernel's share of the forward (the
profile's, its modules' summed) and its own confirmed speedup.

Where ``compare_compile`` is on (the default on cuda) or the mode is ``compile``, the worker with
the kernels also times the model under ``torch.compile`` without them and with them, in the same
rounds: both measurements are shown, and ``e2e_mode`` says which one decides whether the kernels
make the model slower (a kernel that helps in eager can lose to what Inductor fuses).
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
from ..evaluate.rounds import median_interval
from ..evaluate.toolchain import cache
from ..model.delivered import FOOTER_MARK, kernel_source
from ..model.groups import group_name
from ..model.jobs import E2EKernel, E2ERun
from ..model.marks import read_envelope
from ..model.modelfile import ModelError, ModelFile
from ..model.process import checked, run_model_job
from ..model.records import InstallEnvelope, ModelProfile
from ..results.records import E2EResult, KernelEffect
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


def _envelope(kernel: Path, settings: EvalSettings) -> InstallEnvelope:
    env = read_envelope(kernel)
    if env is None:
        raise ModelError(f"{kernel}: is not a kernel module that installs itself",
                         "pass the *_kevin.py that a run on an extracted task (kevin-opt extract) delivered")
    if env.device != settings.device:
        raise ModelError(f"{kernel}: was verified on {env.device}, not {settings.device}",
                         f"pass --device {env.device}")
    return env


def measure(model_file: ModelFile, kernels: Path | list[Path], settings: EvalSettings, *,
            profile: ModelProfile | None, rounds: int = DEFAULT_ROUNDS, timeout_s: float | None = None) -> E2EResult:
    """The whole model with every kernel in ``kernels`` and without them; with several, each one's
    effect, and those that break the outputs or slow the model dropped."""
    kernels = [kernels] if isinstance(kernels, Path) else list(kernels)
    if len({k.stem for k in kernels}) != len(kernels):
        raise ModelError("a kernel module is given twice", "pass each kernel module once")
    started = time.monotonic()
    envs = [_envelope(k, settings) for k in kernels]
    jobs = [E2EKernel(path=str(k.resolve()), stem=k.stem, members=env.paths, build_dir=str(build_kernel(k, settings)))
            for k, env in zip(kernels, envs)]
    claims = [read_claim(k) for k in kernels]
    shares = [_members_share(profile, env.paths) if profile is not None else None for env in envs]
    effects = [KernelEffect(kernel_file=str(k), module=group_name(env.paths), members=env.paths, share=share,
                            module_speedup=claim.speedup if claim else None)
               for k, env, share, claim in zip(kernels, envs, shares, claims)]
    kept = list(range(len(kernels)))
    earlier: dict[int, float] = {}  # the kernel the last measurement found the model faster without: its reading
    measurements = 0
    while True:
        base, with_kernels = _rounds(model_file, [jobs[i] for i in kept], settings, rounds,
                                     timeout_s or settings.run_timeout_s)
        measurements += 1
        _record(effects, kept, with_kernels)
        drop, on_speed = _to_drop(effects, kept, with_kernels, earlier) if len(kept) > 1 else ({}, False)
        # One measurement does not drop a kernel its own task verified faster: a whole model's few
        # rounds move with the machine (another run, a test suite's other process), so the verdict is
        # asked of a second measurement in fresh workers first, and taken where both give it.
        if on_speed and not drop.keys() & earlier.keys() and measurements <= 2 * len(kernels):
            earlier = {i: effects[i].contribution for i in drop}
            continue
        earlier = {}
        for i, why in drop.items():
            effects[i].dropped = why
        if not drop or len(drop) == len(kept):
            break
        kept = [i for i in kept if i not in drop]
    kept = [i for i in kept if not effects[i].dropped] or kept
    return _result(model_file, settings, profile, [effects[i] for i in kept], effects, base, with_kernels, rounds,
                   time.monotonic() - started)


def _share_that_runs(profile: ModelProfile | None, kept: list[KernelEffect]) -> None:
    """Each kept kernel's share counted at the members that still run beside the others: a member
    inside another kept kernel's member (a layer's norm, where the whole layer's kernel is kept) is
    never called, and counting its time would predict the same saving twice (a share above 100%)."""
    if profile is None:
        return
    for effect in kept:
        outer = [p for other in kept if other is not effect for p in other.members]
        running = [p for p in effect.members if not any(p.startswith(q + ".") for q in outer)]
        if running != effect.members and (share := _members_share(profile, running)) is not None:
            effect.share = share


def _members_share(profile: ModelProfile, paths: list[str]) -> float | None:
    found = [profile.module(p) for p in paths]
    return sum(m.share for m in found) if found and all(m is not None for m in found) else None


def _rounds(model_file: ModelFile, jobs: list[E2EKernel], settings: EvalSettings, rounds: int,
            limit: float) -> tuple[list[E2ERun], list[E2ERun]]:
    base: list[E2ERun] = []
    with_kernels: list[E2ERun] = []
    with tempfile.TemporaryDirectory(prefix="kevin-e2e-") as scratch:
        job = {"mode": "e2e", "settings": settings, "model_path": str(model_file.path), "kernels": jobs,
               "outputs_path": str(Path(scratch) / "outputs.pt"), "compiled": compiled(settings)}
        for _ in range(rounds):
            base.append(_run(job, model_file, limit).e2e)
            with_kernels.append(_run({**job, "with_kernels": True}, model_file, limit).e2e)
    return base, with_kernels


def compiled(settings: EvalSettings) -> bool:
    """Whether the whole model is also timed under torch.compile."""
    return bool(settings.compare_compile) or settings.e2e_mode == "compile"


def _record(effects: list[KernelEffect], kept: list[int], runs: list[E2ERun]) -> None:
    """What the kept kernels did in the last measurement."""
    for j, i in enumerate(kept):
        mine = [r.kernels[j] for r in runs]
        effect = effects[i]
        effect.kernel_calls, effect.fallback_calls = mine[0].kernel_calls, mine[0].fallback_calls
        effect.member_calls = mine[0].member_calls
        if len(kept) == 1:  # alone in the model: the whole model's outputs are its own
            bad_run = next((r for r in runs if not r.outputs_match), None)
            effect.outputs_match, effect.mismatch = bad_run is None, bad_run.mismatch if bad_run else ""
        else:
            bad = next((m for m in mine if not m.alone_match), None)
            effect.outputs_match, effect.mismatch = bad is None, bad.alone_mismatch if bad else ""
        pooled = [r for m in mine for r in m.ratios]
        effect.contribution = statistics.median(pooled) if pooled else None
        effect.contribution_interval = list(median_interval(pooled)) if pooled else None


def _to_drop(effects: list[KernelEffect], kept: list[int], runs: list[E2ERun],
             earlier: dict[int, float]) -> tuple[dict[int, str], bool]:
    """The kept kernels to leave out, and why: those whose presence alone changes the outputs; where
    only all of them together do, one without which they match; else, of those without which the
    model is faster beyond the noise, the one it is the most faster without (and True: a drop on
    speed alone; ``earlier``: the reading the measurement before gave it, where it found the same)."""
    drop = {i: f"the model's outputs differ with it alone: {effects[i].mismatch}"
            for i in kept if not effects[i].outputs_match}
    if not drop and any(not r.outputs_match for r in runs):
        fixes = [i for j, i in enumerate(kept) if all(r.kernels[j].without_match for r in runs)]
        if fixes:
            drop[fixes[0]] = "the outputs differ with it and the others, and match without it"
    # Slower beyond the noise: below 1 in every worker, and the whole interval of the pooled median
    # below 1 (a kernel that saves little reads below 1 in about half the measurements, and a
    # process whose allocator happens to return memory to the system slows every variant unevenly).
    slower = [i for j, i in enumerate(kept) if (effects[i].contribution_interval or [1.0, 1.0])[1] < 1.0
              and all((r.kernels[j].contribution or 1.0) < 1.0 for r in runs)]
    if not drop and slower:
        # The worst alone: beside a kernel that slows everything, another's gain is hard to see.
        worst = min(slower, key=lambda i: effects[i].contribution)
        before = f"; {earlier[worst]:.2f}x in the measurement before" if worst in earlier else ""
        drop[worst] = f"the whole model is faster without it ({effects[worst].contribution:.2f}x with it{before})"
        return drop, True
    return drop, False


def _result(model_file: ModelFile, settings: EvalSettings, profile: ModelProfile | None, kept: list[KernelEffect],
            effects: list[KernelEffect], base: list[E2ERun], with_kernels: list[E2ERun], rounds: int,
            wall_s: float) -> E2EResult:
    baseline_ms = min(r.forward_ms for r in base)
    kernel_ms = min(r.forward_ms for r in with_kernels)
    # The eager speedup and its interval from one sample, every round's interleaved ratios pooled: the
    # median of the rounds' own medians can fall outside the pooled interval printed beside it.
    pooled = [x for r in with_kernels for x in r.ratios] or [r.speedup for r in with_kernels]
    speedup = statistics.median(pooled)
    several = len(effects) > 1
    _share_that_runs(profile, kept)
    known = all(k.share is not None and k.module_speedup for k in kept)
    share = sum(k.share for k in kept) if known else (kept[0].share if not several else None)
    predicted = (1.0 / (1.0 - share + sum(k.share / k.module_speedup for k in kept)) if known else None)
    first = with_kernels[0]
    mismatched = next((r for r in with_kernels if not r.outputs_match), None)
    timed = [r for r in with_kernels if r.compiled_speedup is not None]
    under = _compiled_fields(with_kernels) if timed else {"compile_error": next(
        (r.compile_error for r in with_kernels if r.compile_error), "")}
    mode = "compile" if settings.e2e_mode == "compile" and timed else "eager"
    deciding = under["compiled_speedup"] if mode == "compile" else speedup
    # The interleaved ratios are eager's; a compiled speedup has no interval here.
    interval = list(median_interval(pooled)) if mode == "eager" else None
    # Slower only beyond the noise, as one of several kernels is dropped: a median just under 1 on a
    # busy machine is within what the timing moves, and the kernel is verified faster on its module.
    slower = interval[1] < 1.0 if interval is not None else deciding < 1.0
    if mode == "compile" and mismatched is None and not under["compiled_outputs_match"]:
        mismatched = E2ERun(forward_ms=0.0, outputs_match=False,
                            mismatch=f"under torch.compile: {under['compiled_mismatch']}")
    return E2EResult(
        model_file=model_file.given, kernel_file=", ".join(k.kernel_file for k in kept),
        module=", ".join(k.module for k in kept), device=settings.device,
        device_name=profile.device_name if profile is not None else settings.device, baseline_ms=baseline_ms,
        kernel_ms=kernel_ms, speedup=deciding, eager_speedup=speedup, mode=mode,
        workers_speedup=baseline_ms / kernel_ms, share=share,
        module_speedup=None if several else kept[0].module_speedup, predicted=predicted,
        outputs_match=mismatched is None, max_abs_err=first.max_abs_err, max_rel_err=first.max_rel_err,
        mismatch=mismatched.mismatch if mismatched else "", tolerance=settings.tolerance,
        rounding="" if mismatched else next((r.rounding for r in with_kernels if r.rounding), ""),
        kernel_calls=sum(k.kernel_calls for k in kept), fallback_calls=sum(k.fallback_calls for k in kept),
        member_calls={path: calls for k in kept for path, calls in k.member_calls.items()},
        rounds=rounds, slower=slower, speedup_interval=interval, wall_s=round(wall_s, 3), kernels=effects if several else [], **under)


def _compiled_fields(runs: list[E2ERun]) -> dict:
    """The compiled model's times over the workers that timed it: the best of the rounds' medians,
    the median of their ratios."""
    timed = [r for r in runs if r.compiled_speedup is not None]
    bad = next((r for r in timed if not r.compiled_match), None)
    return {"compiled_ms": min(r.compiled_ms for r in timed),
            "compiled_kernel_ms": min(r.compiled_kernel_ms for r in timed),
            "compiled_speedup": statistics.median(r.compiled_speedup for r in timed),
            "eager_over_compiled": statistics.median(r.eager_over_compiled for r in timed),
            "compiled_outputs_match": bad is None, "compiled_mismatch": bad.compiled_mismatch if bad else "",
            "compiled_kernel_calls": min((r.compiled_kernel_calls for r in timed if r.compiled_kernel_calls is not None),
                                         default=None)}


def _run(job: dict, model_file: ModelFile, limit: float):
    return checked(run_model_job(job, timeout_s=limit), model_file)


def kernel_code(path: Path, env: InstallEnvelope) -> str:
    """The kernel's code in a delivered module, exactly as the run built it (the build cache is
    keyed by that text): its ``KEVIN_KERNEL_CODE``, or in a module written before it held the code
    as text, after the claim line and its blank line, before the footer's two blank lines, with or
    without the newline the module added at its end."""
    text = Path(path).read_text(encoding="utf-8")
    if (held := kernel_source(text)) is not None:
        return held
    lines = text.splitlines(keepends=True)
    begin = next((i + 1 for i, ln in enumerate(lines) if ln.startswith(CLAIM_PREFIX)), 0)
    end = next((i for i, ln in enumerate(lines) if ln.startswith(FOOTER_MARK)), len(lines))
    region = "".join(lines[begin:end])[1:-2]
    for code in (region, region[:-1]):
        if hashlib.sha256(code.encode()).hexdigest() == env.code_sha256:
            return code
    return region
