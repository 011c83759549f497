"""The whole model timed with delivered kernels and without them (``kevin-opt e2e``), in one worker.

Each kernel module is imported first, under the name the model file imports it by and from the
folder its build is in, so that a model file that installs the kernels itself finds them built.
Without the kernels (``with_kernels`` false): every guard the model file put on their modules is
taken out, the outputs are written and the forward timed. With them: each kernel is installed at
every module it goes into that the file did not install it at; the outputs are compared with those
written, with every kernel and, when there are several, with each alone and with all but each;
then the model is timed with none, with all, and with all but each, call by call in rounds,
interleaved and in a turning order, so that load on the machine and what one call leaves the next
weigh on every variant alike. Where the job asks for it (``compiled``), the model under
``torch.compile`` is timed in the same rounds, without the kernels and with them all, its outputs
with them compared too; a model that does not compile says why and is timed in eager alone.

Outputs cross from one worker to the other as their tensors and the paths of their leaves
(``outputs``), never as the person's objects.
"""

from __future__ import annotations

import copy as copy_module
import os
import statistics

import torch

from ...evaluate.rounds import ratios
from ...evaluate.worker import LOW_PRECISION as LOW, Mismatch, Outcome, Timer, describe, import_file, wide
from ..jobs import E2EKernelRun, E2ERun, ModelJob
from . import outputs
from .loading import LoadedModel, ModelProblem, forward, load

Guards = list[list[tuple[torch.nn.Module, object]]]
"""Per kernel, (module, its guard) at each module it is installed at."""


def installed_guard(module: torch.nn.Module):
    """The guard a delivered kernel module put on ``module`` (the model file may install it
    itself, once ``kevin-opt install --write`` changed it), or None."""
    guard = module.__dict__.get("forward")
    return guard if hasattr(guard, "original") and hasattr(guard, "kernel_calls") else None


def _import_kernels(job: ModelJob) -> list:
    saved = os.environ.get("TORCH_EXTENSIONS_DIR")
    modules = []
    try:
        for kernel in job.kernels:
            os.environ["TORCH_EXTENSIONS_DIR"] = kernel.build_dir
            try:
                modules.append(import_file(kernel.path, kernel.stem))
            except Exception as exc:
                raise ModelProblem("kernel", f"importing {os.path.basename(kernel.path)} failed: "
                                             f"{describe(exc, kernel.path)}") from None
    finally:
        if saved is None:
            os.environ.pop("TORCH_EXTENSIONS_DIR", None)
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = saved
    return modules


def _module(loaded: LoadedModel, path: str) -> torch.nn.Module:
    try:
        return loaded.model.get_submodule(path)
    except AttributeError:
        raise ModelProblem("kernel", f"the model has no module {path!r} for the kernel to go into") from None


def _install(loaded: LoadedModel, job: ModelJob, modules: list) -> Guards:
    guards: Guards = []
    for kernel, code in zip(job.kernels, modules):
        mine = []
        for path in kernel.members:
            module = _module(loaded, path)
            if installed_guard(module) is None:
                try:
                    code.install(loaded.model, path)
                except Exception as exc:
                    raise ModelProblem("kernel", f"installing {os.path.basename(kernel.path)} at {path!r} failed: "
                                                 f"{describe(exc, kernel.path)}") from None
            mine.append((module, module.forward))
        guards.append(mine)
    return guards


def _set(guards: Guards, on: list[bool]) -> None:
    for mine, enabled in zip(guards, on):
        for module, guard in mine:
            module.forward = guard if enabled else guard.original


def _matches(loaded: LoadedModel, expected, s, model=None, truth=None) -> tuple[bool, str, Outcome]:
    """Whether the outputs are ``expected``'s within the tolerance; where they are not and the model
    computes in bf16 or fp16 (``truth``: its outputs in float32), whether they are as close to the
    float32 outputs as the model's own are: rounding that compounds over many layers moves a few
    elements of a low-precision model past any fixed tolerance, with or without the kernel."""
    outcome = Outcome()
    got = None
    try:
        with torch.no_grad():
            got = loaded.call(model) if model is not None else forward(loaded)
        outputs.same_leaves(got, expected, s.atol, s.rtol, outcome, s.tolerance)
    except Mismatch as exc:
        if truth is None or got is None:
            low = got is not None and any(p.dtype in LOW for p in loaded.model.parameters())
            return False, f"{exc}; no float32 copy of the model to compare with" if low else str(exc), outcome
        ok, words = outputs.rounding_verdict(got, expected, truth)
        if ok:
            outcome.rounding = words
            return True, "", outcome
        return False, f"{exc}; {words}", outcome
    return True, "", outcome


def _truth_path(outputs_path: str) -> str:
    return outputs_path + ".float32"


def _float32_forward(loaded: LoadedModel):
    """The outputs (as the model returns them) of a float32 copy of a model whose weights are bf16 or
    fp16, on its inputs cast likewise; None for a model in float32 or wider, or where the copy does not fit."""
    if not any(p.dtype in LOW for p in loaded.model.parameters()):
        return None
    try:
        copy = copy_module.deepcopy(loaded.model).float()
        with torch.no_grad():
            out = copy(*[wide(v) for v in loaded.inputs], **{k: wide(v) for k, v in loaded.kwargs.items()})
        del copy
        return out
    except Exception:  # too large for a second copy, or a model that cannot run in float32: no second opinion
        return None
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _kernel_calls(guards: Guards) -> int:
    return sum(g.kernel_calls for mine in guards for _, g in mine)


def _compiled(loaded: LoadedModel, guards: Guards, every: list[bool]) -> tuple[object, list, str]:
    """The model under ``torch.compile``, called once without the kernels and once with them (each
    compiles then), and the leaves of its outputs without them (what it gives with them is compared
    with those: Inductor's own rounding is not the kernels'); or None and why it does not compile."""
    try:
        compiled = torch.compile(loaded.model)
        with torch.no_grad():
            _set(guards, [False] * len(every))
            plain = outputs.flatten(loaded.call(compiled))
            _set(guards, every)
            loaded.call(compiled)
    except Exception as exc:  # Inductor's own failures as much as the model's: said, not fatal
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        return None, [], f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
    finally:
        _set(guards, every)
    return compiled, [(p, v.clone() if isinstance(v, torch.Tensor) else v) for p, v in plain], ""


def run(job: ModelJob, parent) -> E2ERun:
    s = job.settings
    modules = _import_kernels(job)
    loaded = load(s, job.model_path)
    timer = Timer(s.device)
    if not job.with_kernels:
        for kernel in job.kernels:
            for path in kernel.members:
                module = _module(loaded, path)
                if (guard := installed_guard(module)) is not None:
                    module.forward = guard.original
        outputs.save(forward(loaded), job.outputs_path)
        if (truth := _float32_forward(loaded)) is not None:
            outputs.save(truth, _truth_path(job.outputs_path))
        parent.note("timing")
        return E2ERun(forward_ms=timer.time(loaded.call, [], warmup=s.warmup_runs, runs=s.timed_runs).median_ms)
    parent.note("installing")
    guards = _install(loaded, job, modules)
    for mine in guards:
        for _, guard in mine:
            guard.kernel_calls = guard.fallback_calls = 0
    expected = outputs.load(job.outputs_path)
    truth = outputs.load(_truth_path(job.outputs_path)) if os.path.exists(_truth_path(job.outputs_path)) else None
    n = len(guards)
    every = [True] * n
    _set(guards, every)
    match, mismatch, outcome = _matches(loaded, expected, s, truth=truth)
    result = E2ERun(forward_ms=0.0, outputs_match=match, mismatch=mismatch, max_abs_err=outcome.max_abs_err,
                    max_rel_err=outcome.max_rel_err, rounding=getattr(outcome, "rounding", ""))
    result.kernels = [E2EKernelRun(kernel_calls=sum(g.kernel_calls for _, g in mine),
                                   fallback_calls=sum(g.fallback_calls for _, g in mine),
                                   member_calls={path: [g.kernel_calls, g.fallback_calls]
                                                 for path, (_, g) in zip(kernel.members, mine)})
                      for kernel, mine in zip(job.kernels, guards)]
    result.kernel_calls = sum(k.kernel_calls for k in result.kernels)
    result.fallback_calls = sum(k.fallback_calls for k in result.kernels)
    if n > 1:
        for i, effect in enumerate(result.kernels):
            _set(guards, [j == i for j in range(n)])
            effect.alone_match, effect.alone_mismatch, _ = _matches(loaded, expected, s, truth=truth)
            _set(guards, [j != i for j in range(n)])
            effect.without_match = _matches(loaded, expected, s, truth=truth)[0]
        _set(guards, every)
    compiled = None
    if job.compiled:
        parent.note("compiling")
        compiled, plain, result.compile_error = _compiled(loaded, guards, every)
        if compiled is not None:
            before = _kernel_calls(guards)
            result.compiled_match, result.compiled_mismatch, _ = _matches(loaded, plain, s, compiled, truth)
            result.compiled_kernel_calls = _kernel_calls(guards) - before
    parent.note("timing")
    variants = [[False] * n, every] + ([[j != i for j in range(n)] for i in range(n)] if n > 1 else [])
    fns = [_variant(loaded, guards, on, every) for on in variants]
    if compiled is not None:
        fns += [_variant(loaded, guards, [False] * n, every, compiled), _variant(loaded, guards, every, every, compiled)]
    runs = _rounds(timer, fns, warmup=s.warmup_runs, rounds=s.timed_runs)
    if compiled is not None:
        *runs, compiled_plain, compiled_kernels = runs
        result.compiled_ms, result.compiled_kernel_ms = statistics.median(compiled_plain), statistics.median(
            compiled_kernels)
        result.compiled_speedup = statistics.median(ratios(compiled_plain, compiled_kernels))
        result.eager_over_compiled = statistics.median(ratios(compiled_plain, runs[1]))
    plain, installed = runs[0], runs[1]
    result.forward_ms, result.plain_ms = statistics.median(installed), statistics.median(plain)
    result.ratios = ratios(plain, installed)
    result.speedup = statistics.median(result.ratios)
    for effect, without in zip(result.kernels, runs[2:]):
        effect.ratios = ratios(without, installed)
        effect.contribution = statistics.median(effect.ratios)
    return result


def _variant(loaded: LoadedModel, guards: Guards, on: list[bool], every: list[bool], model=None):
    """One forward with the kernels ``on`` (of ``model``: the compiled one, or the model itself)."""
    def fn():
        _set(guards, on)
        try:
            return loaded.call(model)
        finally:
            _set(guards, every)
    return fn


def _rounds(timer: Timer, fns: list, *, warmup: int, rounds: int) -> list[list[float]]:
    """Each callable's times (ms), round by round, each round calling every one once, the order
    turned by one each round: a call pays for what the one before it left (memory the allocator
    handed back to the system, a cache it filled), and turning the order spreads that over all."""
    times: list[list[float]] = [[] for _ in fns]
    with torch.no_grad():
        for fn in fns:
            for _ in range(warmup):
                fn()
        timer.sync()
        for r in range(rounds):
            for i in [*range(r % len(fns), len(fns)), *range(r % len(fns))]:
                times[i].append(timer.one(fns[i], []).stream_ms)
    return times
