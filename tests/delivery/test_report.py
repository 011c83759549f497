"""The benchmark report (markdown, json, chart) and the kernel module's header."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys

from ..run_records import correct, failed, run_info, sample_records, write_task

from kevin_agent.delivery.kernel_module import render_kernel_module
from kevin_agent.delivery.report import build_report_data, render_markdown, write_report
from kevin_agent.results import Status, best_record
from kevin_agent.results.records import SCHEMA, to_json

PURE_CANDIDATE = '''\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clamp_min(0)
'''


def test_best_is_the_fastest_correct_turn(tmp_path):
    records = sample_records()
    best = best_record(records)
    assert (best.trajectory, best.turn, best.speedup) == (0, 3, 1.83)
    assert best_record([failed(0, 1, Status.COMPILE_ERROR, "x")]) is None
    # The earliest wins a tie.
    tie = [correct(0, 1, 1.5), correct(1, 1, 1.5)]
    assert best_record(tie) is tie[0]


def test_markdown_has_table_timings_evidence_and_flags(tmp_path):
    task = write_task(tmp_path)
    md = render_markdown(run_info(task), sample_records(), "my_relu_kevin_report.png")
    lines = md.splitlines()
    assert lines[0] == "# kevin-opt report: my_relu (`MyRelu`)"
    assert "| turn | trajectory 0 | trajectory 1 |" in lines
    assert "| 1 | compile error | incorrect |" in lines
    assert "| 2 | 1.40x | 1.10x |" in lines
    assert "| 3 | **1.83x** (best) | check failed |" in lines
    assert "## Best kernel: trajectory 0, turn 3" in md
    # Timings: kernel 2.0/1.83 ms, eager 2.0 ms, torch.compile 2.0/1.83*1.21 ms, with spread.
    assert "| kernel (`ModelNew`) | 1.093 | 1.038 - 1.202 | 0.0546 | 20 | - |" in lines
    assert "| eager PyTorch | 2.000 | 1.900 - 2.200 | 0.100 | 20 | 1.83x |" in lines
    assert "| `torch.compile` | 1.322 | 1.256 - 1.455 | 0.0661 | 20 | 1.21x |" in lines
    assert "| task | `my_relu.py` (class `MyRelu`, sha256 " in md and str(tmp_path) not in md
    assert "- trials passed: 5 / 5" in md
    assert "- max absolute error: 3.2e-07 (atol 1e-05)" in lines
    assert "- max relative error: 1.5e-06 (rtol 1e-05)" in lines
    assert "- trajectory 0 turn 3: speedup above 10x of memory bandwidth bound" in lines
    assert "| torch | 2.13.0+cpu |" in lines and "| driver | none |" in lines
    assert "| backend / model | scripted / `cognition-ai/Kevin-32B` |" in lines
    assert "| device | cpu (Test CPU 9000) |" in lines
    assert "![speedup over turns](my_relu_kevin_report.png)" in lines
    assert "![" not in render_markdown(run_info(task), sample_records())


def test_markdown_without_a_correct_turn(tmp_path):
    task = write_task(tmp_path)
    records = [failed(0, 1, Status.RUNTIME_ERROR, "illegal memory access")]
    md = render_markdown(run_info(task), records, "c.png")
    assert "## No verified kernel" in md
    assert "| 1 | runtime error |" in md
    assert "Best kernel" not in md


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_write_report_writes_md_json_and_png(tmp_path):
    task = write_task(tmp_path)
    paths = write_report(run_info(task), sample_records(), tmp_path / "out", "my_relu")
    assert paths.markdown.name == "my_relu_kevin_report.md"
    assert paths.json.name == "my_relu_kevin_report.json"
    assert paths.chart.name == "my_relu_kevin_report.png"
    assert "![speedup over turns](my_relu_kevin_report.png)" in paths.markdown.read_text()
    assert _png_size(paths.chart.read_bytes()) == (960, 540)

    data = json.loads(paths.json.read_text())
    assert data == json.loads(to_json(build_report_data(run_info(task), sample_records())))
    assert (data["schema"], data["kind"], data["turns_per_trajectory"]) == (SCHEMA, "report", 3)
    best = data["best"]
    assert (best["trajectory"], best["turn"], best["speedup"], best["speedup_vs_compile"]) == (0, 3, 1.83, 1.21)
    assert best["timings"]["eager"]["median_ms"] == 2.0
    assert abs(best["timings"]["kernel"]["median_ms"] - 2.0 / 1.83) < 1e-12
    assert best["timings"]["kernel"]["p90_ms"] > best["timings"]["kernel"]["p10_ms"]
    assert best["timings"]["torch_compile"]["runs"] == 20
    assert best["correctness"] == {"trials": 5, "trials_passed": 5, "max_abs_err": 3.2e-7,
                                   "max_rel_err": 1.5e-6, "atol": 1e-5, "rtol": 1e-5, "tolerance": None,
                                   "reference_tf32": None, "rounding": ""}
    assert data["versions"]["torch"] == "2.13.0+cpu"
    assert data["task"] == {"file": "my_relu.py", "name": "my_relu", "class_name": "MyRelu", "digest": task.digest}
    assert data["status_counts"] == {"compile_error": 1, "incorrect": 1, "correct": 3, "check_failed": 1}
    assert [(r["trajectory"], r["turn"], r["status"], r["speedup"]) for r in data["turns"]] == [
        (0, 1, "compile_error", None), (0, 2, "correct", 1.4), (0, 3, "correct", 1.83),
        (1, 1, "incorrect", None), (1, 2, "correct", 1.1), (1, 3, "check_failed", None),
    ]
    assert data["flags"] == [{"trajectory": 0, "turn": 3, "flag": "speedup above 10x of memory bandwidth bound"}]


def test_chart_changes_with_the_data(tmp_path):
    # The chart is drawn from the records, not a fixed image.
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    from kevin_agent.delivery.report import plot_speedups

    info = run_info(write_task(tmp_path))
    plot_speedups(info, sample_records(), a)
    plot_speedups(info, sample_records()[:3], b)
    assert a.read_bytes() != b.read_bytes()
    plot_speedups(info, [], tmp_path / "empty.png")
    assert _png_size((tmp_path / "empty.png").read_bytes()) == (960, 540)


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def test_kernel_module_header_and_importable(tmp_path):
    task = write_task(tmp_path)
    best = correct(0, 3, 1.83, vs_compile=1.21, code=PURE_CANDIDATE)
    text = render_kernel_module(task, best, run_info(task))
    assert text.endswith(PURE_CANDIDATE)  # the verified source, unchanged
    path = tmp_path / "my_relu_kevin.py"
    path.write_text(text)
    module = _import(path, "my_relu_kevin")
    doc = module.__doc__
    assert "drop-in replacement for `MyRelu` in my_relu.py" in doc
    assert "speedup vs eager PyTorch:  1.83x" in doc
    assert "speedup vs torch.compile:  1.21x" in doc
    assert "Test CPU 9000" in doc and "20250101-120000-my-relu-ab12" in doc and "cognition-ai/Kevin-32B" in doc
    assert "from my_relu_kevin import ModelNew" in doc
    assert "instead of MyRelu(*init_args)" in doc
    import torch

    x = torch.randn(8, 8)
    assert torch.equal(module.ModelNew()(x), torch.relu(x))


def test_kernel_module_with_its_own_docstring_and_future_import(tmp_path):
    task = write_task(tmp_path)
    code = '"""Candidate."""\nfrom __future__ import annotations\n\n' + PURE_CANDIDATE
    text = render_kernel_module(task, correct(0, 1, 1.2, code=code), run_info(task))
    assert text.endswith(code)
    assert text.startswith("# Generated by kevin-opt")
    path = tmp_path / "my_relu_kevin.py"
    path.write_text(text)
    module = _import(path, "my_relu_kevin_future")
    assert module.__doc__ == "Candidate." and hasattr(module, "ModelNew")


def test_kernel_module_header_survives_quotes_in_names(tmp_path):
    task = write_task(tmp_path)
    info = run_info(task, model='weird"""model\\')
    text = render_kernel_module(task, correct(0, 1, 1.2, code=PURE_CANDIDATE), info)
    compile(text, "m.py", "exec")
    assert text.startswith('"""')


def test_stage_totals_sum_the_recorded_stage_times(tmp_path):
    from kevin_agent.results import StageTimes

    records = sample_records()
    assert build_report_data(run_info(write_task(tmp_path)), records).stage_totals_s is None
    assert "## Evaluation time" not in render_markdown(run_info(write_task(tmp_path)), records)
    times = [StageTimes(queue=1.0, compile=30.0, load=0.1, correctness=0.4, timing=0.5),
             StageTimes(queue=2.0, compile=0.0, load=0.2, correctness=0.6, timing=1.5)]
    for rec, t in zip((records[0], records[2]), times):
        rec.eval.stage_s = t
    data = build_report_data(run_info(write_task(tmp_path)), records).model_dump(mode="json")
    assert data["stage_totals_s"] == {"queue": 3.0, "compile": 30.0, "load": 0.3, "correctness": 1.0,
                                      "timing": 2.0, "evaluations": 2}
    md = render_markdown(run_info(write_task(tmp_path)), records)
    assert "summed over 2 evaluations" in md
    assert "| queue | compile | load | correctness | timing | total |" in md
    assert "| 3.0 | 30.0 | 0.3 | 1.0 | 2.0 | 36.3 |" in md


def test_the_charts_star_sits_at_the_number_its_legend_says_the_confirmed_one(tmp_path):
    from kevin_agent.delivery.report.chart import speedup_figure
    from kevin_agent.store import RunStore

    from ..tui_support import confirmed_run

    run = RunStore.open(tmp_path, confirmed_run(tmp_path).name)  # turn 3: 2.00x its own, 2.70x confirmed
    ax = speedup_figure(run.info, run.records()).axes[0]
    (star,) = [c for c in ax.collections if c.get_label().startswith("best:")]
    assert list(star.get_offsets()[0]) == [3.0, 2.7]
    assert star.get_label() == "best: 2.70x confirmed (trajectory 0, turn 3; its turn 2.00x)"
    assert star.get_label() in [t.get_text() for t in ax.get_legend().get_texts()]
