"""The static rules' Triton side: which functions are kernels, whether ModelNew launches one, and
what autotuning may do.

A Triton answer computes in ``@triton.jit`` functions; their bodies hold Triton's blocks, not
PyTorch tensors, so the tensor-method and ``@`` rules do not apply there (``tl.dot`` is what a
kernel multiplies with). Everything outside them (``forward``, the launch wrappers) is held to the
CUDA rules: allocation and views only. ``triton.testing`` is Triton's timer; an autotuner's hooks
run Python on the kernel's arguments, the outputs among them, before or after each launch, which is
a place to compute or fix up the answer outside any kernel, so they are refused (``reset_to_zero``
and ``restore_value``, which only protect the arguments while configs are tried, are fine).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Checker(Protocol):
    """What the rules ask of the checker that walks the answer (``rules._Checker``): a name's full
    dotted path, the ``load_inline`` calls it found, and a place to report a violation."""

    load_inline_calls: list

    def resolve(self, node: ast.AST) -> str: ...

    def add(self, rule: str, message: str, node: ast.AST | None, line: int | None = None) -> None: ...


_KERNEL_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics", "triton.runtime.jit.jit",
                      "triton.runtime.autotuner.autotune", "triton.runtime.autotuner.heuristics"}
_AUTOTUNE = {"triton.autotune", "triton.runtime.autotuner.autotune"}
_CONFIG = {"triton.Config", "triton.runtime.autotuner.Config", "triton.runtime.Config"}
_HOOKS = ("pre_hook", "post_hook", "prune_configs_by", "do_bench", "perf_model", "early_config_prune")
# Positional places of the hooks: autotune(configs, key, prune_configs_by, reset_to_zero,
# restore_value, pre_hook, post_hook, ...) and Config(kwargs, num_warps, num_stages, num_ctas,
# maxnreg, pre_hook).
_AUTOTUNE_FIRST_HOOK_ARG = 2
_CONFIG_HOOK_ARG = 5
_GRAPH_API = ("triton.testing.do_bench_cudagraph",)
_TIMER_API = ("triton.testing",)


class TritonRules:
    """What the checker learns of a Triton answer as it walks the module."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.kernels: set[str] = set()
        self.launches: list[ast.Call] = []
        self.depth = 0

    def _decorator_name(self, node: ast.expr) -> str | None:
        target = node.func if isinstance(node, ast.Call) else node
        return self.checker.resolve(target)

    def is_kernel(self, node: ast.AST) -> bool:
        """A function decorated with ``@triton.jit`` (or autotune/heuristics above one)."""
        names = {self._decorator_name(d) for d in getattr(node, "decorator_list", [])}
        if names & _KERNEL_DECORATORS:
            self.kernels.add(node.name)
            return True
        return False

    @contextmanager
    def inside_kernel(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def check_reference(self, full: str, node: ast.AST) -> None:
        if any(full == p or full.startswith(p + ".") for p in _GRAPH_API):
            self.checker.add("no-streams", f"`{full}` replays the kernel from a CUDA graph outside the timer; "
                             "launch it plainly from forward", node)
        elif any(full == p or full.startswith(p + ".") for p in _TIMER_API):
            self.checker.add("no-timers", f"`{full}`: timing is done by the evaluator; remove it", node)

    def visit_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Subscript):  # kernel[grid](...)
            self.launches.append(node)
            return
        full = self.checker.resolve(func)
        if full in _AUTOTUNE or full in _CONFIG:
            hooks = [k.arg for k in node.keywords if k.arg in _HOOKS]
            first_hook = _AUTOTUNE_FIRST_HOOK_ARG if full in _AUTOTUNE else _CONFIG_HOOK_ARG
            if len(node.args) > first_hook:
                hooks.append(f"argument {first_hook + 1}")
            if hooks:
                what = "@triton.autotune" if full in _AUTOTUNE else "triton.Config"
                self.checker.add("no-autotune-hooks", f"{what} with {', '.join(hooks)}: a hook runs Python on the "
                                 "kernel's arguments and outputs; tune with configs alone (reset_to_zero and "
                                 "restore_value are fine)", node)

    def _launched(self, call: ast.Call) -> bool:
        target = call.func.value if isinstance(call.func, ast.Subscript) else None
        return isinstance(target, ast.Name) and target.id in self.kernels

    def finish(self) -> None:
        """The module-wide Triton rules, once the walk is done."""
        checker = self.checker
        for call in checker.load_inline_calls:
            checker.add("uses-triton", "`load_inline` builds a C++/CUDA extension: with --language triton write "
                        "the kernels as @triton.jit functions", call)
        if not self.kernels:
            checker.add("uses-triton", "no @triton.jit function: write your kernels with Triton (import triton, "
                        "triton.language as tl) and launch them from ModelNew.forward", None)
        elif not any(self._launched(c) for c in self.launches):
            checker.add("uses-triton", f"no launch of {', '.join(sorted(self.kernels))}: call a kernel as "
                        "kernel[grid](...) from ModelNew.forward", None)
