"""The family check's worker (``model/family.py``): the kernel and the reference, made as the
installed kernel is made (under the run's seed, the kernel on the reference's own weights), each
run at every trial shape on inputs drawn like the task's own, and compared as the run compared
them (low-precision outputs beyond the tolerance judged against the reference in float32).

Reads its job as JSON on stdin; writes one line (``kevin-family: {json}``), each trial's key: ""
where the kernel's outputs matched, else what went wrong. The kernel's code runs as the run's
workers ran it (``building``), so the build the run made is found in the folder it is given.
"""

from __future__ import annotations

import json
import sys

import torch

from ...evaluate.toolchain.build import building
from ...evaluate.worker import Float32Reference, Mismatch, Outcome, import_file, judged, to_device
from .guard import KernelSource, _share


def _like(value: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """A tensor of ``shape`` drawn like ``value``: its dtype, device and spread."""
    if value.dtype == torch.bool:
        return torch.rand(shape, device=value.device) < value.float().mean()
    if value.is_floating_point():
        data = value.detach().float()
        std = float(data.std()) if data.numel() > 1 else 1.0
        return (torch.randn(shape, device=value.device) * std + float(data.mean())).to(value.dtype)
    low, high = int(value.min()), int(value.max())
    return torch.randint(low, high + 1, shape, device=value.device, dtype=value.dtype)


def _slots(values: list) -> list[tuple[int, int | None]]:
    """Each tensor input as (argument, item of its tuple or list): the signature's order of them."""
    slots = []
    for i, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            slots.append((i, None))
        elif isinstance(value, (tuple, list)):
            slots += [(i, j) for j, item in enumerate(value) if isinstance(item, torch.Tensor)]
    return slots


def run(job: dict) -> dict[str, str]:
    device = torch.device(job["device"])
    task = import_file(job["task_path"], "kevin_family_task")
    init = task.get_init_inputs()
    torch.manual_seed(job["seed"])
    reference = getattr(task, job["class_name"])(*init).to(device).eval()
    with building(fast=job["fast_build"]):  # as the run built it: its build is found, not made again
        kernel_class = KernelSource("family", job["code"]).load()
    if kernel_class is None:
        raise RuntimeError("the kernel cannot be built")
    torch.manual_seed(job["seed"])
    kernel = kernel_class(*init).to(device).eval()
    _share(kernel, reference)
    truth = Float32Reference(reference)
    base = to_device(list(task.get_inputs()), device)
    tensors = _slots(base)
    results = {}
    for trial in job["trials"]:
        if len(trial["shapes"]) != len(tensors):
            results[trial["key"]] = "its inputs do not match the signature's tensors"
            continue
        inputs = [list(v) if isinstance(v, (tuple, list)) else v for v in base]
        for (i, j), shape in zip(tensors, trial["shapes"]):
            if j is None:
                inputs[i] = _like(base[i], shape)
            else:
                inputs[i][j] = _like(base[i][j], shape)
        inputs = [type(b)(v) if isinstance(b, (tuple, list)) else v for b, v in zip(base, inputs)]
        with torch.no_grad():
            try:
                want = reference(*inputs)
            except Exception as exc:  # the original does not run there: no family to admit
                results[trial["key"]] = f"the original forward raises {type(exc).__name__}: {str(exc).strip()[:200]}"
                continue
            try:
                got = kernel(*inputs)
            except Exception as exc:
                results[trial["key"]] = f"the kernel raises {type(exc).__name__}: {str(exc).strip()[:200]}"
                continue
        results[trial["key"]] = _compare(got, want, inputs, truth, job)
    return results


def _compare(got, want, inputs, truth, job: dict) -> str:
    """Empty where the kernel's outputs match, judged as its run judged them: bf16 or fp16 outputs
    beyond the tolerance stand where they are as near the reference in float32 (``truth``) as its own
    are; else what differs."""
    try:
        judged(got, want, inputs, truth, job["atol"], job["rtol"], Outcome(), job["preset"])
    except Mismatch as exc:
        return str(exc)
    return ""


RESULT = "kevin-family: "


def main() -> None:
    job = json.loads(sys.stdin.read())
    print(RESULT + json.dumps(run(job)), flush=True)


if __name__ == "__main__":
    main()
