"""One module of a model captured as a task file, and the proof that it computes what the module
computes.

The model runs one forward with a hook on the module that keeps, for each distinct signature,
the first call's inputs and outputs. Strategies are tried in order: the module's own source
(``source``), a symbolic ``torch.fx`` trace, then ``torch.export`` (``graph``). A strategy's file
counts only if, imported on its own and loaded with the module's weights, its ``Model`` gives
the recorded outputs bit for bit on every recorded input, and its factories draw inputs of every
recorded signature. When none does, the error names what stopped each one.

A module that is one of a group of identical instances (``model.groups``) gives the group's task:
captured from that module, its signatures the members' (calls summed), and checked the same way
against every member on that member's weights and recorded calls. A member it does not reproduce
(it differs in something its identity does not see, such as a plain tensor attribute) is left
out of the group, with the reason.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import tempfile
from dataclasses import dataclass, field

import torch

from ...evaluate.worker import describe, import_file, same_values
from ..groups import in_model_order, merged_signatures
from ..jobs import CapturedTask
from ..records import ExtractedTask, SignatureCount, SignatureUse
from . import outputs, taskfile
from .graph import export_graph, fx_graph, graph_body, stopped_at
from .guard import bound_call, call_signature
from .loading import LoadedModel, forward
from .profiling import arg_spec, output_bytes
from .source import NotCaptured, source_capture

HOW = {
    "source": "The module's own source from the model file, its class renamed Model.",
    "fx": "Its forward as traced by torch.fx through every submodule, on the module's own parameters.",
    "export": "Its forward as captured by torch.export on the recorded inputs, on the module's own parameters.",
}


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


@dataclass
class Calls:
    """One module's recorded calls: per signature, how often, and the first call's inputs and outputs."""

    signatures: dict[str, SignatureCount] = field(default_factory=dict)
    inputs: dict[str, list] = field(default_factory=dict)
    outputs: dict[str, object] = field(default_factory=dict)
    names: dict[str, list[str]] = field(default_factory=dict)
    """Per signature, the name each input was passed as (``**kwargs`` entries by their keys)."""

    def ordered(self) -> list[SignatureCount]:
        return sorted(self.signatures.values(), key=lambda s: -s.calls)

    def headline_values(self) -> "Calls":
        """The calls whose arguments other than tensors are the most frequent signature's: all a
        graph can hold, since it fixes those values (the others stay with the original forward)."""
        fixed = _fixed(self.ordered()[0])
        return _restricted(self, [k for k, sig in self.signatures.items() if _fixed(sig) == fixed])


def merged(members: list[Calls]) -> Calls:
    """A group's calls: the members' signatures with their calls summed, the first member's inputs
    and outputs (every member is checked on its own)."""
    sigs = merged_signatures([c.ordered() for c in members])
    first = members[0]
    return Calls({s.key: s for s in sigs if s.key in first.inputs}, dict(first.inputs), dict(first.outputs),
                 dict(first.names))


def _restricted(calls: Calls, keys) -> Calls:
    keys = [k for k in keys if k in calls.inputs]
    return Calls({k: calls.signatures[k] for k in keys}, {k: calls.inputs[k] for k in keys},
                 {k: calls.outputs[k] for k in keys}, {k: calls.names[k] for k in keys if k in calls.names})


def _fixed(sig: SignatureCount) -> tuple:
    """A signature's arguments that are not tensors (None where a tensor is)."""
    return tuple(None if _holds_tensor(a) else taskfile.draw_call(a) for a in sig.args)


def _holds_tensor(spec) -> bool:
    return spec.kind == "tensor" or any(_holds_tensor(item) for item in spec.items)


def record_module(loaded: LoadedModel, paths: list[str]) -> dict[str, Calls]:
    calls = {path: Calls() for path in paths}
    handles, pending = [], {path: [] for path in paths}
    for path in paths:
        module = loaded.model.get_submodule(path)

        def before(m, args, kwargs, path=path):
            names, values = bound_call(m.forward, args, kwargs)
            key = call_signature(values)
            pending[path].append(key)
            mine = calls[path]
            if key in mine.signatures:
                mine.signatures[key].calls += 1
            else:
                mine.signatures[key] = SignatureCount(key=key, calls=1, args=[arg_spec(v) for v in values])
                mine.inputs[key] = _clone(values)
                mine.names[key] = names

        def after(m, args, kwargs, out, path=path):
            key = pending[path].pop()
            mine = calls[path]
            if key not in mine.outputs:
                mine.outputs[key] = _clone(out)
                mine.signatures[key].output_bytes = output_bytes(out)

        handles += [module.register_forward_pre_hook(before, with_kwargs=True),
                    module.register_forward_hook(after, with_kwargs=True)]
    try:
        forward(loaded)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def _same(got, want) -> str:
    """Empty when ``got`` is ``want`` bit for bit; else how they differ."""
    g, w = outputs.flatten(got), outputs.flatten(want)
    if [p for p, _ in g] != [p for p, _ in w]:
        return f"it returns {len(g)} values ({', '.join(p for p, _ in g[:4])}), the module {len(w)} " \
               f"({', '.join(p for p, _ in w[:4])})"
    for (path, a), (_, b) in zip(g, w):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or not same_values(a, b):
                diff = (float((a.double() - b.double()).abs().max()) if isinstance(a, torch.Tensor)
                        and a.shape == b.shape and a.dtype == b.dtype else None)
                return f"{path} differs" + (f" (max abs difference {diff:.3g})" if diff is not None else "")
        elif a != b:
            return f"{path} is {a!r}, the module's is {b!r}"
    return ""


def validate(source: str, checks: list[tuple[torch.nn.Module, Calls]], device: str, seed: int) -> list[str]:
    """Per (module, its calls): empty when the file's Model, given that module's weights, reproduces
    it on every one of those recorded inputs and its factories draw recorded signatures; else what
    went wrong."""
    with tempfile.TemporaryDirectory(prefix="kevin-extract-") as folder:
        path = os.path.join(folder, "task.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(source)
        try:
            task = import_file(path, f"kevin_extracted_{abs(hash(source))}")
        except Exception as exc:
            return [f"the written file fails: {describe(exc, path)}"] * len(checks)
        out = []
        for module, calls in checks:
            try:
                out.append(_reproduces(task, module, calls, device, seed))
            except Exception as exc:
                out.append(f"the written file fails: {describe(exc, path)}")
        return out


def _reproduces(task, module: torch.nn.Module, calls: Calls, device: str, seed: int) -> str:
    torch.manual_seed(seed)
    model = task.Model(*task.get_init_inputs())
    mine = model.state_dict()
    model.load_state_dict({k: v for k, v in module.state_dict().items() if k in mine}, strict=True)
    with torch.no_grad():
        # Buffers outside the state dict too: the written Model holds the values the module holds.
        theirs = dict(module.named_buffers())
        for name, buffer in model.named_buffers():
            if name in theirs:
                buffer.copy_(theirs[name])
    model.to(device)
    for _, factory in task.get_input_signatures():
        drawn = call_signature(factory())
        if drawn not in calls.signatures:
            return f"a factory draws inputs of signature {drawn}, which the model never used"
    for key, inputs in calls.inputs.items():
        with torch.no_grad():
            out = model(*_clone(inputs))
        if problem := _same(out, calls.outputs[key]):
            return f"at {key}: {problem}"
    return ""


def _meta(loaded_name: str, path: str, module, capture: str, init: list, calls: Calls, every: Calls,
          members: list[str]) -> ExtractedTask:
    return ExtractedTask(model_file=loaded_name, module=path, members=members if len(members) > 1 else [],
                         class_name=type(module).__name__, capture=capture,
                         training=module.training, any_mode=not _reads_mode(module), init_inputs=repr(list(init)),
                         signatures=[SignatureUse(key=s.key, calls=s.calls) for s in calls.ordered()],
                         left_out=[SignatureUse(key=s.key, calls=s.calls) for s in every.ordered()
                                   if s.key not in calls.signatures],
                         layer_name=(layer := hub_layer_name(type(module))),
                         layer_parameters=forward_parameters(type(module).forward) if layer else [])


def forward_parameters(forward) -> list[str]:
    """``forward``'s parameters after ``self`` as ``ExtractedTask.layer_parameters`` names them."""
    out, kinds = [], inspect.Parameter
    params = list(inspect.signature(forward).parameters.values())[1:]
    for i, p in enumerate(params):
        if p.kind is kinds.KEYWORD_ONLY and (i == 0 or params[i - 1].kind not in (kinds.KEYWORD_ONLY,
                                                                                    kinds.VAR_POSITIONAL)):
            out.append("*")
        out.append({kinds.VAR_POSITIONAL: "*", kinds.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
                   + ("=" if p.default is not p.empty else ""))
        if p.kind is kinds.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.kind):
            out.append("/")
    return out


_HUB_DECORATOR = re.compile(r"""^\s*@(?:\w+\.)*use_kernel_forward_from_hub\(\s*["'](\w+)["']""")


def hub_layer_name(klass: type) -> str:
    """The name Hugging Face's ``kernels`` knows ``klass`` by: its ``kernel_layer_name`` (set by
    ``use_kernel_forward_from_hub`` where that decorator is active), else the decorator written above
    the class in its source (transformers keeps it inert where its pinned ``kernels`` is not
    installed); empty for any other class."""
    name = getattr(klass, "kernel_layer_name", None)
    if isinstance(name, str) and name:
        return name
    try:
        lines, _ = inspect.getsourcelines(klass)
    except (OSError, TypeError):
        return ""
    for text in lines:
        if text.lstrip().startswith("class "):
            break
        if match := _HUB_DECORATOR.match(text):
            return match[1]
    return ""


def _strategies(loaded: LoadedModel, module, calls: Calls):
    """(capture, thunk, the calls it covers) per strategy; a thunk gives (imports, body, init) or
    raises NotCaptured. A graph covers the calls at the headline's values of its other arguments."""
    fixed = calls.headline_values()
    first = fixed.inputs[fixed.ordered()[0].key]
    shapes = {tuple(tuple(a.shape) for a in fixed.inputs[k] if isinstance(a, torch.Tensor)) for k in fixed.inputs}

    def by_source():
        imports, body, init = source_capture(loaded.path, module)
        return imports, in_recorded_mode(body, module), init

    def by_fx():
        return *graph_body(fx_graph(module, _concrete_arguments(module, fixed)), module), []

    def by_export():
        names = fixed.names.get(fixed.ordered()[0].key) or []
        # Sizes free, so that the written graph runs at the sizes a model calls it at (the family check
        # tries them: a transformers layer at every sequence length); held at the one shape the profile
        # saw where export cannot free them.
        try:
            return *graph_body(export_graph(module, first, dynamic=True, names=names), module), []
        except NotCaptured:
            if len(shapes) > 1:
                raise
        return *graph_body(export_graph(module, first, dynamic=False, names=names), module), []

    return [("source", by_source, calls), ("fx", by_fx, fixed), ("export", by_export, fixed)]


def _reads_mode(module: torch.nn.Module) -> bool:
    """Whether any forward in the module reads ``self.training`` (dropout, batch norm, ...)."""
    for sub in module.modules():
        try:
            if "training" in inspect.getsource(type(sub).forward):
                return True
        except (OSError, TypeError):
            return True
    return False


def in_recorded_mode(body: str, module: torch.nn.Module) -> str:
    """``body`` with ``Model`` made in eval mode when the model ran the module in it and its
    forward depends on the mode (a task's Model is otherwise made in training mode)."""
    if module.training or not _reads_mode(module):
        return body
    lines = body.splitlines()
    cls = next(n for n in ast.parse(body).body if isinstance(n, ast.ClassDef) and n.name == "Model")
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    note = "self.eval()  # the model runs this module in eval mode"
    if init is not None:
        indent = " " * init.body[0].col_offset
        lines.insert(init.end_lineno, indent + note)
    else:
        indent = " " * cls.body[0].col_offset
        lines[cls.body[0].lineno - 1:cls.body[0].lineno - 1] = [
            f"{indent}def __init__(self, *args, **kwargs):", f"{indent}    super().__init__(*args, **kwargs)",
            f"{indent}    {note}", ""]
    return "\n".join(lines)


def _concrete_arguments(module, calls: Calls) -> dict:
    """Arguments that are not tensors, fixed at their recorded value (the same in every call)."""
    names = [p.name for p in inspect.signature(module.forward).parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    out = {}
    for i, name in enumerate(names):
        values = [inputs[i] for inputs in calls.inputs.values() if i < len(inputs)]
        # a tuple of tensors (transformers' position_embeddings) is an input like a tensor
        if values and not any(_holds_tensors(v) for v in values):
            if any(v != values[0] for v in values) or not _literal(values[0]):
                raise NotCaptured(f"its argument {name} takes values a graph cannot hold fixed")
            out[name] = values[0]
    return out


def _holds_tensors(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_tensors(v) for v in value)
    return isinstance(value, torch.Tensor)


def _literal(value) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        return False


def capture(loaded: LoadedModel, path: str, members: list[str], calls: dict[str, Calls], model_file: str,
            seed: int) -> CapturedTask:
    """The task for the group of ``members`` (one module: a group of one), captured from the one at
    ``path`` and checked against it first."""
    module = loaded.model.get_submodule(path)
    members = [path, *(m for m in members if m != path)]
    group = merged([calls[m] for m in members])
    if not group.signatures:
        return CapturedTask(module=path, error=f"{path or 'the model'} is never called in a forward")
    others = [s for s in group.ordered() if any(a.kind == "other" for a in s.args)]
    if others:
        bad = next(a for a in others[0].args if a.kind == "other")
        return CapturedTask(module=path, error=f"it is called with a {bad.value} argument, which a task file "
                                               "cannot draw")
    tried = []
    for capture_kind, attempt, covered in _strategies(loaded, module, group):
        try:
            imports, body, init = attempt()
        except NotCaptured as exc:
            tried.append(str(exc))
            continue
        except Exception as exc:  # kevin-opt's own writer meeting a graph it does not know: this way fails, not the run
            tried.append(f"kevin-opt's {capture_kind} capture failed on it ({stopped_at(exc)}; a fault of "
                         "kevin-opt's, please report it)")
            continue

        def source(kept: list[str], left: dict[str, str]) -> str:
            both = merged([calls[m] for m in kept])
            mine = _restricted(both, covered.signatures)
            meta = _meta(model_file, path, module, capture_kind, init, mine, both, in_model_order(kept))
            meta.not_members = left
            return taskfile.render(meta, how=HOW[capture_kind], imports=imports, body=body,
                                   signatures=mine.ordered())

        checks = [(loaded.model.get_submodule(m), _restricted(calls[m], covered.signatures)) for m in members]
        problems = validate(source(members, {}), checks, loaded.device, seed)
        if problems[0]:
            tried.append(f"its {capture_kind} capture does not reproduce it: {problems[0]}")
            continue
        kept = [m for m, problem in zip(members, problems) if not problem]
        left = {m: problem for m, problem in zip(members, problems) if problem}
        return CapturedTask(module=path, source=source(kept, left), members=in_model_order(kept), not_members=left)
    return CapturedTask(module=path, error="; ".join(tried))
