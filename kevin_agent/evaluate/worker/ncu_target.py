"""What Nsight Compute runs: one turn's kernel, called on the task's inputs inside an NVTX range.

``ncu [options] python -m kevin_agent.evaluate.worker.ncu_target JOB.json``: the task is imported,
its reference built (for the weights ``ModelNew`` is given, as in an evaluation), one set of inputs
drawn on the device at the run's seed, and the candidate loaded from its build (``TORCH_EXTENSIONS_DIR``).
One call outside the range loads the module and lets it make what it makes once; the calls inside
``RANGE`` are what ``ncu --nvtx --nvtx-include RANGE/`` profiles. The entry point is ``run_target``
(a job in, nothing out: what ncu measured is ncu's), so any process starter can run it; the job
and the range are ``evaluate.ncu``'s, which the parent imports without torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..ncu import RANGE, NcuJob


def run_target(job: NcuJob) -> None:
    """Load the task and the candidate, warm the candidate up, then call it ``job.calls`` times
    inside ``RANGE``. Raises ``TaskProblem`` for the task's problems; the candidate's own errors
    propagate."""
    import torch

    from .candidate import new_model
    from .taskcode import TaskProblem, build_reference, import_file, import_task, make_inputs, to_device

    device = job.settings.device
    if device != "cuda" or not torch.cuda.is_available():
        raise TaskProblem("no CUDA GPU is visible to torch")
    task = import_task(job)
    ref = build_reference(task, job)
    inputs = to_device(make_inputs(task, job, job.settings.seed, "as-given", on=device), device)
    module = import_file(job.candidate_path, "kevin_candidate")
    model = new_model(module, task, job, ref)
    del ref
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        for _ in range(job.calls):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def main(argv: list[str] | None = None) -> int:
    from .taskcode import TaskProblem, describe

    args = sys.argv[1:] if argv is None else argv
    job = NcuJob.model_validate_json(Path(args[0]).read_text(encoding="utf-8"))
    try:
        run_target(job)
    except TaskProblem as exc:
        print(f"kevin-opt ncu target: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # candidate code may raise anything
        print(f"kevin-opt ncu target: the kernel failed: {describe(exc, job.candidate_path, job.task_path)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
