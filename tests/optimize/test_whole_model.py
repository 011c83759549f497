"""How an optimize says and decides the whole model with its kernels: one speedup (the interleaved
one) with its 95% interval, in the lines, the record, the report and the commit, and the kept
kernels dropped together only where that whole interval is below 1, as a single kernel is. Real
whole-model workers on the example stack, with a kernel module whose norm is written in PyTorch:
once as fast as the module's own forward (its speedup near 1, whichever side of 1 the noise puts
its median), once doing forty times the work."""

from __future__ import annotations

import io
import re
import subprocess

import pytest

from kevin_agent.cli.optimize_command import OptimizeLines
from kevin_agent.model.modelfile import load_model_file
from kevin_agent.optimize import deliver as delivering

from ..conftest import git_init
from .kernels import ORIGINAL, kept_session, kernel_module_source

pytestmark = [pytest.mark.slow, pytest.mark.timing]

SPEEDUP = re.compile(r"(\d+\.\d\d)x \[(\d+\.\d\d), (\d+\.\d\d)\]")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("extract")


def combined(tmp_path, source: str):
    repo = git_init(tmp_path / "proj")
    (repo / "layer_stack.py").write_bytes(ORIGINAL)
    subprocess.run(["git", "-C", repo, "add", "."], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-qm", "my model"], check=True)
    session = kept_session(repo, source)
    session.record.groups[0].state = "verified"
    session.record.measured = session.record.measured_interval = None
    out = io.StringIO()
    try:
        delivering.combine_and_deliver(session, load_model_file(repo / "layer_stack.py"), None, OptimizeLines(out))
    finally:
        session.close()
    return repo, session.record, out.getvalue()


def one_speedup(text: str) -> tuple[float, float, float]:
    """The one whole-model speedup the lines give, as (median, low, high)."""
    line = next(ln for ln in text.splitlines() if ln.startswith("whole model"))
    (found,) = SPEEDUP.findall(line)
    assert "best of" not in text and "interleaved" in line
    return tuple(float(v) for v in found)


def test_one_number_with_its_interval_decides_and_is_the_one_committed(tmp_path, work):
    repo, record, text = combined(tmp_path, kernel_module_source(work))
    median, low, high = one_speedup(text)
    e2e = record.e2e
    assert low <= median <= high and e2e.speedup_interval[0] <= e2e.speedup <= e2e.speedup_interval[1]
    assert (median, low, high) == tuple(round(v, 2) for v in (e2e.speedup, *e2e.speedup_interval))
    group = record.groups[0]
    assert (group.kernel_calls, group.fallback_calls) == (3, 0) and e2e.outputs_match
    # as fast as the module's own forward: kept unless the whole interval is below 1
    assert (group.state == "kept") == (e2e.speedup_interval[1] >= 1.0), (group.state, group.why, text)
    if group.state == "kept":
        assert record.measured == e2e.speedup and record.measured_interval == e2e.speedup_interval
        subject = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%s"], capture_output=True, text=True,
                                 check=True).stdout
        assert f"the whole model {median:.2f}x [{low:.2f}, {high:.2f}]" in subject
        report = (repo / "layer_stack_kevin_model_report.md").read_text()
        assert f"| measured, with the kept kernels | {median:.2f}x [{low:.2f}, {high:.2f}] |" in report


def test_a_combination_slower_beyond_the_noise_is_dropped_on_its_interval(tmp_path, work):
    repo, record, text = combined(tmp_path, kernel_module_source(work, repeat=40))
    median, low, high = one_speedup(text)
    group = record.groups[0]
    assert high < 1.0 and group.state == "dropped" and "slower with it, beyond the noise" in group.why
    assert f"{median:.2f}x [{low:.2f}, {high:.2f}]" in group.why
    assert record.status == "nothing" and record.measured is None and record.commit is None
    assert (repo / "layer_stack.py").read_bytes() == ORIGINAL


def test_under_compile_a_slower_model_is_said_as_compiled_not_as_beyond_the_noise(tmp_path, work, monkeypatch):
    """``--mode compile`` decides on the compiled model's speedup, one median with no interval: the
    reason says so, where eager's says "beyond the noise" of its interval (the H200's LLaMA, both
    kernels dropped at 0.99x compiled, read "beyond the noise (0.99x)")."""
    from types import SimpleNamespace

    from kevin_agent.config import EvalSettings
    from kevin_agent.delivery.e2e import _result
    from kevin_agent.model.jobs import E2ERun
    from kevin_agent.results.records import KernelEffect

    def compiled_measure(model_file, kernels, settings, **_):
        effect = KernelEffect(kernel_file=str(kernels[0]), module="layers.*.norm x3",
                              members=[f"layers.{i}.norm" for i in range(3)], module_speedup=2.0)
        runs = [E2ERun(forward_ms=1.0, speedup=1.2, ratios=[1.2] * 9, compiled_speedup=0.99, compiled_ms=0.5,
                       compiled_kernel_ms=0.505, eager_over_compiled=0.6, compiled_match=True, compiled_kernel_calls=3)]
        return _result(SimpleNamespace(given=str(model_file.path)), EvalSettings(device="cpu", e2e_mode="compile"),
                       None, [effect], [effect], runs, runs, rounds=1, wall_s=0.0)

    monkeypatch.setattr(delivering, "measure", compiled_measure)
    repo, record, _ = combined(tmp_path, kernel_module_source(work))
    (group,) = record.groups
    assert record.e2e.mode == "compile" and record.e2e.slower and record.e2e.speedup_interval is None
    assert group.state == "dropped" and group.why == "under torch.compile the whole model is slower with it (0.99x)"
    assert record.status == "nothing" and (repo / "layer_stack.py").read_bytes() == ORIGINAL
