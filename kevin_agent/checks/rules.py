"""Static anti-cheat checks on a candidate source, on its syntax tree (AST), before it runs.

A candidate must build its kernel with ``load_inline`` and compute the result there. The
rules below reject the shortcuts a reward-maximising model finds: calling PyTorch to do the
work, hiding failures behind ``try``/``except``, side threads and streams the timer does not
see, patching the timer or the harness, and tensor subclasses that defer the work. Names are
resolved through the module's imports, so ``import torch.nn.functional as F; F.relu`` and
``from torch import relu`` are both caught. A compute method counts only where its receiver may
be a tensor (``seen.add(k)`` on a set does not; see ``kinds``), and kernel sources are read
with their comments and literals blanked (see ``sources``). The rules are a first line
only: the evaluator checks results at run time whatever the source looks like.
"""

from __future__ import annotations

import ast

from .kinds import LOAD_INLINE, Kinds
from .scopes import Scopes
from .sources import KernelSources
from .triton_rules import TritonRules
from ..results import CheckResult, Violation

RULES: dict[str, str] = {
    "syntax": "the candidate must be valid Python",
    "defines-modelnew": "the candidate defines a top-level class ModelNew",
    "uses-load-inline": "the kernel is built with torch.utils.cpp_extension.load_inline "
    "(cuda: a CUDA source with a __global__ kernel; cpu: C++ in cpp_sources)",
    "no-torch-compute": "no PyTorch compute: torch.* ops, tensor compute methods, the @ operator, "
    "torch.nn.functional or torch.nn layers (allocation, views, Parameter, containers and nn.init are fine)",
    "no-try-except": "no try/except (or contextlib.suppress): a failing kernel must fail, not fall back",
    "no-pass": "no `pass` statements",
    "no-threads": "no threads, processes or async: threading, multiprocessing, concurrent, subprocess, "
    "asyncio, os.fork/system/popen",
    "no-streams": "no extra CUDA streams (torch.cuda.Stream, cudaStreamCreate, getStreamFromPool, ...)",
    "no-monkeypatch": "no assigning to attributes of imported modules (torch, time, builtins, sys, ...) "
    "and no setattr on them",
    "no-timers": "no timing APIs: time, timeit, torch.cuda.Event, profilers",
    "no-harness": "no reaching into the harness or the interpreter: kevin_agent, inspect, gc, ctypes, "
    "importlib, sys._getframe, sys.modules, __builtins__, eval/exec, open",
    "no-tensor-subclass": "no torch.Tensor subclasses, __torch_function__ or __torch_dispatch__",
    "uses-triton": "triton: the kernels are @triton.jit functions that ModelNew launches (kernel[grid](...)); "
    "no load_inline",
    "no-autotune-hooks": "triton: no @triton.autotune or triton.Config hooks (pre_hook, post_hook, "
    "prune_configs_by, do_bench): they run Python on the kernel's arguments, outputs included",
}

_INSTEAD = "compute the result in your own kernel"

# torch.<name> that allocate, describe or configure rather than compute.
_TORCH_OK = set(
    "empty empty_like empty_strided zeros zeros_like ones ones_like full full_like tensor "
    "rand randn randint rand_like randn_like randint_like manual_seed Generator "
    "Tensor Size device dtype finfo iinfo layout memory_format no_grad inference_mode enable_grad "
    "set_grad_enabled is_grad_enabled is_tensor is_floating_point is_complex get_default_dtype "
    "float float16 float32 float64 half double bfloat16 int int8 int16 int32 int64 uint8 long short "
    "bool complex64 complex128 cfloat cdouble strided contiguous_format channels_last "
    "channels_last_3d preserve_format __version__ version backends utils cuda nn ops".split()
)
_NN_OK = set("Parameter Module ModuleList ModuleDict ParameterList ParameterDict Sequential init "
             "parameter Buffer".split())
_CUDA_OK = set("synchronize current_device device_count is_available get_device_properties "
               "get_device_name get_device_capability current_stream default_stream set_device "
               "device empty_cache manual_seed manual_seed_all".split())
_STREAM_API = {"torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream",
               "torch.cuda.set_stream", "torch.cuda.StreamContext", "torch.Stream", "torch.stream",
               "torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.graphs"}
_TIMER_API = ("torch.cuda.Event", "torch.Event", "torch.utils.benchmark", "torch.profiler",
              "torch.autograd.profiler", "torch.cuda.nvtx")
_SUBCLASS_API = ("torch.overrides", "torch.utils._python_dispatch", "torch._C.DisableTorchFunction",
                 "torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass",
                 "torch._C._disabled_torch_function_impl")
_COMPUTE_METHODS = set(
    "matmul mm bmm mv addmm addmv addbmm baddbmm dot vdot einsum sum nansum mean prod max min amax "
    "amin aminmax argmax argmin exp exp_ exp2 expm1 log log_ log2 log10 log1p softmax log_softmax "
    "relu relu_ sigmoid sigmoid_ tanh tanh_ gelu silu add add_ sub sub_ mul mul_ div div_ true_divide "
    "floor_divide pow pow_ sqrt sqrt_ rsqrt rsqrt_ abs abs_ neg neg_ clamp clamp_ clamp_min clamp_max "
    "clip clip_ norm renorm var std cumsum cumprod cummax cummin logcumsumexp sort argsort topk "
    "kthvalue median nanmedian mode gather scatter scatter_ scatter_add scatter_add_ scatter_reduce "
    "index_select index_add index_add_ index_copy index_fill masked_fill masked_fill_ masked_scatter "
    "masked_select where sin cos tan asin acos atan atan2 sinh cosh erf erfc erfinv reciprocal "
    "reciprocal_ floor ceil round trunc frac sign sgn lerp addcmul addcdiv square logsumexp all any "
    "eq ne lt gt le ge maximum minimum fmax fmin remainder fmod outer ger cross tril triu diag "
    "trace flip roll repeat_interleave conv1d conv2d conv3d linear hardtanh leaky_relu elu selu "
    "softplus mish dist cdist histc bincount count_nonzero nonzero unique cov corrcoef "
    "logical_and logical_or logical_not logical_xor bitwise_and bitwise_or bitwise_xor "
    "apply_ map_ numpy __matmul__ __rmatmul__ __imatmul__".split()
)
_MATMUL_FUNCTIONS = {"operator.matmul", "operator.imatmul", "operator.__matmul__", "operator.__imatmul__"}
_THREAD_MODULES = ("threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio",
                   "signal", "torch.multiprocessing")
_OS_PROCESS = set("fork forkpty system popen spawnl spawnle spawnlp spawnv spawnve spawnvp "
                  "execv execve execl execle execlp execvp posix_spawn posix_spawnp kill killpg".split())
_TIMER_MODULES = ("time", "timeit", "cProfile", "profile")
_HARNESS_MODULES = ("kevin_agent", "inspect", "gc", "ctypes", "importlib", "builtins", "traceback")
_HARNESS_SYS = set("_getframe modules settrace setprofile argv _current_frames "
                   "setswitchinterval".split())
_HARNESS_BUILTINS = {"eval", "exec", "compile", "__import__", "open", "breakpoint", "globals"}

_BANNED_NAMES = {
    "contextlib.suppress": ("no-try-except", "`contextlib.suppress` hides errors; let failures raise"),
}
"""Names refused wherever they are reached, imported by name or used through their module."""


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class _Checker(ast.NodeVisitor):
    def __init__(self, device: str, scopes: Scopes, language: str = "cuda") -> None:
        self.device = device
        self.scopes = scopes
        # Triton answers: which functions are kernels, their launches, autotune's hooks (``triton_rules``).
        self.triton = TritonRules(self) if language == "triton" else None
        self.kinds = Kinds(scopes)
        self.aliases: dict[str, str] = {}  # local name -> full dotted path of an imported thing
        self.found: list[Violation] = []
        self.load_inline_calls: list[ast.Call] = []

    def add(self, rule: str, message: str, node: ast.AST | None, line: int | None = None) -> None:
        line = getattr(node, "lineno", line)
        if not any(v.rule == rule and v.line == line and v.message == message for v in self.found):
            self.found.append(Violation(rule=rule, message=message, line=line))

    def resolve(self, node: ast.AST) -> str | None:
        name = _dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head not in self.aliases:
            return None
        return self.aliases[head] + ("." + rest if rest else "")

    # --- imports -------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )
            self.check_module(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        before = len(self.found)
        self.check_module(module, node)
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            self.aliases[alias.asname or alias.name] = full
            if len(self.found) == before:
                self.check_module(full, node)

    def check_module(self, name: str, node: ast.AST) -> None:
        if _under(name, _THREAD_MODULES):
            self.add("no-threads", f"imports `{name}`: candidates run single-threaded on the "
                     "device's stream; put the parallelism inside your kernel", node)
        elif _under(name, _TIMER_MODULES):
            self.add("no-timers", f"imports `{name}`: timing is done by the evaluator; remove it", node)
        elif _under(name, _HARNESS_MODULES):
            self.add("no-harness", f"imports `{name}`: the candidate may not inspect or reach into "
                     "the evaluator; remove it", node)
        elif name in _BANNED_NAMES:
            self.add(*_BANNED_NAMES[name], node)

    # --- names and attributes ------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        full = self.resolve(node)
        if full is None:
            self.generic_visit(node)
            return
        self.check_reference(full, node)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        if node.id in self.aliases and self.aliases[node.id] != node.id:
            self.check_reference(self.aliases[node.id], node)
        elif node.id == "__builtins__":
            self.add("no-harness", "`__builtins__` reaches into the interpreter; remove it", node)

    def check_reference(self, full: str, node: ast.AST) -> None:
        if self.triton is not None and full.startswith("triton"):
            self.triton.check_reference(full, node)
        elif full.startswith("torch"):
            self.check_torch(full, node)
        elif full.startswith("sys.") and full.split(".")[1] in _HARNESS_SYS:
            self.add("no-harness", f"`{full}` reaches into the interpreter; remove it", node)
        elif full.startswith("os.") and full.split(".")[1] in _OS_PROCESS:
            self.add("no-threads", f"`{full}` starts or signals processes; remove it", node)
        elif full in _BANNED_NAMES:
            self.add(*_BANNED_NAMES[full], node)
        elif full in _MATMUL_FUNCTIONS:
            self.add("no-torch-compute", f"`{full}` is the `@` operator, a PyTorch matmul; {_INSTEAD}", node)
        if full.endswith(".__dict__"):
            self.add("no-monkeypatch", f"`{full}` exposes a module's namespace; remove it", node)

    def check_torch(self, full: str, node: ast.AST) -> None:
        parts = full.split(".")
        if full in _STREAM_API or _under(full, ("torch.cuda.graphs",)):
            self.add("no-streams", f"`{full}`: extra streams or graphs escape the timer; launch on "
                     "the current stream", node)
        elif _under(full, _TIMER_API):
            self.add("no-timers", f"`{full}`: timing is done by the evaluator; remove it", node)
        elif _under(full, _SUBCLASS_API):
            self.add("no-tensor-subclass", f"`{full}` overrides tensor dispatch; return plain tensors "
                     "computed by your kernel", node)
        elif len(parts) < 2 or _under(full, ("torch.utils.cpp_extension", "torch.backends")):
            return
        elif parts[1] == "nn":
            if len(parts) > 2 and parts[2] not in _NN_OK:
                what = "torch.nn.functional" if parts[2] == "functional" else "the torch.nn layer"
                self.add("no-torch-compute", f"`{full}` uses {what}; {_INSTEAD} (torch.nn allows only "
                         "Parameter, containers and init)", node)
        elif parts[1] == "cuda":
            if len(parts) > 2 and parts[2] not in _CUDA_OK:
                self.add("no-torch-compute", f"`{full}` is not allowed; {_INSTEAD}", node)
        elif parts[1] == "ops":
            if len(parts) > 2 and parts[2] in ("aten", "prims", "quantized", "_caffe2"):
                self.add("no-torch-compute", f"`{full}` calls a PyTorch operator; {_INSTEAD}", node)
        elif parts[1] == "Tensor":
            if len(parts) > 2 and parts[2] in _COMPUTE_METHODS:
                self.add("no-torch-compute", f"`{full}` is a PyTorch compute op; {_INSTEAD}", node)
        elif parts[1] not in _TORCH_OK:
            self.add("no-torch-compute", f"`{full}` is not allocation or a view; {_INSTEAD}", node)

    # --- statements ----------------------------------------------------------------------
    def visit_Try(self, node: ast.AST) -> None:
        self.add("no-try-except", "try/except hides a failing kernel (e.g. behind a PyTorch "
                 "fallback); let errors raise", node)
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Pass(self, node: ast.Pass) -> None:
        self.add("no-pass", "`pass` is not allowed; remove the empty block or give it a body", node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            full = self.resolve(base) or ""
            if full in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase") or full.endswith(
                "._TensorBase"
            ):
                self.add("no-tensor-subclass", f"class `{node.name}` subclasses `{full}`; return plain "
                         "tensors computed by your kernel", node)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.AST) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("no-tensor-subclass", f"`{node.name}` overrides tensor dispatch; return plain "
                     "tensors computed by your kernel", node)
        if self.triton is not None and self.triton.is_kernel(node):
            with self.triton.inside_kernel():
                self.generic_visit(node)
            return
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def in_kernel(self) -> bool:
        """Inside a @triton.jit function: its values are Triton's blocks, not PyTorch tensors."""
        return self.triton is not None and self.triton.depth > 0

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self.in_kernel():
            self.add("no-torch-compute", f"the `@` operator is a PyTorch matmul; {_INSTEAD}", node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.MatMult):
            self.add("no-torch-compute", f"the `@=` operator is a PyTorch matmul; {_INSTEAD}", node)
        self.check_targets([node.target])
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.check_targets(node.targets)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.check_targets([node.target])
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self.check_targets(node.targets)
        self.generic_visit(node)

    def check_targets(self, targets) -> None:
        for t in targets:
            if isinstance(t, (ast.Tuple, ast.List)):
                self.check_targets(t.elts)
            elif isinstance(t, (ast.Attribute, ast.Subscript)):
                root = t.value if isinstance(t, ast.Subscript) else t
                full = self.resolve(root)
                if full is not None:
                    self.add("no-monkeypatch", f"assigns to `{full}`: patching an imported module "
                             "changes what the evaluator measures; remove it", t)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = _dotted(func) or ""
        if name.endswith("load_inline") or self.scopes.import_path(func) == LOAD_INLINE:
            self.load_inline_calls.append(node)
        if self.triton is not None:
            self.triton.visit_call(node)
        if isinstance(func, ast.Name) and func.id not in self.aliases:
            if func.id in _HARNESS_BUILTINS:
                self.add("no-harness", f"`{func.id}()` is not allowed in a candidate; write plain code",
                         node)
            elif func.id in ("setattr", "delattr", "getattr", "vars") and node.args:
                if self.resolve(node.args[0]) is not None:
                    rule = "no-harness" if func.id == "getattr" else "no-monkeypatch"
                    self.add(rule, f"`{func.id}()` on module `{self.resolve(node.args[0])}` "
                             "is not allowed; use the module's names directly", node)
                elif func.id == "getattr" and len(node.args) >= 2:
                    name = node.args[1]
                    if isinstance(name, ast.Constant) and name.value in _COMPUTE_METHODS:
                        self.check_method(name.value, node.args[0], node)
        elif isinstance(func, ast.Attribute) and self.resolve(func) is None:
            self.check_method(func.attr, func.value, node)
        self.generic_visit(node)

    def check_method(self, method: str, receiver: ast.expr, node: ast.AST) -> None:
        """A tensor compute method, unless the receiver surely is not a tensor (a Python
        container, a string, the extension module)."""
        if method in _COMPUTE_METHODS and not self.in_kernel() and not self.kinds.not_a_tensor(receiver):
            self.add("no-torch-compute", f"`.{method}()` is a PyTorch compute method; {_INSTEAD}", node)


def _check_load_inline(checker: _Checker, sources: KernelSources, device: str) -> None:
    calls = checker.load_inline_calls
    if not calls:
        lang = "a CUDA source with a __global__ kernel" if device == "cuda" else "C++ in cpp_sources"
        checker.add("uses-load-inline", f"no `load_inline(...)` call: build your kernel from {lang} with "
                    "torch.utils.cpp_extension.load_inline", None)
        return
    if device == "cuda":
        has_cuda = any("cuda_sources" in {k.arg for k in c.keywords} or len(c.args) >= 3 for c in calls)
        if not has_cuda or not sources.has_cuda_kernel():
            checker.add("uses-load-inline", "no CUDA kernel: pass a source with a `__global__` function "
                        "as load_inline(cuda_sources=...)", calls[0])
    elif not any("cpp_sources" in {k.arg for k in c.keywords} or len(c.args) >= 2 for c in calls):
        checker.add("uses-load-inline", "no C++ source: on the cpu device pass your kernel as "
                    "load_inline(cpp_sources=..., functions=[...])", calls[0])


def syntax_violation(exc: SyntaxError) -> Violation:
    return Violation(rule="syntax", message=f"syntax error: {exc.msg}; the answer must be complete, "
                     "valid Python", line=exc.lineno)


def run_checks(source: str, device: str, language: str = "cuda") -> CheckResult:
    """Check a candidate source for ``device`` ("cpu" or "cuda") written in ``language`` ("cuda": kernels
    built with load_inline, "triton": @triton.jit kernels); every broken rule is listed."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return CheckResult(passed=False, violations=[syntax_violation(exc)])
    checker = _Checker(device, Scopes(tree), language)
    # Names are resolved wherever they are imported: code above an import can still use it at run time.
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                checker.aliases[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                mod = node.module or ""
                checker.aliases[alias.asname or alias.name] = f"{mod}.{alias.name}" if mod else alias.name
    checker.visit(tree)
    sources = KernelSources(tree, checker.load_inline_calls, checker.scopes)
    for word, line in sources.stream_uses():
        checker.add("no-streams", f"kernel source uses `{word}`: work on other streams escapes the timer; "
                    "launch on at::cuda::getCurrentCUDAStream()", None, line)
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        checker.add("defines-modelnew", "no top-level `class ModelNew(nn.Module)`: name the optimized "
                    "class ModelNew", None)
    if checker.triton is not None:
        checker.triton.finish()
    else:
        _check_load_inline(checker, sources, device)
    found = sorted(checker.found, key=lambda v: (v.line or 0, v.rule))
    return CheckResult(passed=not found, violations=found)
