"""What a kernel module delivered for an extracted task carries besides the kernel: the code that
installs it into the model (``guard.py``'s text, so the module needs torch alone) and the
envelope it was verified in, as a machine-readable line (``# kevin-opt-install: {json}``).

Kept free of torch: the delivery and the ``install`` and ``e2e`` commands read these in the
tool's own process.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

from .groups import group_name
from .marks import INSTALL_PREFIX, extracted_from, line, read_envelope
from .records import ExtractedTask, InstallEnvelope

FOOTER_MARK = "# --- kevin-opt: putting the kernel back into the model "
GUARD_PATH = Path(__file__).with_name("worker") / "guard.py"


def verified_signatures(meta: ExtractedTask, result) -> list[str]:
    """The signatures the kernel was verified at: those the evaluation result lists as checked
    and correct (``result.signatures``: items with ``key`` and ``correct``), else the headline
    signature alone, the only one an evaluation without them checks (``get_inputs()``)."""
    checks = getattr(result, "signatures", None) if result is not None else None
    if checks:
        keys = [_field(c, "key") for c in checks if _field(c, "correct")]
        if keys:
            return keys
    return [meta.signatures[0].key] if meta.signatures else []


def _field(item, name: str):
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def envelope(meta: ExtractedTask, *, device: str, seed: int, verified: list[str], code: str,
             shapes: list[str] | None = None) -> InstallEnvelope:
    return InstallEnvelope(shapes=shapes or [], model_file=meta.model_file, module=meta.module, members=meta.members,
                           class_name=meta.class_name,
                           device=device, training=meta.training, any_mode=meta.any_mode, signatures=verified,
                           recorded=meta.signatures + meta.left_out, init_inputs=meta.init_inputs, seed=seed,
                           code_sha256=hashlib.sha256(code.encode()).hexdigest(), layer_name=meta.layer_name,
                           layer_parameters=meta.layer_parameters)


KERNEL_CODE_NAME = "KEVIN_KERNEL_CODE"


def code_literal(code: str) -> str:
    """The kernel's code as the module's ``KEVIN_KERNEL_CODE``, readable where it can be (a raw
    triple-quoted string) and exact always: the module runs it on the kernel's first call, not on
    import."""
    for quote in ("'''", '"""'):
        literal = f"r{quote}{code}{quote}"
        if quote not in code and not code.endswith("\\"):
            try:
                if ast.literal_eval(literal) == code:
                    return f"{KERNEL_CODE_NAME} = {literal}\n"
            except (SyntaxError, ValueError):
                pass
    return f"{KERNEL_CODE_NAME} = {code!r}\n"


def kernel_source(text: str) -> str | None:
    """The kernel's code held by a delivered module's text (``KEVIN_KERNEL_CODE``); None for a
    module written before it held the code as text."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == KERNEL_CODE_NAME and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            return node.value.value
    return None


@functools.cache
def carried_source(path: Path) -> str:
    """A module of kevin-opt's that a delivered module carries as its own code: its text without its
    docstring and ``__future__`` import."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines()
    start = tree.body[1].lineno if isinstance(tree.body[0], ast.Expr) else tree.body[0].lineno
    kept = [ln for ln in lines[start - 1:] if ln.strip() != "from __future__ import annotations"]
    return "\n".join(kept).strip("\n") + "\n"


def installable(env: InstallEnvelope, code: str, stem: str, language: str = "cuda") -> str:
    """What follows a kernel module's header for a task extracted from a model: the kernel's code
    as text, then the footer that installs it (``stem``: the module's name, which its custom op is
    named by)."""
    return code_literal(code) + install_footer(env, stem, language)


def install_footer(env: InstallEnvelope, stem: str, language: str = "cuda") -> str:
    """The code appended after the kernel's: ``install(model, path)``, ``uninstall(model, path)`` and
    ``kernel_calls(model)``, and ``ModelNew`` made on first use (``language``: the kernel's, cuda or
    triton, which says what building it is)."""
    where = _where(env)
    sigs = ", ".join(env.signatures) or "none"
    envelope_args = (f"signatures=KEVIN_SIGNATURES, device={env.device!r}, "
                     f"training={None if env.any_mode else env.training!r}, seed={env.seed!r}, op=KEVIN_OP")
    return "\n".join([
        "",
        "",
        FOOTER_MARK + "-" * max(0, 99 - len(FOOTER_MARK)),
        f"# install(model) makes {where} run the kernel above for calls at a signature it was verified",
        f"# at ({sigs}) on {env.device}, {mode_words(env)}, without autograd;",
        "# every other call runs the module's original forward. The kernel uses the module's own parameters.",
        line(INSTALL_PREFIX, env),
        "",
        # the guard (the kernel's code runs in a scope of its own: no name of the guard's meets the kernel's)
        carried_source(GUARD_PATH),
        "",
        f"KEVIN_SIGNATURES = {env.signatures!r}",
        f"KEVIN_MODULES = {env.paths!r}",
        f"KEVIN_OP = {'kevin::' + stem!r}",
        f"_KERNEL = KernelSource({stem!r}, {KERNEL_CODE_NAME}, build_dir=os.environ.get(\"TORCH_EXTENSIONS_DIR\")"
        + (f", language={language!r})" if language != "cuda" else ")"),
        "",
        "",
        "def install(model, path=None):",
        '    """Run the kernel in place of each submodule in KEVIN_MODULES (or of the one at ``path``), each on',
        "    its own parameters, where it was verified; returns ``model``. Nothing is built until the kernel's",
        '    first call."""',
        "    for where in KEVIN_MODULES if path is None else [path]:",
        f"        install_kernel(model, where, _KERNEL, {env.init_inputs}, {envelope_args})",
        "    return model",
        "",
        "",
        "def layer_forward(module, *args, **kwargs):",
        '    """The forward of this kernel\'s Hugging Face ``kernels`` layer (the ``*_layer`` repository beside',
        "    this module), for ``module`` whose forward ``kernelize`` replaced: the kernel on the module's own",
        '    parameters where it was verified, the class\'s own forward for every other call."""',
        f"    guard = module.__dict__.get(LAYER_GUARDS, {{}}).get(_KERNEL.name) or layer_guard(",
        f"        module, _KERNEL, {env.init_inputs}, {envelope_args})",
        "    return guard(*args, **kwargs)",
        "",
        "",
        "def uninstall(model, path=None):",
        '    """Give each submodule in KEVIN_MODULES (or the one at ``path``) its original forward back; returns',
        '    ``model``."""',
        "    for where in KEVIN_MODULES if path is None else [path]:",
        "        uninstall_kernel(model, where)",
        "    return model",
        "",
        "",
        "def __getattr__(name):",
        '    """``ModelNew``, the kernel\'s class, made (built or loaded) when it is first asked for."""',
        "    if name == \"ModelNew\":",
        "        kernel_class = _KERNEL.load()",
        "        if kernel_class is None:",
        "            raise ImportError(f\"{_KERNEL.name}: {_KERNEL.error or 'KEVIN_KERNELS=0 turns the kernel off'}\")",
        "        return kernel_class",
        "    raise AttributeError(f\"module {__name__!r} has no attribute {name!r}\")",
        "",
    ])


def mode_words(meta: ExtractedTask | InstallEnvelope) -> str:
    if meta.any_mode:
        return "in either mode (its forward never reads it)"
    return f"in {'training' if meta.training else 'eval'} mode"


def _where(env: InstallEnvelope) -> str:
    if not env.module:
        return f"the model of {env.model_file}"
    if len(env.paths) == 1:
        return f"`{env.module}` of {env.model_file}"
    return f"each of `{group_name(env.paths)}` ({', '.join(env.paths)}) of {env.model_file}"


def report_section(task_path: Path, best_record, device: str, seed: int) -> list[str]:
    """The report's section on putting the kernel back, for a task ``kevin-opt extract`` wrote
    (empty for any other): where it goes and the envelope it runs in."""
    try:
        meta = extracted_from(Path(task_path).read_text(encoding="utf-8"))
    except OSError:
        return []
    if meta is None:
        return []
    verified = verified_signatures(meta, best_record.eval)
    others = [s.key for s in [*meta.signatures, *meta.left_out] if s.key not in verified]
    stem = f"{Path(task_path).stem}_kevin"
    shapes = []
    # the module delivered beside the task for this kernel: the shapes its family check admitted
    env = read_envelope(Path(task_path).with_name(f"{stem}.py"))
    if env is not None and env.code_sha256 == hashlib.sha256(best_record.code.encode()).hexdigest():
        verified, shapes = env.signatures, env.shapes
    which = (f"`{meta.module or '(the whole model)'}` ({meta.class_name}) of `{meta.model_file}`. `install(model)` of "
             "the kernel module replaces that module's forward; the kernel runs on the module's own parameters"
             if len(meta.paths) == 1 else
             f"`{group_name(meta.paths)}` ({meta.class_name}) of `{meta.model_file}`, {len(meta.paths)} modules that "
             f"compute the same thing ({', '.join(f'`{p}`' for p in meta.paths)}). `install(model)` of the kernel "
             "module replaces each one's forward; the kernel runs on each module's own parameters")
    return [
        "## Putting it back into the model", "",
        f"The task was extracted from {which} for calls in this envelope, and the original forward "
        "runs every other call:", "",
        "| | |", "| --- | --- |",
        f"| signatures | {', '.join(f'`{k}`' for k in verified)} |",
        f"| device | {device} |",
        f"| mode | {mode_words(meta).removeprefix('in ')}, without autograd |",
        f"| left to the original forward | {', '.join(f'`{k}`' for k in others) or 'no other signature the model uses'} |",
        "",
        *([*[f"- {line}" for line in shapes], ""] if shapes else []),
        f"`kevin-opt install {meta.model_file} --kernel {stem}.py` shows the change to the model file "
        f"(`--write` writes it); `kevin-opt e2e {meta.model_file} --kernel {stem}.py` times the whole model with "
        "and without it.",
        *([] if not meta.layer_name else [
            "", f"To use it through Hugging Face's kernels: {meta.class_name} is its `{meta.layer_name}` layer, and "
                f"`{stem}_layer/` beside the kernel module is a local layer repository for it; the kernel module's "
                "header gives the `use_kernel_mapping` and `kernelize` lines."]),
    ]


def install_note(env: InstallEnvelope, stem: str) -> list[str]:
    """Header lines of a kernel module that installs itself."""
    extra = [s.key for s in env.recorded if s.key not in env.signatures]
    what = (f"`{env.module or '(the whole model)'}`" if len(env.paths) == 1 else
            f"`{group_name(env.paths)}` ({len(env.paths)} modules, each gets it)")
    lines = [
        "",
        f"Extracted from {what} of {env.model_file}. Put it back into the model with",
        "",
        f"    from {stem} import install",
        "    model = install(model)      # uninstall(model) undoes it",
        "",
        f"It runs for calls at {', '.join(env.signatures)} on {env.device} ({mode_words(env).removeprefix('in ')},"
        " no autograd);",
        "every other call runs the original forward"
        + (f", among them the model's calls at {', '.join(extra)}." if extra else "."),
    ]
    return lines
