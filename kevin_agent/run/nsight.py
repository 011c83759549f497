"""Nsight Compute on a finished turn of a stored run: ``kevin-opt show RUN --turn N --ncu`` and the
TUI's ``i``. The turn's kernel is profiled on its task's inputs with the run's own settings
(``evaluate/parent/nsight.py``); the full report and a short record of it stay in the run
directory's ``ncu/`` folder."""

from __future__ import annotations

from pathlib import Path

from ..config import RunConfig, load_config
from ..console import write_json
from ..errors import EnvironmentUnavailable, UsageError
from ..evaluate import profile_kernel
from ..results.ncu import NcuProfile
from ..store import read_info, read_records
from ..task import load_task

FOLDER = "ncu"


def profile_turn(run_dir: Path, trajectory: int, turn: int, *, timeout_s: float | None = None) -> NcuProfile:
    """Profile the kernel of ``trajectory``'s turn ``turn`` and keep what ncu found beside the run;
    raises ``UsageError`` for a turn with no verified kernel, ``EnvironmentUnavailable`` where this
    machine cannot profile it (a run on the cpu device, no NVIDIA GPU, no ncu, no permission)."""
    info = read_info(run_dir)
    record = next((r for r in read_records(run_dir) if (r.trajectory, r.turn) == (trajectory, turn)), None)
    if record is None:
        raise UsageError(f"run {info.run_id} has no finished turn {turn} in trajectory {trajectory}",
                         "see its turns with `kevin-opt show RUN`")
    if not record.correct or not record.code:
        raise UsageError(f"trajectory {trajectory} turn {turn} of run {info.run_id} has no verified kernel "
                         f"({record.status.value}): Nsight Compute profiles kernels that passed the checks",
                         "pick a correct turn (`kevin-opt show RUN` lists them)")
    if info.device != "cuda":
        raise EnvironmentUnavailable(f"run {info.run_id} ran on the {info.device} device ({info.device_name}): "
                                     "Nsight Compute profiles CUDA kernels on an NVIDIA GPU",
                                     hint="profile a turn of a run made on an NVIDIA GPU (--device cuda)")
    saved = {k: v for k, v in info.config.items() if k in RunConfig.model_fields and k != "api_key"}
    settings = load_config(saved).eval_settings("cuda")
    task = load_task(Path(info.task.path), info.task.class_name)
    stem = f"t{trajectory}-turn{turn}"
    report = run_dir / FOLDER / stem
    kernels = profile_kernel(record.code, task_path=task.path, class_name=task.class_name, settings=settings,
                             report=report, timeout_s=timeout_s)
    profile = NcuProfile(run_id=info.run_id, trajectory=trajectory, turn=turn, device_name=info.device_name,
                         report_path=f"{FOLDER}/{stem}.ncu-rep", kernels=kernels)
    write_json(run_dir / FOLDER / f"{stem}.json", profile)
    return profile
