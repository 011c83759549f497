"""Faster ``load_inline`` builds that give the candidate the extension a plain build gives.

Most of a cold build is spent parsing PyTorch's headers: ``main.cpp`` (the bindings, and on
the cpu device the kernel itself) includes ``<torch/extension.h>``, and nvcc parses the
``.cu`` file's ``<torch/types.h>`` / ``<torch/extension.h>`` three times (cudafe++, cicc, the
host compiler). The fast build changes neither the candidate's source nor the commands that
``load_inline`` writes into ``build.ninja``; it only sets, for that one call, environment
variables the compilers read:

- ``CPATH`` holds a folder with a precompiled ``torch/extension.h`` made for exactly the
  bindings' compile command (``pch.py``). GCC checks a precompiled header's fit itself and
  reads the real header when it does not fit.
- When the ``.cu`` file's own includes allow it, ``CPATH`` also holds a folder whose
  ``torch/types.h`` and ``torch/extension.h`` resolve, for nvcc only, to a light header
  (``light.py``). If that build fails, the same call runs again without it: a plain build,
  whose log and errors are the ones reported, so no candidate is refused because of it.
- ``NVCC_APPEND_FLAGS=-t 2`` lets nvcc run its host and device passes side by side.

Because ``build.ninja`` is what a plain build writes, a plain ``load_inline`` of the same
source later (the run stage imports the candidate again) finds everything up to date.
Which path each call took is printed into the compile log and appended to
``kevin-build-paths.jsonl`` in the extensions folder.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import light, pch
from .headers import as_list

PATHS_FILE = "kevin-build-paths.jsonl"
NOTE = "[kevin-opt build]"
NVCC_THREADS = "-t 2"
_FAILED_TARGET = re.compile(r"^FAILED: (\S+)", re.MULTILINE)
_TOOL_TROUBLE = ("internal compiler error", ".gch", "precompiled header", "nvcc error", "nvcc fatal",
                 "Segmentation fault")


def shared_dir() -> Path:
    """Where precompiled headers and light-header folders live: beside the build folders."""
    extensions = os.environ.get("TORCH_EXTENSIONS_DIR")
    base = Path(extensions).parent if extensions else Path(tempfile.gettempdir())
    return base / "toolchain"


@dataclass
class Plan:
    """What one ``load_inline`` call is built with."""

    include_dirs: list[Path] = field(default_factory=list)
    pch: bool = False
    light: bool = False
    nvcc_threads: bool = False
    notes: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.include_dirs:
            out["CPATH"] = os.pathsep.join([str(d) for d in self.include_dirs]
                                           + [p for p in [os.environ.get("CPATH", "")] if p])
        if self.nvcc_threads:
            out["NVCC_APPEND_FLAGS"] = " ".join(p for p in (os.environ.get("NVCC_APPEND_FLAGS", ""), NVCC_THREADS) if p)
        return out

    def describe(self) -> str:
        parts = [p for p, on in (("precompiled torch/extension.h", self.pch), ("light CUDA headers", self.light),
                                 ("nvcc -t 2", self.nvcc_threads)) if on]
        return "fast build: " + (", ".join(parts) if parts else "nothing to speed up")


def make_plan(arguments: dict, shared: Path) -> tuple[Plan, Callable[[], None]]:
    """The plan for one call, and a function that finishes whatever the plan started."""
    plan = Plan()
    cuda = as_list(arguments.get("cuda_sources"))
    finish: Callable[[], None] = lambda: None
    header = None
    if not as_list(arguments.get("sycl_sources")):
        try:
            header = pch.for_call(arguments, shared)
        except Exception as exc:  # e.g. a PyTorch whose ninja writer takes other arguments
            plan.notes.append(f"no precompiled header ({type(exc).__name__}: {exc})")
    if header is not None and header.ready():
        plan.include_dirs.append(header.folder)
        plan.pch = True
        header.touch()
    elif header is not None:
        started = header.start_build()
        if started is not None:
            finish = started
            plan.notes.append("made the precompiled header for this flag set alongside")
    if cuda:
        why_not, overlay = light.refusal(cuda), None
        if why_not is None:
            try:
                overlay = light.overlay(shared)
            except Exception as exc:  # e.g. a PyTorch whose headers are laid out otherwise
                plan.notes.append(f"no light header ({type(exc).__name__}: {exc})")
        if overlay is not None:
            plan.include_dirs.append(overlay)
            plan.light = True
        elif why_not:
            plan.notes.append(f"full CUDA headers: {why_not}")
        flags = " ".join(as_list(arguments.get("extra_cuda_cflags")) + [os.environ.get("NVCC_APPEND_FLAGS", "")])
        plan.nvcc_threads = not re.search(r"(^|\s)(-t|--threads)(\s|=|\d|$)", flags)
    return plan, finish


@contextmanager
def _environment(changes: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _stdout_to(path: Path) -> Iterator[None]:
    """Send file descriptor 1 (where ninja and the compilers write) to ``path`` for a while."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _note(text: str) -> None:
    print(f"{NOTE} {text}", flush=True)


def _record(name: str, path: str, plan: Plan, seconds: float, ok: bool) -> None:
    extensions = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not extensions:
        return
    row = {"name": name, "path": path, "ok": ok, "pch": plan.pch, "light": plan.light, "seconds": round(seconds, 2)}
    with open(Path(extensions) / PATHS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def needs_plain_retry(log: str, plan: Plan) -> bool:
    """Whether a failed fast build may owe its failure to what made it fast.

    Only the light headers change what the compiler reads: a failed CUDA object (or link)
    after a light build is built again plainly. A precompiled header is used only when GCC
    finds that it fits (else GCC reads the real header), and nvcc's threads only run its
    passes side by side, so other failures repeat in a plain build; unless a tool itself
    broke down, or the log names no failed target.
    """
    failed = set(_FAILED_TARGET.findall(log))
    if not failed:
        return True
    if plan.light and failed - {"main.o"}:
        return True
    return any(word in log for word in _TOOL_TROUBLE)


def fast_load_inline(call: Callable[[], object], arguments: dict, shared: Path | None = None):
    """Run one ``load_inline`` call the fast way, falling back to a plain build."""
    shared = shared or shared_dir()
    name = str(arguments.get("name", "extension"))
    start = time.monotonic()

    def done(path: str, plan: Plan, ok: bool) -> None:
        for text in plan.notes:
            _note(f"{name}: {text}")
        said = {"fast": plan.describe(), "plain": "plain build",
                "plain-after-fast": "plain build after the fast one failed"}[path]
        _note(f"{name}: {said}{'' if ok else ' (failed)'}")
        _record(name, path, plan, time.monotonic() - start, ok)

    try:
        plan, finish = make_plan(arguments, shared)
    except Exception as exc:  # the fast path must never cost a candidate its build
        _note(f"{name}: plain build ({type(exc).__name__}: {exc})")
        return call()
    attempt = Path(tempfile.mkstemp(prefix="kevin-build-", suffix=".log")[1])
    path = "fast" if plan.env() else "plain"
    # Said as the build starts, so that someone watching sees it move before the compiler's output.
    _note(f"{name}: building ({plan.describe()})")
    try:
        try:
            with _environment(plan.env()), _stdout_to(attempt):
                module = call()
        except RuntimeError:
            log = attempt.read_text(encoding="utf-8", errors="replace")
            if path == "plain" or not needs_plain_retry(log, plan):
                sys.stdout.write(log)
                done(path, plan, False)
                raise
            if plan.light:
                light.note_failure(log, shared)
            build_dir = Path(arguments.get("build_directory") or Path(os.environ.get("TORCH_EXTENSIONS_DIR", "."), name))
            if build_dir.is_dir():
                (build_dir / "kevin-fast-attempt.log").write_text(log, encoding="utf-8")
            _note(f"{name}: the fast build failed ({plan.describe()}); building again plainly")
            path = "plain-after-fast"
            # torch builds an extension again only when its sources or flags changed; the fast
            # build's flags travel in the environment, so without this the retry would import the
            # .so that was never made (and report that instead of the compiler's errors).
            from torch.utils.cpp_extension import JIT_EXTENSION_VERSIONER

            JIT_EXTENSION_VERSIONER.entries.pop(name, None)
            try:
                module = call()
            except BaseException:
                done(path, plan, False)
                raise
            done(path, plan, True)
            return module
        sys.stdout.write(attempt.read_text(encoding="utf-8", errors="replace"))
        done(path, plan, True)
        return module
    finally:
        attempt.unlink(missing_ok=True)
        finish()


@contextmanager
def building(fast: bool = True) -> Iterator[None]:
    """Within this block every ``load_inline`` prints its compiler log (the log is part of the
    result) and, when ``fast``, builds the fast way."""
    import torch.utils.cpp_extension as cpp

    original = cpp.load_inline
    signature = inspect.signature(original)

    def load_inline(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        bound.arguments["verbose"] = True
        call = functools.partial(original, *bound.args, **bound.kwargs)
        if not fast:
            return call()
        return fast_load_inline(call, dict(bound.arguments))

    cpp.load_inline = load_inline
    try:
        yield
    finally:
        cpp.load_inline = original


WARM_FLAG_SETS = {"cuda": [None, ["-O3"]], "cpu": [["-O3"]]}
"""The bindings' flag sets most candidates use, by device (none, or ``-O3`` as the prompt's
examples write): the precompiled header of each is made before the first candidate arrives."""


def _warm_here(device: str) -> int:
    """Make the light header (cuda) and the precompiled header of each common flag set, the light
    header first: it takes a second, and the first builds can use it while the others are made."""
    shared = shared_dir()
    if device == "cuda" and light.overlay(shared) is None:
        print("the light header is marked broken", file=sys.stderr)
        return 1
    headers, finishing = [], []
    for flags in WARM_FLAG_SETS[device]:
        arguments = {"name": "kevin_warm", "cpp_sources": "", "functions": [],
                     "cuda_sources": "__global__ void k() {}" if device == "cuda" else None, "extra_cflags": flags}
        header = pch.for_call(arguments, shared)
        if header is None:
            print("no precompiled header for this compiler", file=sys.stderr)
            return 1
        headers.append(header)
        if not header.ready() and (finish := header.start_build(first_sighting_waits=False)) is not None:
            finishing.append(finish)  # the compilers run side by side, one core each
    for finish in finishing:
        finish()
    return 0 if all(h.ready() for h in headers) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["warm"] and len(sys.argv) == 3:
        sys.exit(_warm_here(sys.argv[2]))
    sys.exit("usage: python -m kevin_agent.evaluate.toolchain.build warm cpu|cuda")
