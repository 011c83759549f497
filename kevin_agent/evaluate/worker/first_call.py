"""A Triton candidate's compile stage, inside its run worker: its first call on the task's inputs.

Triton compiles each ``@triton.jit`` kernel at its first launch (for the launch's argument types and
constants) and runs ``@triton.autotune``'s trials then too; so the first call of ``ModelNew`` on a
set of the task's inputs is the compile, a stage of its own with its own limit and its own line in
the worker's log. Everything after it, the correctness trials and the timing, meets compiled and
tuned kernels, and the timing never includes a compile or an autotune trial. On the cpu device the
kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, set by the parent), and the timing is
labelled as the interpreter's.
"""

from __future__ import annotations

import time

import torch

from ...results import Status
from .correctness import sync
from .interpreter_tuning import interpreter_autotune
from .taskcode import describe

INTERPRETER_FLAG = ("timed in Triton's interpreter (TRITON_INTERPRET=1, cpu device): the times are the "
                    "interpreter's, not a compiled kernel's")


def prepare(settings) -> None:
    """A worker that runs Triton candidates: Triton imported before the integrity snapshot (as every
    candidate imports it first), and in the interpreter autotune's benchmarker."""
    if settings.language != "triton":
        return
    import triton  # noqa: F401

    if settings.device == "cpu":
        interpreter_autotune()


def from_triton(exc: BaseException) -> bool:
    """Whether ``exc`` is Triton's (a kernel that does not compile), not the candidate's Python."""
    return any(cls.__module__.split(".")[0] == "triton" for cls in type(exc).__mro__)


def first_call(cand, inputs: list, device: str, candidate_path: str) -> tuple[Status, str] | None:
    """Call ``cand`` once on ``inputs`` (compiling its kernels, tuning them); None when it ran, else
    the failure's status (a compile error when Triton raised it) and message."""
    start = time.monotonic()
    try:
        with torch.no_grad():
            cand(*inputs)
        sync(device)
    except Exception as exc:
        status = Status.COMPILE_ERROR if from_triton(exc) else Status.RUNTIME_ERROR
        return status, f"at the first call, which compiles the Triton kernels: {describe(exc, candidate_path)}"
    print(f"[kevin-opt triton] first call (JIT compile and autotune) took {time.monotonic() - start:.3f} s",
          flush=True)
    return None
