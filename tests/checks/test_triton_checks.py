"""The static checks for --language triton: what a kernel body may do, what forward may not, and
what the autotuner may not run. The cheats of tests/cheats/triton go through test_checks.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kevin_agent.checks import run_checks
from kevin_agent.registry import CheckRule, build_registry

HONEST = (Path(__file__).parents[1] / "cheats" / "triton" / "honest_flat.py").read_text(encoding="utf-8")


def _rules(source: str, language: str = "triton") -> set[str]:
    return {v.rule for v in run_checks(source, "cuda", language).violations}


def _variant(old: str, new: str) -> str:
    assert old in HONEST
    return HONEST.replace(old, new)


def test_a_kernel_body_may_reduce_and_multiply_as_triton_does_but_forward_may_not():
    body = "    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)\n"
    inside = _variant(body, body + "    total = x.sum(axis=0) + tl.sum(x, axis=0)\n    sq = x[:, None] @ x[None, :]\n")
    assert _rules(inside) == set()
    outside = _variant("        return out\n", "        return out.sum(0)\n")
    assert _rules(outside) == {"no-torch-compute"}
    assert _rules(_variant("        return out\n", "        return out @ x\n")) == {"no-torch-compute"}


def test_a_kernel_never_launched_is_no_triton_answer():
    never = _variant("        scale_shift_kernel[(triton.cdiv(n, 4096),)](x, out, n, self.scale, BLOCK=4096)\n", "")
    assert _rules(never) == {"uses-triton"}
    assert "no launch of scale_shift_kernel" in run_checks(never, "cuda", "triton").summary()
    jit_from = _variant("import triton\n", "import triton\nfrom triton import jit\n").replace("@triton.jit", "@jit")
    assert _rules(jit_from) == set()


@pytest.mark.parametrize(("decorator", "rules"), [
    ('@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["n_elements"], reset_to_zero=["out_ptr"])',
     set()),
    ('@triton.autotune(configs=[triton.Config({})], key=["n_elements"], post_hook=lambda args, exception: None)',
     {"no-autotune-hooks"}),
    ('@triton.autotune([triton.Config({})], ["n_elements"], {"early_config_prune": lambda c, a: c})',
     {"no-autotune-hooks"}),
    ('@triton.autotune(configs=[triton.Config({}, 4, 3, 1, None, lambda a: None)], key=["n_elements"])',
     {"no-autotune-hooks"}),
    ('@triton.autotune(configs=[triton.Config({})], key=["n_elements"], do_bench=lambda fn, quantiles: [1, 1, 1])',
     {"no-autotune-hooks"}),
])
def test_autotune_tunes_with_configs_alone(decorator, rules):
    assert _rules(_variant("@triton.jit\n", decorator + "\n@triton.jit\n")) == rules


def test_tritons_benchmarks_are_timers_and_its_graph_benchmark_a_graph():
    timer = _variant("        return out\n", "        triton.testing.do_bench(lambda: None)\n        return out\n")
    assert _rules(timer) == {"no-timers"}
    graph = _variant("        return out\n", "        triton.testing.do_bench_cudagraph(lambda: None)\n        return out\n")
    assert _rules(graph) == {"no-streams"}


def test_a_triton_answer_is_refused_where_cuda_is_asked_for_and_rules_without_language_skip_it():
    assert _rules(HONEST, "cuda") == {"uses-load-inline"}
    registry = build_registry()
    assert registry.check(HONEST, "cuda", language="triton").passed
    assert not registry.check(HONEST, "cuda").passed
    seen: list[str] = []
    registry.checks["cuda-only"] = CheckRule("cuda-only", "a plugin's rule",
                                             lambda tree, source, device: seen.append(device) or [])
    registry.check(HONEST, "cuda", language="triton")
    assert seen == []  # a rule that takes no language reads CUDA answers only
    registry.check(HONEST, "cuda")
    assert seen == ["cuda"]
