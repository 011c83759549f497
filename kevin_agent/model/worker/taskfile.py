"""The text of an extracted task file: a KernelBench-convention file (``Model``,
``get_init_inputs``, ``get_inputs``) plus ``get_input_signatures()``, and one metadata line.

The file needs torch and the standard library only. Its inputs are drawn like the recorded ones
(``_draw``): floating tensors from a normal with the recorded mean and spread, clamped to the
recorded range, so that a domain such as "positive only" holds; integer tensors uniform over
their recorded range; booleans with the recorded share of True; strides kept where a tensor was
not contiguous.
"""

from __future__ import annotations

from ..groups import group_name
from ..marks import EXTRACTED_PREFIX, line
from ..records import ArgSpec, ExtractedTask, SignatureCount

DRAW = '''
def _draw(shape, dtype, *, low=None, high=None, mean=None, std=None, stride=None):
    """A tensor like one the model passed: its shape, dtype and strides, values spread as its values were."""
    if stride is not None:
        span = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
        return _draw((span,), dtype, low=low, high=high, mean=mean, std=std).as_strided(shape, stride)
    if dtype == torch.bool:
        return torch.rand(shape) < (0.5 if mean is None else mean)
    if dtype.is_floating_point or dtype.is_complex:
        x = torch.randn(shape) * (1.0 if std is None else std) + (0.0 if mean is None else mean)
        if low is not None and high is not None:
            x = x.clamp(low, high)
        return x.to(dtype)
    low = 0 if low is None else int(low)
    return torch.randint(low, max(low, 1 if high is None else int(high)) + 1, shape, dtype=dtype)
'''


def _num(value: float) -> str:
    text = f"{float(value):.4g}"
    return text if text not in ("inf", "-inf", "nan") else f"float({text!r})"


def draw_call(spec: ArgSpec) -> str:
    """Python that draws one argument like ``spec``."""
    if spec.kind == "tensor":
        parts = [repr(tuple(spec.shape)), f"torch.{spec.dtype}"]
        for name in ("low", "high", "mean", "std"):
            value = getattr(spec, name)
            if value is not None:
                parts.append(f"{name}={_num(value)}")
        if spec.stride is not None:
            parts.append(f"stride={tuple(spec.stride)!r}")
        return f"_draw({', '.join(parts)})"
    if spec.kind in ("list", "tuple"):
        inner = ", ".join(draw_call(item) for item in spec.items)
        return f"[{inner}]" if spec.kind == "list" else f"({inner}{',' if len(spec.items) == 1 else ''})"
    if spec.kind == "value":
        return spec.value
    raise ValueError(f"an argument of type {spec.value} cannot be drawn again")


def render(meta: ExtractedTask, *, how: str, imports: list[str], body: str,
           signatures: list[SignatureCount]) -> str:
    """The whole file: a docstring, the metadata line, ``imports``, ``body`` (which defines
    ``Model``), then the factories."""
    where = group_name(meta.paths) or "the whole model"
    named = ", ".join(meta.paths) if len(meta.paths) <= 6 else f"{', '.join(meta.paths[:3])}, ..., {meta.paths[-1]}"
    group = [f"One task for {len(meta.paths)} instances that compute the same thing ({named}),",
             "each checked against it on its own weights.", ""] if len(meta.paths) > 1 else []
    lines = [
        f'"""`{where}` of {meta.model_file} ({meta.class_name}), extracted by kevin-opt as a task.',
        "",
        *group,
        how,
        "get_inputs() draws the inputs at the signature the model calls it with most;",
        "get_input_signatures() lists every signature one forward of the model uses, with how",
        'many calls per forward use it, most frequent first."""',
        line(EXTRACTED_PREFIX, meta),
        "",
        *imports,
        "",
        "",
        body.strip("\n"),
        "",
        "",
        "def get_init_inputs():",
        f"    return {meta.init_inputs}",
        "",
        DRAW,
    ]
    for i, sig in enumerate(signatures):
        args = ",\n            ".join(draw_call(a) for a in sig.args)
        lines += ["", f"def _inputs_{i}():", f"    # {sig.key}", f"    return [{args}]" if args else "    return []", ""]
    pairs = ", ".join(f"({sig.calls}, _inputs_{i})" for i, sig in enumerate(signatures))
    lines += [
        "",
        "def get_inputs():",
        "    return _inputs_0()",
        "",
        "",
        "def get_input_signatures():",
        '    """(calls per forward, factory) for each signature, most frequent first; factory() gives the inputs."""',
        f"    return [{pairs}]",
        "",
    ]
    return "\n".join(lines)
