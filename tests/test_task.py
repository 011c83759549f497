from __future__ import annotations

import pytest

from kevin_agent.errors import TaskError
from kevin_agent.task import load_task

GOOD = '''
import torch
import torch.nn as nn

class MyNorm(nn.Module):
    """MyNorm normalises rows."""
    def __init__(self):
        super(MyNorm, self).__init__()
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
'''


def write(tmp_path, text, name="task.py"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_custom_class_is_shown_to_the_model_as_Model(tmp_path):
    task = load_task(write(tmp_path, GOOD), "MyNorm")
    assert "class Model(nn.Module)" in task.model_source
    assert "super(Model, self)" in task.model_source
    assert '"""MyNorm normalises rows."""' in task.model_source  # strings untouched
    assert task.source == GOOD and task.name == "task"


@pytest.mark.parametrize(
    "text, cls, needle",
    [
        (GOOD, "Model", "no class named 'Model'"),
        (GOOD.replace("def get_inputs", "def make_inputs"), "MyNorm", "missing `get_inputs()`"),
        (GOOD.replace("def get_init_inputs", "def other"), "MyNorm", "missing `get_init_inputs()`"),
        (GOOD + "\ndef broken(:\n", "MyNorm", "syntax error at line"),
        (GOOD + "\nclass ModelNew(nn.Module):\n    x = 1\n", "MyNorm", "already defines `ModelNew`"),
    ],
)
def test_bad_task_files_name_the_problem(tmp_path, text, cls, needle):
    path = write(tmp_path, text)
    with pytest.raises(TaskError) as exc:
        load_task(path, cls)
    assert needle in exc.value.message
    assert str(path) in exc.value.message
    assert exc.value.hint


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TaskError, match="no such file"):
        load_task(tmp_path / "nope.py")
    with pytest.raises(TaskError, match="directory"):
        load_task(tmp_path)


def test_class_hint_lists_the_classes_found(tmp_path):
    with pytest.raises(TaskError) as exc:
        load_task(write(tmp_path, GOOD))
    assert "--class" in exc.value.hint and "MyNorm" in exc.value.hint
