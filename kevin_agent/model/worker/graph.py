"""Capture by graph: the module's forward traced into an ``fx`` graph and written out as Python.

``fx_graph`` traces symbolically through every submodule (nothing is a leaf), so the graph is
made of functional calls on the module's own parameters and holds for any shape; it cannot
follow Python control flow on a tensor's value or shape arithmetic done outside torch.
``export_graph`` uses ``torch.export`` on the recorded inputs (with every dimension free when the
recorded shapes differ): it follows such code by specializing it, as aten ops. Either way the
parameters and buffers are read from the module by their paths in it (``self.fc1.weight``), so the
written ``Model`` has the module's own ``state_dict`` keys.
"""

from __future__ import annotations

import inspect
import math
import operator
import re

import torch
import torch.fx

from .source import NotCaptured

SMALL_CONSTANT = 64
"""Elements of a tensor constant the graph may hold and the task file writes out as a literal."""


class _ThroughEverything(torch.fx.Tracer):
    def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
        return False


def stopped_at(exc: BaseException) -> str:
    """The last line outside torch where a trace (or kevin-opt's own code) stopped, and why."""
    frames = [f for f in inspect.getinnerframes(exc.__traceback__) if "/torch/" not in f.filename]
    where = ""
    if frames:
        f = frames[-1]
        line = (f.code_context or [""])[0].strip()
        where = f"`{line}` ({f.filename.rsplit('/', 1)[-1]}, line {f.lineno}): "
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{where}{type(exc).__name__}: {reason[:300]}"


def fx_graph(module: torch.nn.Module, concrete: dict) -> torch.fx.GraphModule:
    try:
        graph = _ThroughEverything().trace(module, concrete_args=concrete or None)
    except Exception as exc:
        raise NotCaptured(f"torch.fx cannot trace it: {stopped_at(exc)}") from None
    gm = torch.fx.GraphModule(module, graph)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


class _Called(torch.nn.Module):
    """``module`` called as the model called it, from its inputs in bound order: the first
    ``positional`` by position, the rest by name (``**kwargs`` entries by their keys). Its forward's
    signature names the inputs, so that ``torch.export``'s placeholders carry those names."""

    def __init__(self, module: torch.nn.Module, names: list[str], positional: int) -> None:
        super().__init__()
        self.inner = module
        self.names, self.positional = names, positional

        def forward(*values):
            return self.inner(*values[:positional], **dict(zip(names[positional:], values[positional:])))

        P = inspect.Parameter
        forward.__signature__ = inspect.Signature([P(n, P.POSITIONAL_OR_KEYWORD) for n in names])
        self.forward = forward


def _called(module: torch.nn.Module, args: list, names: list[str]) -> _Called:
    params = list(inspect.signature(module.forward).parameters.values())
    usable = len(names) == len(args) and len(set(names)) == len(names) and all(
        n.isidentifier() and n != "self" for n in names)
    if not usable:  # the call did not bind: its values are passed as they came, by position
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:len(args)]
        return _Called(module, names + [f"input_{i}" for i in range(len(names), len(args))], len(args))
    kinds = {p.name: p.kind for p in params}
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    by_position = [i for i, n in enumerate(names) if kinds.get(n) is inspect.Parameter.POSITIONAL_ONLY
                   or (star and n not in kinds and n.startswith(star + "_") and n[len(star) + 1:].isdigit())]
    # everything up to the last value that must go by position goes by position
    return _Called(module, names, by_position[-1] + 1 if by_position else 0)


def _unpacking(args: list, names: list[str], placeholders: list[str]) -> list[str]:
    """The lines that take a tuple input's tensors apart, as export's flat placeholders name them."""
    from torch.utils._pytree import keystr, tree_flatten_with_path

    lines, flat = [], []
    for name, value in zip(names, args):
        if isinstance(value, (list, tuple, dict)):
            flat += [(name + keystr(path), leaf) for path, leaf in tree_flatten_with_path(value)[0]]
        else:
            flat.append((name, value))
    if len(flat) != len(placeholders):
        raise NotCaptured("its inputs' structure does not match the graph's inputs")
    for (expr, _), placeholder in zip(flat, placeholders):
        if expr != placeholder:
            lines.append(f"{placeholder} = {expr}")
    return lines


def export_graph(module: torch.nn.Module, args: list, dynamic: bool, names: list[str] = ()) -> torch.fx.GraphModule:
    """``torch.export`` of ``module`` on ``args`` (its bound inputs, passed as ``names`` where the model
    passed them by name), its lifted parameters and buffers put back as attributes of a module that
    holds them at their paths."""
    from torch.export import Dim, export
    from torch.utils._pytree import tree_map

    def free(a):
        return {d: Dim.AUTO for d in range(a.dim())} if isinstance(a, torch.Tensor) else None

    try:
        called = _called(module, list(args), list(names))
        shapes = tuple(tree_map(free, a) if isinstance(a, (list, tuple)) else free(a) for a in args)
        ep = export(called, tuple(args), strict=False, dynamic_shapes=shapes if dynamic else None)
    except Exception as exc:
        raise NotCaptured(f"torch.export cannot capture it: {stopped_at(exc)}") from None
    sig = ep.graph_signature
    outputs = [o for o in sig.output_specs if o.kind.name != "USER_OUTPUT"]
    if outputs:
        raise NotCaptured(f"its forward updates {outputs[0].target} in place (as a BatchNorm in training does)")
    gm = ep.graph_module
    _inline_regions(gm)
    holder = torch.nn.Module()
    state = {**dict(called.named_parameters()), **dict(called.named_buffers())}
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    for spec in sig.input_specs:
        if spec.kind.name == "USER_INPUT":
            continue
        node = placeholders[spec.arg.name]
        target = spec.target.removeprefix("inner.")  # at its path in the module, not the wrapper's
        if spec.kind.name in ("PARAMETER", "BUFFER"):
            _attach(holder, target, state[spec.target])
        else:
            value = ep.constants.get(spec.target)
            if not isinstance(value, torch.Tensor) or value.numel() > SMALL_CONSTANT:
                raise NotCaptured(f"its graph holds a constant {target} that a task file cannot write")
            _attach(holder, target, value.clone())
        with gm.graph.inserting_before(node):
            attr = gm.graph.get_attr(target)
        node.replace_all_uses_with(attr)
        gm.graph.erase_node(node)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    spec = ep.call_spec.out_spec
    if spec.is_leaf() or (spec.type is not tuple and len(out.args[0]) == 1):
        out.args = (out.args[0][0],)
    elif spec.type is not tuple:
        raise NotCaptured(f"its forward returns a {spec.type.__name__}, which the written graph cannot rebuild")
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    unpacking = _unpacking(list(args), called.names, placeholders)
    for node in [n for n in gm.graph.nodes if n.op == "call_function" and "_assert_tensor_metadata" in str(n.target)]:
        # export's checks of its inputs' dtypes: the task holds at any dtype its module does (a
        # reference made float32, to judge a bf16 answer's rounding, runs it in float32)
        gm.graph.erase_node(node)
    result = torch.fx.GraphModule(holder, gm.graph)
    result.graph.eliminate_dead_code()
    result.recompile()
    result.meta["inputs"] = (called.names, unpacking)
    return result


_REGIONS = ("wrap_with_set_grad_enabled", "wrap_with_autocast")


def _inline_regions(gm: torch.fx.GraphModule) -> None:
    """Write ``torch.no_grad()`` and ``torch.autocast(enabled=False)`` regions inline. export holds each
    as a call of a submodule of its own (transformers' rotary embedding has both), which a task file's
    graph cannot hold; their bodies inline compute the same values (the grad mode changes no value, and
    autocast switched off leaves every dtype as it is where the task runs). An autocast that is on
    changes dtypes: not captured."""
    regions = 0
    while True:
        node = next((n for n in gm.graph.nodes if n.op == "call_function"
                     and getattr(n.target, "__name__", "") in _REGIONS), None)
        if node is None:
            return
        if node.target.__name__ == "wrap_with_autocast":
            if node.args[2]:
                raise NotCaptured(f"its forward runs a region under torch.autocast({node.args[0]!r}, "
                                  f"{node.args[1]}), which a task file does not hold")
            holder, args = node.args[4], node.args[5:]
        else:
            holder, args = node.args[1], node.args[2:]
        body = getattr(gm, holder.target)
        inputs = [n for n in body.graph.nodes if n.op == "placeholder"]
        if len(inputs) != len(args) or any(
                u.op != "call_function" or u.target is not operator.getitem for u in node.users):
            raise NotCaptured("its graph holds a region export wrote in a form the task file cannot write")
        mapping = dict(zip(inputs, args))
        with gm.graph.inserting_before(node):
            for inner in [n for n in body.graph.nodes if n.op == "get_attr"]:  # a region inside this one
                regions += 1
                name = f"_region_{regions}"
                gm.add_submodule(name, getattr(body, inner.target))
                mapping[inner] = gm.graph.get_attr(name)
            out = gm.graph.graph_copy(body.graph, mapping)
        for user in list(node.users):
            user.replace_all_uses_with(out[user.args[1]])
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        if not holder.users:
            gm.graph.erase_node(holder)


def _attach(holder: torch.nn.Module, path: str, value: torch.Tensor) -> None:
    owner = holder
    *parents, leaf = path.split(".")
    for name in parents:
        if not hasattr(owner, name):
            owner.add_module(name, torch.nn.Module())
        owner = getattr(owner, name)
    if isinstance(value, torch.nn.Parameter):
        owner.register_parameter(leaf, value)
    else:
        owner.register_buffer(leaf, value)


_FREED = re.compile(r";\s+[\w\s=]+ = None\s*$")
_C_NN = re.compile(r"torch\._C\._nn\.(\w+)")


def _functional(match: re.Match) -> str:
    name = match.group(1)
    same = getattr(torch.nn.functional, name, None) is getattr(torch._C._nn, name, object())
    return f"torch.nn.functional.{name}" if same else match.group(0)


def forward_code(gm: torch.fx.GraphModule) -> tuple[list[str], str]:
    """(import lines, the ``forward`` method's source, indented for a class body)."""
    code = gm.graph.python_code("self")
    lines = []
    for line in code.src.strip("\n").splitlines():
        line = _FREED.sub("", line.rstrip())
        if line.strip():
            lines.append("    " + _C_NN.sub(_functional, line))
    if "inputs" in gm.meta:  # an exported graph: the module's inputs, tuples taken apart first
        names, unpacking = gm.meta["inputs"]
        lines[0] = f"    def forward(self{''.join(', ' + n for n in names)}):"
        lines[1:1] = ["        " + line for line in unpacking]
    text = "\n".join(lines)
    imports = {"import torch"}
    for name, value in code.globals.items():
        if not re.search(rf"\b{re.escape(name)}\b", text) or name in ("torch", "getattr"):
            continue
        if name in ("inf", "nan"):
            imports.add(f"from math import {name}")
        elif value is torch.device:
            imports.add("from torch import device")
        elif value is type(None):
            imports.add("NoneType = type(None)")
        elif inspect.ismodule(value) and value.__name__.split(".")[0] in ("torch", "math", "operator", "builtins"):
            imports.add(f"import {value.__name__} as {name}" if value.__name__ != name else f"import {name}")
        else:
            raise NotCaptured(f"its graph calls {name} ({type(value).__name__}), which a task file cannot import")
    return sorted(imports, key=lambda i: (i.startswith("NoneType"), i)), text


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else f"float({str(value)!r})"


def tensor_slots(gm: torch.fx.GraphModule, module: torch.nn.Module) -> list[str]:
    """``__init__`` lines that make every parameter and buffer the graph reads, at its path, with
    the module's shape and dtype and values spread as the module's are."""
    persistent = set(module.state_dict(keep_vars=True))
    lines = []
    named = [(n, t, True) for n, t in gm.named_parameters()] + [(n, t, False) for n, t in gm.named_buffers()]
    for name, tensor, is_param in named:
        if tensor.numel() <= SMALL_CONSTANT and not is_param and name not in persistent:
            value = f"torch.tensor({tensor.detach().cpu().tolist()!r}, dtype=torch.{str(tensor.dtype)[6:]})"
        else:
            value = _draw_like(tensor)
        kind = "parameter" if is_param else "buffer" if name in persistent else "constant"
        lines.append(f"        _slot(self, {name!r}, {value}, {kind!r})")
    return lines


def _draw_like(tensor: torch.Tensor) -> str:
    dtype = f"torch.{str(tensor.dtype).removeprefix('torch.')}"
    shape = tuple(tensor.shape)
    if tensor.numel() == 0:
        return f"torch.empty({shape!r}, dtype={dtype})"
    data = tensor.detach()
    if data.is_floating_point():
        data = data.float()
        std = float(data.std()) if data.numel() > 1 else 0.0
        return (f"_draw({shape!r}, {dtype}, low={_number(float(data.min()))}, high={_number(float(data.max()))}, "
                f"mean={_number(float(data.mean()))}, std={_number(std)})")
    if data.dtype == torch.bool:
        return f"_draw({shape!r}, {dtype}, mean={float(data.float().mean())!r})"
    return f"_draw({shape!r}, {dtype}, low={int(data.min())}, high={int(data.max())})"


SLOT = '''
def _slot(owner, path, value, kind):
    """Hold ``value`` at ``path`` (``fc1.weight``) as the module held it: a parameter, a buffer
    (in the state dict) or a constant (a buffer outside it)."""
    *parents, leaf = path.split(".")
    for name in parents:
        if not hasattr(owner, name):
            owner.add_module(name, nn.Module())
        owner = getattr(owner, name)
    if kind == "parameter":
        owner.register_parameter(leaf, nn.Parameter(value))
    else:
        owner.register_buffer(leaf, value, persistent=kind == "buffer")
'''


def graph_body(gm: torch.fx.GraphModule, module: torch.nn.Module) -> tuple[list[str], str]:
    """(imports, the definitions: ``_slot`` and ``Model``) of a captured graph."""
    imports, forward = forward_code(gm)
    slots = tensor_slots(gm, module)
    init = ["    def __init__(self):", "        super().__init__()", *slots]
    body = SLOT.strip("\n") + "\n\n\nclass Model(nn.Module):\n" + "\n".join(init) + "\n\n" + forward
    return sorted({*imports, "import torch.nn as nn"}, key=lambda i: (i.startswith("NoneType"), i)), body
