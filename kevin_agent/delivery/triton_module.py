"""The delivered module of a Triton kernel: what its header says differently from a CUDA one.

The module itself is written as every kernel module is (``kernel_module``): the header, the claim,
the verified source unchanged, and for a task extracted from a model its code as text with the code
that installs it (the same guard and custom operator as a CUDA kernel's). A Triton source needs no
compiler at import: its kernels compile at their first call, for the argument types and constants of
that call, and Triton caches them; the module needs torch and triton alone. This module only says so
in the header's paragraph on how the kernel is built.
"""

from __future__ import annotations

from pathlib import Path

from ..model.delivered import carried_source

TUNING_PATH = Path(__file__).parents[1] / "evaluate" / "worker" / "interpreter_tuning.py"


def _where(device: str) -> str:
    return ("a GPU that Triton supports (NVIDIA or AMD)" if device == "cuda"
            else "Triton's interpreter (TRITON_INTERPRET=1) on the CPU, as it was verified")


class TritonKernel:
    """``@triton.jit`` kernels, compiled by Triton at their first launch."""

    def module_tail(self, code: str, device: str) -> str:
        """Where the kernel was verified in Triton's interpreter and its code autotunes: the
        wall-clock benchmarker the run's workers gave ``@triton.autotune`` there (the interpreter has
        no GPU driver to time configs with), set only under ``TRITON_INTERPRET=1``; nothing otherwise.
        The kernel's own code stays as it was verified."""
        if device != "cpu" or "autotune" not in code:
            return ""
        return "\n".join([
            "",
            "",
            "# @triton.autotune in Triton's interpreter (TRITON_INTERPRET=1), where this kernel was verified: the",
            "# interpreter has no GPU driver to time the configs with, so each is timed by the wall clock of a few",
            "# calls, as the run timed them. Nothing changes on a GPU.",
            carried_source(TUNING_PATH),
            "",
            "if __import__(\"os\").environ.get(\"TRITON_INTERPRET\") == \"1\":",
            "    try:",
            "        interpreter_autotune()",
            "    except ImportError:  # no triton here: the kernel cannot run, and says so at its first call",
            "        pass",
            "",
        ])

    def build_note(self, device: str, *, lazy: bool) -> list[str]:
        if not lazy:
            return [
                "The Triton kernels are compiled at their first call (@triton.jit, for the argument types and",
                "constants of that call; @triton.autotune tunes its configs then) and cached by Triton afterwards.",
                f"The module needs torch and triton alone, and runs on {_where(device)}.",
            ]
        return [
            "Importing this module imports nothing but torch: the kernel's code (KEVIN_KERNEL_CODE) runs on the",
            "first call the kernel serves, and Triton compiles its kernels at that call (@triton.jit, for the",
            "argument types and constants of that call; @triton.autotune tunes its configs then; cached by Triton",
            f"afterwards). It needs triton, and runs on {_where(device)}.",
            "Where triton cannot be imported or that first call fails, the original forward runs, after one",
            "warning that says why; KEVIN_KERNELS=0 turns the kernel off.",
        ]
