"""Kevin's prompt: golden renderings, feedback sentences, the context budget."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import jinja2
import pytest

from kevin_agent.engine import prompting
from kevin_agent.errors import ConfigError
from kevin_agent.engine.prompting import (
    Attempt,
    RenderedPrompt,
    feedback_sentence,
    render_prompt,
    trim_error,
)
from kevin_agent.results import Status
from kevin_agent.task import load_task

GOLDEN = Path(__file__).parents[1] / "golden"
UPDATE = os.environ.get("KEVIN_UPDATE_GOLDEN") == "1"
RESTART = "Restart your reasoning process and generate new, complete code."


def words(text: str) -> int:
    """A deterministic stand-in for a tokenizer: the golden budgets depend on it."""
    return len(text.split())


@pytest.fixture(scope="module")
def task():
    return load_task(GOLDEN / "layernorm_task.py")


def attempts() -> list[Attempt]:
    kernel = (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        'source = """__global__ void ln_kernel_v{n}(const float* x, float* y) {{}}"""\n\n'
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    return [
        Attempt(code="", summary="", feedback=feedback_sentence(
            Status.PARSE_ERROR, error="no ```python code block was found in the answer.")),
        Attempt(code=kernel.format(n=2), summary="Fused mean and variance into one kernel.",
                feedback=feedback_sentence(
                    Status.COMPILE_ERROR, error="main.cu(12): error: identifier \"blockDim\" is undefined")),
        Attempt(code=kernel.format(n=3), summary="Fixed the launch configuration.",
                feedback=feedback_sentence(Status.INCORRECT, error="max abs error 0.42 > atol 1e-4")),
        Attempt(code=kernel.format(n=4), summary="Used warp shuffles for the row reduction.",
                feedback=feedback_sentence(Status.CORRECT, speedup=1.3712)),
    ]


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with KEVIN_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), (
        f"rendered prompt differs from {path}; if the change is intended, "
        "rerun with KEVIN_UPDATE_GOLDEN=1 and review the diff"
    )


def test_first_turn_cuda_golden(task):
    out = render_prompt(task, device="cuda", device_name="NVIDIA H200", attempts=[],
                        budget_tokens=100_000, count_tokens=words)
    check_golden("first_turn_cuda.txt", out.text)
    assert out.dropped == 0 and out.tokens == words(out.text)
    text = out.text
    assert text.startswith("You are given the following architecture:\n\n")
    assert task.model_source.strip() in text
    assert "optimizing for performance on NVIDIA H200" in text
    for phrase in ("shared memory, kernel fusion, warp primitives, vectorization",
                   "torch.utils.cpp_extension.load_inline", "ModelNew",
                   "not allowed to use torch.nn (except for Parameter, containers, and init)",
                   "have to be on CUDA device", "no testing code",
                   "feedback on its correctness and speedup",
                   "summarize your changes in a few sentences"):
        assert phrase in text, phrase
    # The one example comes after the instruction and is the shipped file.
    assert "Here is an example:" in text
    assert prompting.example_source("cuda").strip() in text
    assert text.index("Here is an example:") > text.index("summarize your changes")
    assert "previous attempts" not in text and RESTART not in text


def test_first_turn_cpu_golden(task):
    out = render_prompt(task, device="cpu", device_name="AMD EPYC (2 cores)", attempts=[],
                        budget_tokens=100_000, count_tokens=words)
    check_golden("first_turn_cpu.txt", out.text)
    text = out.text
    assert "raw C++ kernels" in text and "CUDA kernels" not in text
    assert "have to be on CPU device" in text
    assert "optimizing for performance on AMD EPYC (2 cores)" in text
    assert "cpp_sources" in text
    assert prompting.example_source("cpu").strip() in text
    assert "__global__" not in text


def test_later_turn_golden_drops_earliest_first(task):
    all_attempts = attempts()
    fits_three = words(render_prompt(
        task, device="cuda", device_name="NVIDIA H200", attempts=all_attempts[1:],
        budget_tokens=100_000, count_tokens=words).text)
    out = render_prompt(task, device="cuda", device_name="NVIDIA H200", attempts=all_attempts,
                        budget_tokens=fits_three, count_tokens=words)
    check_golden("later_turn_cuda.txt", out.text)
    assert out.dropped == 1 and out.tokens == fits_three
    text = out.text
    # The earliest attempt (the parse error) is gone; the others appear oldest first.
    assert "failed to be parsed" not in text
    positions = [text.index(a.feedback) for a in all_attempts[1:]]
    assert positions == sorted(positions)
    for a in all_attempts[1:]:
        assert a.code.strip() in text and a.summary in text
    assert text.index("Here are your previous attempts:") > text.index("summarize your changes")
    assert text.rstrip().endswith(RESTART)
    # Later turns carry no example.
    assert "Here is an example:" not in text
    assert "elementwise_add" not in text

    tighter = render_prompt(task, device="cuda", device_name="NVIDIA H200", attempts=all_attempts,
                            budget_tokens=fits_three - 1, count_tokens=words)
    assert tighter.dropped == 2
    assert all_attempts[2].feedback in tighter.text and all_attempts[1].feedback not in tighter.text


def test_all_attempts_kept_when_they_fit(task):
    all_attempts = attempts()
    out = render_prompt(task, device="cpu", device_name="cpu", attempts=all_attempts,
                        budget_tokens=100_000, count_tokens=words)
    assert isinstance(out, RenderedPrompt) and out.dropped == 0
    assert out.text.count("Your previous answer") == len(all_attempts)


def test_context_too_small_is_a_config_error(task):
    with pytest.raises(ConfigError, match="context is too small") as info:
        render_prompt(task, device="cuda", device_name="NVIDIA H200", attempts=attempts(),
                      budget_tokens=50, count_tokens=words)
    assert "KEVIN_CONTEXT_TOKENS" in (info.value.hint or "")
    with pytest.raises(ConfigError):
        render_prompt(task, device="cuda", device_name="NVIDIA H200", attempts=[],
                      budget_tokens=50, count_tokens=words)


def test_later_turn_with_every_attempt_dropped_is_the_bare_base_prompt(task):
    first = render_prompt(task, device="cuda", device_name="X", attempts=[],
                          budget_tokens=100_000, count_tokens=words).text
    base = first[: first.index("\n\nHere is an example:")]
    huge = Attempt(code="x = 1\n" * 5000, summary="s", feedback="f")
    out = render_prompt(task, device="cuda", device_name="X", attempts=[huge],
                        budget_tokens=words(base) + 5, count_tokens=words)
    assert out.dropped == 1
    assert out.text.rstrip() == base.rstrip()


def test_unknown_device_is_a_config_error(task):
    with pytest.raises(ConfigError, match="tpu"):
        render_prompt(task, device="tpu", device_name="x", attempts=[], budget_tokens=10**6,
                      count_tokens=words)


def test_templates_are_strict_and_come_from_the_package():
    files = resources.files("kevin_agent.prompts")
    for name in ("prompt.j2", "instruction_cuda.j2", "instruction_cpu.j2", "feedback.j2"):
        assert files.joinpath(name).is_file(), name
    template = prompting._environment().get_template("prompt.j2")
    with pytest.raises(jinja2.UndefinedError):
        template.render(device="cuda", device_name="x", example=None, attempts=[])


def test_renamed_class_is_shown_as_model(tmp_path):
    src = (GOLDEN / "layernorm_task.py").read_text().replace("Model", "MyLayerNorm")
    path = tmp_path / "mine.py"
    path.write_text(src)
    task = load_task(path, class_name="MyLayerNorm")
    text = render_prompt(task, device="cuda", device_name="G", attempts=[], budget_tokens=10**6,
                         count_tokens=words).text
    assert "class Model(nn.Module)" in text and "MyLayerNorm" not in text


# --- feedback sentences ---------------------------------------------------------------

@pytest.mark.parametrize(
    ("status", "opening"),
    [
        (Status.PARSE_ERROR, "Your previous answer failed to be parsed due to not adhering to the "
                             "desired formatting. Here is the error message: boom"),
        (Status.CHECK_FAILED, "Your previous answer was rejected before compiling because it broke "
                              "the rules of the task. Here is the error message: boom"),
        (Status.COMPILE_ERROR, "Your previous answer failed to compile. Here is the error message: boom"),
        (Status.RUNTIME_ERROR, "Your previous answer compiled successfully but had runtime errors. "
                               "Here is the error message: boom"),
        (Status.INCORRECT, "Your previous answer was incorrect. Here is the error message: boom"),
        (Status.TIMEOUT, "Your previous answer did not finish within the time limit. "
                         "Here is the error message: boom"),
    ],
)
def test_failure_sentences(status, opening):
    assert feedback_sentence(status, error="boom") == opening
    assert feedback_sentence(status.value, error="boom") == opening


def test_each_status_has_its_own_sentence():
    shown = [s for s in Status if s is not Status.CANCELLED]
    sentences = {feedback_sentence(s, error="e", speedup=1.0) for s in shown}
    assert len(sentences) == len(shown)
    assert all(s.count("Your previous answer") == 1 for s in sentences)


def test_a_cancelled_generation_has_no_sentence_for_the_model():
    with pytest.raises(ValueError, match="never shown to the model"):
        feedback_sentence(Status.CANCELLED)


def test_correct_sentence_names_the_speedup():
    assert feedback_sentence(Status.CORRECT, speedup=1.2345) == (
        "Your previous answer was correct but can be made faster. Here is the speedup you "
        "achieved relative to the baseline: 1.23x"
    )
    flagged = feedback_sentence(Status.CORRECT, speedup=42.0, flags=["implausible speedup above 10x"])
    assert flagged.endswith("42.00x (flagged: implausible speedup above 10x)")
    assert "unknown" in feedback_sentence(Status.CORRECT)


def test_errors_are_trimmed():
    log = "\n".join(f"error line {i}" for i in range(500))
    sentence = feedback_sentence(Status.COMPILE_ERROR, error=log)
    assert "error line 0" in sentence and "error line 39" in sentence
    assert "error line 40" not in sentence and "truncated" in sentence
    long_line = "x" * 20_000
    trimmed = trim_error(long_line)
    assert len(trimmed) < prompting.MAX_ERROR_CHARS + 100 and trimmed.endswith("truncated)")
    assert trim_error("  short  ") == "short"
    assert trim_error("") == "(no error message)"


def test_the_roofline_never_reaches_the_model():
    """The feedback a turn records (and the next prompt shows) is the sentence Kevin was trained on,
    the same whether the evaluation measured the kernel's share of its roofline or not."""
    from kevin_agent.engine.draft import Draft
    from kevin_agent.protocols import Generation, Slot
    from kevin_agent.results.evaluation import EvalResult, Roofline, Stage

    roof = Roofline(bytes=8 << 20, bandwidth_gb_s=4300.0, floor_ms=0.00195, bound="memory", fraction=0.93,
                    reference_fraction=0.18, compiled_fraction=0.33)

    def feedback(roofline) -> str:
        draft = Draft(slot=Slot(trajectory=0), turn=1, prompt="p", dropped=0, gen=Generation(text="t"), gen_s=0.0,
                      started="2026-12-02T00:00:00")
        draft.apply_eval(EvalResult(status=Status.CORRECT, stage=Stage.DONE, correct=True, speedup=1.88,
                                    roofline=roofline))
        return draft.record().feedback

    with_roof, without = feedback(roof), feedback(None)
    assert with_roof == without == feedback_sentence(Status.CORRECT, speedup=1.88)
    assert "roofline" not in with_roof and "93" not in with_roof and "%" not in with_roof
