"""The kernel module delivered for an extracted task: it carries install() and uninstall(), the
envelope it was verified in, and the candidate's code exactly as the run built it. The kernel
here is plain Python, so the module imports without a build."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import torch
import torch.nn as nn

from kevin_agent.config import EvalSettings
from kevin_agent.delivery.kernel_module import read_claim, render_kernel_module
from kevin_agent.delivery.report import render_markdown
from kevin_agent.model.delivered import verified_signatures
from kevin_agent.model.family import check_family
from kevin_agent.delivery.e2e import kernel_code
from kevin_agent.model.marks import (
    EXTRACTED_PREFIX,
    extracted_from,
    line,
    read_envelope,
)
from kevin_agent.model.records import ExtractedTask, SignatureUse
from kevin_agent.task import load_task

from ..run_records import TASK_SOURCE, correct, run_info, write_task

META = ExtractedTask(model_file="net.py", module="body.relu", class_name="MyRelu", capture="source", training=False,
                     signatures=[SignatureUse(key="float32[64,128]", calls=2), SignatureUse(key="float32[8,128]", calls=1)])

KERNEL = '''import torch
import torch.nn as nn


def install_kernel(*args):
    raise AssertionError("the candidate's own function of this name is not the guard's")


class ModelNew(nn.Module):
    calls = 0

    def __init__(self):
        super().__init__()

    def forward(self, x):
        ModelNew.calls += 1
        return torch.where(x > 0, x, torch.zeros_like(x))'''


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(x) + self.relu(x) + self.relu(x[:8]).sum()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Body()

    def forward(self, x):
        return self.body(x)


def extracted_task(tmp_path):
    path = tmp_path / "net_body_relu.py"
    path.write_text(line(EXTRACTED_PREFIX, META) + "\n" + TASK_SOURCE)
    return load_task(path, class_name="MyRelu")


def render(tmp_path, code=KERNEL):
    task = extracted_task(tmp_path)
    text = render_kernel_module(task, correct(0, 2, 1.4, code=code), run_info(task, config={"seed": 7}))
    path = tmp_path / "net_body_relu_kevin.py"
    path.write_text(text)
    return path, text


def test_the_module_installs_itself_where_it_was_verified(tmp_path):
    path, text = render(tmp_path)
    compile(text, path.name, "exec")
    env = read_envelope(path)
    # today's evaluation checks get_inputs() alone: the envelope is the headline signature
    assert env.signatures == ["float32[64,128]"] and env.module == "body.relu" and env.seed == 7
    assert [s.key for s in env.recorded] == ["float32[64,128]", "float32[8,128]"]
    assert "from net_body_relu_kevin import install" in text
    assert "among them the model's calls at float32[8,128]" in text
    assert kernel_code(path, env) == KERNEL  # as built: the module added a newline the code lacked
    spec = importlib.util.spec_from_file_location("net_body_relu_kevin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = Net().eval()
    x = torch.randn(64, 128)
    with torch.no_grad():
        want = net(x)
        assert module.install(net) is net
        got = net(x)
    guard = net.body.relu.forward
    assert (guard.kernel_calls, guard.fallback_calls) == (2, 1) and module.ModelNew.calls == 2
    assert torch.equal(got, want)
    module.uninstall(net)
    assert "forward" not in net.body.relu.__dict__


def test_code_ending_in_a_newline_is_found_as_built(tmp_path):
    path, _ = render(tmp_path, code=KERNEL + "\n")
    assert kernel_code(path, read_envelope(path)) == KERNEL + "\n"


def test_the_envelope_is_what_the_evaluation_verified():
    result = SimpleNamespace(signatures=[{"key": "float32[64,128]", "correct": True},
                                         {"key": "float32[8,128]", "correct": True}])
    assert verified_signatures(META, result) == ["float32[64,128]", "float32[8,128]"]
    one_wrong = SimpleNamespace(signatures=[SimpleNamespace(key="float32[64,128]", correct=True),
                                            SimpleNamespace(key="float32[8,128]", correct=False)])
    assert verified_signatures(META, one_wrong) == ["float32[64,128]"]
    assert verified_signatures(META, SimpleNamespace()) == ["float32[64,128]"]


def test_the_report_lists_the_envelope(tmp_path):
    task = extracted_task(tmp_path)
    records = [correct(0, 1, 1.4, code=KERNEL)]
    report = render_markdown(run_info(task, turns=1, trajectories=1), records)
    section = report.split("## Putting it back into the model", 1)[1]
    assert "`body.relu` (MyRelu) of `net.py`" in section
    assert "| signatures | `float32[64,128]` |" in section and "| device | cpu |" in section
    assert "| left to the original forward | `float32[8,128]` |" in section


def test_a_task_written_by_hand_gets_no_install(tmp_path):
    task = write_task(tmp_path)
    assert extracted_from(task.source) is None
    text = render_kernel_module(task, correct(0, 2, 1.4), run_info(task))
    assert "def install(" not in text and "kevin-opt-install" not in text
    assert "Putting it back" not in render_markdown(run_info(task), [correct(0, 2, 1.4)])


def test_the_marks_and_the_claim_say_schema_and_older_ones_still_read(tmp_path):
    path, text = render(tmp_path)
    marks = [ln for ln in text.splitlines() if ln.startswith(("# kevin-opt-kernel: ", "# kevin-opt-install: "))]
    assert len(marks) == 2 and all('"schema":1' in ln.replace(" ", "") for ln in marks), marks
    assert '"schema":1' in line(EXTRACTED_PREFIX, META) and "schema_version" not in line(EXTRACTED_PREFIX, META)
    # Written before the field had its name (``schema_version``), or before the claim had one at all.
    old = line(EXTRACTED_PREFIX, META).replace('"schema":1', '"schema_version":1')
    assert extracted_from(old + "\n") == META
    old_module = tmp_path / "old_kevin.py"
    old_module.write_text(text.replace('"schema":1,', ""))
    assert '"schema"' not in old_module.read_text()
    assert read_envelope(old_module) == read_envelope(path)
    assert read_claim(old_module) == read_claim(path) and read_claim(path) is not None


HARD_CODED = KERNEL.replace("torch.zeros_like(x))", "torch.zeros(64, 128))")
"""Right at the profiled shape alone: it hard-codes the rows."""


def test_other_batch_sizes_run_the_kernel_unless_it_hard_codes_its_sizes(tmp_path):
    task = extracted_task(tmp_path)
    for i, (code, admitted, calls) in enumerate([(KERNEL, ["float32[n0,128]"], (3, 0)),
                                                 (HARD_CODED, ["float32[64,128]"], (2, 1))]):
        family = check_family(str(task.path), "MyRelu", code, ["float32[64,128]"], EvalSettings(device="cpu"))
        assert family.admitted == admitted, family
        path = tmp_path / f"net_body_relu_kevin{i}.py"
        path.write_text(render_kernel_module(task, correct(0, 2, 1.4, code=code), run_info(task), family=family))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        net = module.install(Net().eval())
        with torch.no_grad():
            net(torch.randn(64, 128))  # calls at float32[64,128] twice, float32[8,128] once
        assert module.kernel_calls(net) == {"body.relu": {"kernel": calls[0], "original": calls[1]}}
        text = path.read_text()
        assert f"KEVIN_SIGNATURES = {admitted!r}" in text
        if code is HARD_CODED:
            assert ("float32[64,128]: admitted at this shape alone; at another size float32[1,128]: output has shape "
                    "(64, 128), expected (1, 128) (the kernel may hard-code its sizes)") in text
        else:
            assert "float32[n0,128]: checked against the original at float32[1,128]; float32[7,128]; float32[97,128]" \
                in text


def test_the_report_says_which_shapes_the_module_beside_it_admits(tmp_path):
    task = extracted_task(tmp_path)
    record = correct(0, 2, 1.4, code=HARD_CODED)
    family = check_family(str(task.path), "MyRelu", HARD_CODED, ["float32[64,128]"], EvalSettings(device="cpu"))
    (tmp_path / "net_body_relu_kevin.py").write_text(render_kernel_module(task, record, run_info(task), family=family))
    section = render_markdown(run_info(task), [record]).split("## Putting it back into the model", 1)[1]
    assert "| signatures | `float32[64,128]` |" in section
    assert "- float32[64,128]: admitted at this shape alone; at another size float32[1,128]" in section
