"""A kernel module for the example stack's norm group, as a run delivers one (claim line, code,
the real install footer and guard), around a norm written in PyTorch that counts its calls, so
nothing compiles; and an optimize of the stack whose one group kept it, ready to be measured
(``deliver.combine_and_deliver``) or delivered (``deliver._deliver``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from kevin_agent.config import load_config
from kevin_agent.delivery.kernel_module import CLAIM_PREFIX, KernelClaim
from kevin_agent.model.delivered import envelope, installable
from kevin_agent.model.marks import extracted_from
from kevin_agent.optimize import OptimizeSession
from kevin_agent.results.optimize import GroupRun

from ..clihelp import kevin
from ..conftest import EXAMPLES

KERNEL = "layer_stack_layers_norm_kevin.py"
ORIGINAL = (EXAMPLES / "layer_stack.py").read_bytes()

COUNTING_NORM = '''import torch
import torch.nn as nn

CALLS = [0]
REPEAT = {repeat}


class ModelNew(nn.Module):
    """The norm in PyTorch, counting its calls (where it runs, the model runs the kernel), computed
    REPEAT times over."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        CALLS[0] += 1
        for _ in range(REPEAT):
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return y
'''


def kernel_module_source(work: Path, repeat: int = 1) -> str:
    """The module's text, its envelope from a real extraction of ``layers.0.norm`` (in ``work``)."""
    if not (work / "layer_stack_layers_norm.py").is_file():
        shutil.copy(EXAMPLES / "layer_stack.py", work / "layer_stack.py")
        proc = kevin("extract", "layer_stack.py", "--module", "layers.0.norm", "--device", "cpu", cwd=work)
        assert proc.returncode == 0, proc.stderr
    code = COUNTING_NORM.format(repeat=repeat)
    meta = extracted_from((work / "layer_stack_layers_norm.py").read_text())
    env = envelope(meta, device="cpu", seed=0, verified=[s.key for s in meta.signatures], code=code)
    claim = KernelClaim(speedup=2.0, device="cpu", device_name="cpu").model_dump_json()
    return f'"""A kernel for {meta.module}."""\n{CLAIM_PREFIX}{claim}\n\n{installable(env, code, Path(KERNEL).stem)}'


def kept_session(folder: Path, kernel_source: str, **settings) -> OptimizeSession:
    """An optimize of ``folder/layer_stack.py`` whose one group's run verified the kernel: its
    record as the runs leave it, the kernel in the optimize's folder."""
    model = folder / "layer_stack.py"
    session = OptimizeSession.new(model, load_config({"device": "cpu", **settings}), modules=4, min_saving=0.02)
    kernel = session.store.tasks / KERNEL
    kernel.write_text(kernel_source)
    record = session.record
    record.groups = [GroupRun(name="layers.*.norm x3", members=[f"layers.{i}.norm" for i in range(3)],
                              class_name="RowNorm", share=0.3, own_saving=0.15, state="kept", speedup=2.0,
                              kernel_file=str(kernel), run_id="20261203-000000-layer-stack-norm-0000")]
    record.measured, record.measured_interval, record.predicted = 1.1, [1.05, 1.15], 1.18
    record.device_name = "cpu"
    return session
