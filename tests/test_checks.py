"""Static checks: every rule rejects a cheating source from tests/cheats and accepts honest ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from kevin_agent.checks import RULES, run_checks

CHEATS = Path(__file__).parent / "cheats"


def _header(path: Path) -> tuple[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    meta = dict(line[2:].split(":", 1) for line in lines[:2] if line.startswith("# ") and ":" in line)
    return meta.get("expect", "").strip(), meta.get("device", "cpu").strip()


CASES = sorted(CHEATS.glob("*.py"))
CHEATING = [p for p in CASES if _header(p)[0] != "none"]
HONEST = [p for p in CASES if _header(p)[0] == "none"]


@pytest.mark.parametrize("path", CHEATING, ids=lambda p: p.stem)
def test_cheat_is_rejected_by_its_rule(path):
    rule, device = _header(path)
    result = run_checks(path.read_text(encoding="utf-8"), device)
    assert not result.passed
    rules = {v.rule for v in result.violations}
    assert rule in rules, result.summary()
    for v in result.violations:
        assert v.rule in RULES
        assert v.message and v.rule in result.summary()


@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.stem)
def test_honest_candidate_passes(path):
    _, device = _header(path)
    result = run_checks(path.read_text(encoding="utf-8"), device)
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
