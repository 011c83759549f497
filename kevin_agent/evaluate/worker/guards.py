"""Run-time guards inside a worker: the dynamic side of the static checks.

The static checks read the source; these watch what the candidate does, so a trick the
AST rules miss (a name built at run time, a PyTorch call made from C++) is still caught.

``Integrity`` remembers every function and class bound in the modules the evaluator relies
on (torch, torch.Tensor, torch.cuda, time, the evaluator's own modules, ...) before the
candidate is imported, and reports any that were rebound later: monkey-patching the timer,
the synchronisation or the comparison changes what is measured.

``OpAudit`` runs the candidate once under a ``TorchDispatchMode`` that sees every PyTorch
operator called while it runs, from Python or from the extension's C++ code alike, and
lists the ones that compute (anything but allocation, views, copies and fills). Operators
of other namespaces (a kernel registered with ``TORCH_LIBRARY``) are the candidate's own. A vendor
library call the reference makes itself (a GEMM, attention, a convolution: ``LIBRARY_OPS``) is the
candidate's to make too: a kernel for a whole transformer layer keeps cuBLAS's GEMMs and flash
attention, which a hand-written kernel at best matches, and earns its speedup from the rest; calling
the library for what the reference computes some other way is still refused.
"""

from __future__ import annotations

import sys
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that allocate, describe, view, copy or fill: what a kernel's wrapper needs.
ALLOWED_OPS = set(
    "empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like "
    "full full_like new_zeros new_ones new_full scalar_tensor fill zero copy clone _to_copy to "
    "contiguous view _unsafe_view reshape _reshape_alias as_strided alias detach lift_fresh "
    "lift_fresh_copy expand expand_as permute transpose t unsqueeze squeeze slice select narrow "
    "split split_with_sizes chunk unbind flatten unflatten view_as resize set record_stream "
    "_local_scalar_dense item is_nonzero _has_compatible_shallow_copy_type cat stack "
    "unfold movedim swapaxes swapdims numpy_T matrix_H mT".split()
)
_AUDITED_NAMESPACES = ("aten", "prims")

LIBRARY_OPS = {
    "GEMM": set("mm addmm bmm baddbmm addbmm mv addmv dot vdot matmul linear _addmm_activation _int_mm "
                "_scaled_mm".split()),
    "attention": set("scaled_dot_product_attention _scaled_dot_product_flash_attention "
                     "_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_efficient_attention "
                     "_scaled_dot_product_cudnn_attention _scaled_dot_product_fused_attention_overrideable "
                     "_flash_attention_forward _efficient_attention_forward".split()),
    "convolution": set("convolution _convolution _convolution_mode conv1d conv2d conv3d cudnn_convolution "
                       "miopen_convolution mkldnn_convolution convolution_overrideable _slow_conv2d_forward "
                       "slow_conv3d_forward _nnpack_spatial_convolution cudnn_convolution_transpose "
                       "slow_conv_transpose2d slow_conv_transpose3d".split()),
}
"""Vendor library operators by kind, as the dispatcher names them below ``F.linear`` and ``F.sdpa``."""

_GUARDED_MODULES = ("torch", "torch._C", "torch.cuda", "torch.nn", "torch.nn.functional", "torch.utils.cpp_extension",
                    "time", "statistics", "builtins", "kevin_agent.evaluate.worker.correctness",
                    "kevin_agent.evaluate.worker.timing", "kevin_agent.evaluate.worker.graphs",
                    "kevin_agent.evaluate.rounds", "kevin_agent.evaluate.worker.main",
                    "kevin_agent.evaluate.worker.candidate", "kevin_agent.evaluate.worker.trials",
                    "kevin_agent.evaluate.worker.confirmation",
                    "kevin_agent.evaluate.worker.taskcode", "kevin_agent.evaluate.worker.guards", "__main__")


def _guarded_namespaces() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for name in _GUARDED_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            out.append((name, module))
    classes = [("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase),
               ("torch.nn.Module", torch.nn.Module), ("torch.cuda.Event", torch.cuda.Event)]
    trials = sys.modules.get("kevin_agent.evaluate.worker.trials")
    if trials is not None:  # hands out the reference's stored answers
        classes.append(("kevin_agent.evaluate.worker.trials.Trials", trials.Trials))
    event_base = getattr(torch._C, "_CudaEventBase", None)
    if isinstance(event_base, type):
        classes.append(("torch._C._CudaEventBase", event_base))
    return out + classes


def _is_code(value: object) -> bool:
    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                              types.WrapperDescriptorType, types.GetSetDescriptorType, type,
                              property, classmethod, staticmethod))


class Integrity:
    """Functions and classes of the guarded namespaces, by identity."""

    def __init__(self) -> None:
        # Importing torch._dynamo rebinds torch.manual_seed; torch imports it lazily (first use
        # of deterministic mode, say), so import it before the snapshot, not after.
        import torch._dynamo  # noqa: F401

        self._seen: dict[tuple[str, str], int] = {}
        self._objects: list[tuple[str, object]] = _guarded_namespaces()
        for ns, obj in self._objects:
            for key, value in list(vars(obj).items()):
                if _is_code(value):
                    self._seen[(ns, key)] = id(value)

    def changed(self) -> list[str]:
        """Names rebound or deleted since the snapshot (``torch.cuda.synchronize``, ...)."""
        found = []
        for ns, obj in self._objects:
            current = vars(obj)
            for (space, key), ident in self._seen.items():
                if space != ns:
                    continue
                value = current.get(key, None)
                if value is None or id(value) != ident:
                    found.append(f"{ns}.{key}")
        return found


class OpAudit(TorchDispatchMode):
    """Records the computing PyTorch operators called while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.computing: list[str] = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        namespace = getattr(func, "namespace", "")
        base = func._schema.name.split("::")[-1]
        if namespace in _AUDITED_NAMESPACES and base.rstrip("_") not in ALLOWED_OPS \
                and base not in ALLOWED_OPS and f"{namespace}::{base}" not in self.computing:
            self.computing.append(f"{namespace}::{base}")
        return func(*args, **(kwargs or {}))


def refused_ops(candidate_ops: list[str], reference_ops: list[str]) -> list[str]:
    """The candidate's computing operators less the library ones it may call: every operator of each
    kind (GEMM, attention, convolution) that the reference's own operators include, in place too
    (``addmm_`` on a buffer of its own: a residual add in the GEMM's epilogue)."""
    bases = {op.split("::")[-1].rstrip("_") for op in reference_ops}
    allowed = {op for kind in LIBRARY_OPS.values() if kind & bases for op in kind}
    return [op for op in candidate_ops if op.split("::")[-1].rstrip("_") not in allowed]


def audit_ops(fn, args) -> list[str]:
    """The computing operators ``fn(*args)`` calls (an empty list for an honest kernel)."""
    audit = OpAudit()
    with torch.no_grad(), audit:
        fn(*args)
    return audit.computing

