"""Static checks: every rule rejects a cheating source from tests/cheats and accepts honest ones.

The honest corpus is tests/cheats/honest_*.py, every kernel in the example responses and the
few-shot examples; the cheats are the other files of tests/cheats, each naming the rule it breaks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kevin_agent.checks.sources import STREAM_WORDS, find, lex
from kevin_agent.checks import RULES, run_checks
from kevin_agent.engine.parsing import parse_response

CHEATS = Path(__file__).parents[1] / "cheats"
ROOT = Path(__file__).resolve().parents[2]


def _meta(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {k.strip(): v.strip() for k, v in (line[2:].split(":", 1) for line in lines[:4]
                                              if line.startswith("# ") and ":" in line)}


def _header(path: Path) -> tuple[str, str]:
    meta = _meta(path)
    return meta.get("expect", ""), meta.get("device", "cpu")


def _language(path: Path) -> str:
    return _meta(path).get("language", "cuda")


# tests/cheats/triton: Triton answers, checked as --language triton checks them.
CASES = sorted(CHEATS.glob("*.py")) + sorted((CHEATS / "triton").glob("*.py"))
CHEATING = [p for p in CASES if _header(p)[0] != "none"]
HONEST = [p for p in CASES if _header(p)[0] == "none"]


@pytest.mark.parametrize("path", CHEATING, ids=lambda p: p.stem)
def test_cheat_is_rejected_by_its_rule(path):
    rule, device = _header(path)
    result = run_checks(path.read_text(encoding="utf-8"), device, _language(path))
    assert not result.passed
    rules = {v.rule for v in result.violations}
    assert rule in rules, result.summary()
    for v in result.violations:
        assert v.rule in RULES
        assert v.message and v.rule in result.summary()


@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.stem)
def test_honest_candidate_passes(path):
    _, device = _header(path)
    result = run_checks(path.read_text(encoding="utf-8"), device, _language(path))
    assert result.passed, result.summary()
    assert result.violations == []


def test_every_rule_has_a_rejecting_cheat():
    covered = {_header(p)[0] for p in CHEATING}
    assert set(RULES) <= covered, f"rules without a cheat: {set(RULES) - covered}"


def test_honest_sources_cover_both_devices():
    assert {_header(p)[1] for p in HONEST} == {"cpu", "cuda"}


HONEST_CPU = (CHEATS / "honest_cpu.py").read_text(encoding="utf-8")


def _variant(old: str, new: str) -> str:
    assert old in HONEST_CPU
    return HONEST_CPU.replace(old, new)


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("return self.ext.scale_shift(x, 2.0, 1.0).reshape(n, c)", "return torch.relu(x)", "no-torch-compute"),
        ("return self.ext.scale_shift(x, 2.0, 1.0).reshape(n, c)", "return F.gelu(x)", "no-torch-compute"),
        ("return self.ext.scale_shift(x, 2.0, 1.0).reshape(n, c)", "return x.softmax(-1)", "no-torch-compute"),
        ("return self.ext.scale_shift(x, 2.0, 1.0).reshape(n, c)", "return x @ self.weight", "no-torch-compute"),
        ("return self.ext.scale_shift(x, 2.0, 1.0).reshape(n, c)",
         "return torch.nn.functional.linear(x, self.weight)", "no-torch-compute"),
        ("self.ext = ext", "self.ext = ext\n        self.norm = nn.LayerNorm(4)", "no-torch-compute"),
        ("import math", "import math\nimport torch.nn.functional as Fn\nact = Fn.relu", "no-torch-compute"),
        ("import math", "import math\nfrom concurrent.futures import ThreadPoolExecutor", "no-threads"),
        ("import math", "import math\nimport subprocess", "no-threads"),
        ("import math", "import math\nimport asyncio", "no-threads"),
        ("import math", "import math\nimport timeit", "no-timers"),
        ("import math", "import math\nimport inspect", "no-harness"),
        ("import math", "import math\nimport gc", "no-harness"),
        ("import math", "import math\nimport sys\nmods = sys.modules", "no-harness"),
        ("import math", "import math\nb = __builtins__", "no-harness"),
        ("import math", "import math\nimport builtins\nbuiltins.print = None", "no-monkeypatch"),
        ("import math", "import math\ntorch.Tensor.__eq__ = lambda a, b: True", "no-monkeypatch"),
        ("import math", "import math\nnn.Module.__call__ = None", "no-monkeypatch"),
        ("import math", "import math\nsetattr(torch, 'allclose', None)", "no-monkeypatch"),
        ("import math", "import math\nclass T(torch.Tensor):\n    x = 1", "no-tensor-subclass"),
        ("import math", "import math\ndef __torch_dispatch__(*a):\n    return a", "no-tensor-subclass"),
        ("int64_t i = 0", "int64_t i = at::cuda::getStreamFromPool().id()", "no-streams"),
    ],
)
def test_single_change_is_caught(old, new, rule):
    assert run_checks(HONEST_CPU, "cpu").passed
    result = run_checks(_variant(old, new), "cpu")
    assert rule in {v.rule for v in result.violations}, result.summary()


@pytest.mark.parametrize(
    "snippet",
    [
        "y = torch.empty((2, 3), dtype=torch.float16, device=x.device)",
        "y = torch.zeros_like(x).view(-1)",
        "y = x.contiguous().reshape(-1).size(0) + x.stride(0) + x.numel() + x.dim()",
        "y = (x.data_ptr(), x.is_contiguous(), x.device, x.dtype, x.shape)",
        "y = x.transpose(0, 1).permute(1, 0).unsqueeze(0).squeeze(0).to(x.device)",
        "y = torch.cuda.current_stream()",
        "y = self.ext.sum(x)",  # a kernel named like a torch op, called on the extension
    ],
)
def test_allocation_views_and_extension_calls_are_allowed(snippet):
    src = _variant("        n, c = x.shape[0], x.size(1)", f"        {snippet}\n        n, c = x.shape[0], x.size(1)")
    result = run_checks(src, "cpu")
    assert result.passed, result.summary()


def test_cpu_requires_cpp_sources_and_cuda_requires_a_global_kernel():
    assert run_checks(HONEST_CPU, "cpu").passed
    cuda = run_checks(HONEST_CPU, "cuda")
    assert [v.rule for v in cuda.violations] == ["uses-load-inline"]
    assert "__global__" in cuda.violations[0].message


def test_violations_carry_lines_and_every_rule_is_described():
    result = run_checks((CHEATS / "try_fallback.py").read_text(encoding="utf-8"), "cpu")
    (v,) = [v for v in result.violations if v.rule == "no-try-except"]
    assert v.line is not None and v.line > 1
    assert all(desc and len(desc) < 200 for desc in RULES.values())


def test_syntax_error_is_a_violation_not_an_exception():
    result = run_checks("class ModelNew(:\n", "cpu")
    assert not result.passed and result.violations[0].rule == "syntax"


# --- the example kernels ----------------------------------------------------------------------

#: Example responses written to break a rule: (file stem, turn) -> the rule.
BREAKS_A_RULE = {("rmsnorm.cpu", 6): "no-torch-compute", ("softmax.cpu", 7): "no-try-except",
                 ("softmax.cpu", 1): "defines-modelnew"}


def _example_kernels():
    for path in sorted((ROOT / "examples").glob("*.jsonl")):
        device = path.stem.split(".")[-1]
        # <task>.triton.jsonl: Triton answers, checked for the cuda device as --language triton does.
        device, language = ("cuda", "triton") if device == "triton" else (device, "cuda")
        for turn, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            code = parse_response(json.loads(line)["text"]).code
            if code is not None:  # the turns cut off while reasoning, or with no code block, have none
                yield pytest.param(code, device, BREAKS_A_RULE.get((path.stem, turn)), language,
                                   id=f"{path.stem}-{turn}")


EXAMPLE_KERNELS = list(_example_kernels())
FEW_SHOT = sorted((ROOT / "prompts" / "examples").glob("*_add.py"))


@pytest.mark.parametrize(("code", "device", "rule", "language"), EXAMPLE_KERNELS)
def test_example_kernels_pass_unless_written_to_break_a_rule(code, device, rule, language):
    result = run_checks(code, device, language)
    if rule is None:
        assert result.passed, result.summary()
    else:
        assert rule in {v.rule for v in result.violations}, result.summary()


def test_example_corpus_covers_both_devices_and_every_rule_breaker():
    ids = {p.id for p in EXAMPLE_KERNELS}
    assert {f"{stem}-{turn}" for stem, turn in BREAKS_A_RULE} <= ids
    assert {p.values[1] for p in EXAMPLE_KERNELS if p.values[2] is None} == {"cpu", "cuda"}
    assert [p.name for p in FEW_SHOT] == ["cpu_add.py", "cuda_add.py", "triton_add.py"]
    assert {p.values[3] for p in EXAMPLE_KERNELS} == {"cuda", "triton"}


@pytest.mark.parametrize("path", FEW_SHOT, ids=lambda p: p.stem)
def test_few_shot_examples_pass(path):
    kind = path.stem.split("_")[0]
    device, language = ("cuda", "triton") if kind == "triton" else (kind, "cuda")
    result = run_checks(path.read_text(encoding="utf-8"), device, language)
    assert result.passed, result.summary()


# --- what a method is called on -----------------------------------------------------------------

def _in_forward(snippet: str) -> str:
    body = "".join(f"        {line}\n" for line in snippet.splitlines())
    return _variant("        n, c = x.shape[0], x.size(1)\n", body + "        n, c = x.shape[0], x.size(1)\n")


@pytest.mark.parametrize(
    "snippet",
    [
        "seen = set()\nseen.add(x.dim())\nseen.add(tuple(x.shape))",
        "keys = []\nkeys.append(3)\nkeys.sort()\nordered = sorted(keys)\nordered.sort(reverse=True)",
        "sizes = {'n': x.size(0)}\nfor name, size in sizes.items():\n    assert name and size",
        "label = ','.join(str(d) for d in x.shape)\nwords = label.split(',')\nwords.sort(key=len)",
        "dims = [i for i in range(x.dim())]\ndims.sort()\nunique = set(dims)\nunique.add(len(dims))",
        "total = 0\nfor i, d in enumerate(list(x.shape)):\n    total += i * d\nacc = [total]\nacc.sort()",
        "count = len(x.shape)\ncount += 1\nhist = {}\nhist.update(a=count)\nset.add(set(), count)",
        "idx = x.tolist()\nidx.sort()\nfirst, *rest = [1, 2, 3]\nrest.sort()",
        "y = self.ext.add(x, 1.0)\ny = self.ext.sort(x)",  # kernels named like tensor methods
    ],
)
def test_python_bookkeeping_is_not_torch_compute(snippet):
    result = run_checks(_in_forward(snippet), "cpu")
    assert result.passed, result.summary()


@pytest.mark.parametrize(
    "snippet",
    [
        "a = []\na = x\na.sum()",
        "a = [x]\na[0].sum()",
        "a = [x]\na.pop().exp()",
        "d = {}\nd.get(0, x).sum()",
        "for v in [x]:\n    v.exp()",
        "[v.exp() for v in (x, x)]",
        "s = set() if n else x\ns.add(1)",
        "total = 0\ntotal += x\ntotal.sum()",
        "a, b = x, []\na.sum()",
        "*a, b = 1, 2, x\nb.exp()",
        "reversed(x).sum()",
        "max([x, x]).sum()",
        "type(x).sum(x)",
        "def same(v):\n    return v\nsame(x).sum()",
        "f = lambda: x\nf().sum()",
        "set = lambda v: v\nset(x).add(1)",
        "class Box:\n    shape = x\nBox().shape.sum()",
        "self.seen = set()\nself.seen = x\nself.seen.add(1)",
        "self.__cache = []\nself._ModelNew__cache = x\nself.__cache.sort()",
    ],
)
def test_a_tensor_behind_a_python_name_is_still_compute(snippet):
    result = run_checks(_in_forward(snippet), "cpu")
    assert "no-torch-compute" in {v.rule for v in result.violations}, result.summary()


# --- kernel sources read as code ----------------------------------------------------------------

@pytest.mark.parametrize(
    ("cpp", "code"),
    [
        ("a = 1; // cudaStreamCreate", "a = 1;"),
        ("a /* cudaStreamCreate */ b", "a b"),
        ('s = "x // y /* z"; t', "s = ; t"),
        ('s = "a \\" b"; t', "s = ; t"),  # an escaped quote does not end the string
        ("c = '\\''; d", "c = ; d"),
        ("c = '\"'; d", "c = ; d"),
        ("n = 1'000'000; m = 'q';", "n = 1'000'000; m = ;"),
        ('r = R"d(a )" // b)d"; e', "r = R ; e"),
        ("f(); // a comment \\\ng(); h();\nk();", "f(); k();"),  # a splice continues the comment
        ("cudaStream\\\nCreate", "cudaStreamCreate"),  # and joins an identifier
        ("/\\\n* c */ x", "x"),
        ('s = "unterminated\nx', "s = x"),
        ("u8'a' + L\"b\" x", "u8 + L x"),
    ],
)
def test_lexing_keeps_only_code(cpp, code):
    assert " ".join(lex(cpp)[0].split()) == code


def test_text_after_a_run_time_piece_is_read_in_every_state():
    after = ('/* ", cudaStreamCreate(&s); // */', None)
    assert find(STREAM_WORDS, [("const char* s = ", None), after]) == []  # a real comment
    assert [w for w, _ in find(STREAM_WORDS, [("const char* s = ", None), None, after])] == ["cudaStreamCreate"]
    fragment = [("/* ', cudaStreamCreate(&s); // */", None)]  # after a run-time "char c = '"
    assert find(STREAM_WORDS, fragment) == [] and find(STREAM_WORDS, fragment, known_start=False) != []


def test_stream_violation_names_the_line_of_the_call():
    path = CHEATS / "stream_after_escaped_quote.py"
    source = path.read_text(encoding="utf-8")
    (v,) = [v for v in run_checks(source, "cuda").violations if v.rule == "no-streams"]
    assert "cudaStreamCreate(&s)" in source.splitlines()[v.line - 1]


def test_load_inline_under_another_name_is_recognized_and_its_sources_read():
    source = (CHEATS / "honest_cpu.py").read_text(encoding="utf-8").replace(
        "from torch.utils.cpp_extension import load_inline", "from torch.utils.cpp_extension import load_inline as build"
    ).replace("ext = load_inline(", "ext = build(")
    assert run_checks(source, "cpu").passed, run_checks(source, "cpu").summary()
    side = source + '\nmake = build\nside = make(name="s", cpp_sources="void f() { cudaStreamCreate(0); }")\n'
    assert "no-streams" in {v.rule for v in run_checks(side, "cpu").violations}
