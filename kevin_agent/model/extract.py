"""``kevin-opt extract``: one module of a model written out as a task file; for a module that
is one of a group of identical instances (``groups``), the group's task, checked against each."""

from __future__ import annotations

from pathlib import Path

from ..config import EvalSettings
from .groups import task_part
from .jobs import CapturedTask
from .modelfile import ModelError, ModelFile
from .process import checked, run_model_job


def extract_tasks(model_file: ModelFile, paths: list[str], settings: EvalSettings, *,
                  timeout_s: float | None = None) -> list[CapturedTask]:
    """Each module's task file text (or why it cannot be captured), all from one worker."""
    reply = checked(run_model_job({"mode": "extract", "settings": settings, "model_path": str(model_file.path),
                                   "modules": paths, "model_file_name": model_file.name},
                                  timeout_s=timeout_s or settings.run_timeout_s), model_file)
    return reply.tasks


def default_task_path(model_file: ModelFile, members: str | list[str]) -> Path:
    """``<model>_<module path>.py`` beside the model file; for a group, ``<model>_layers_norm.py``
    (its pattern, ``layers.*.norm``)."""
    part = task_part([members] if isinstance(members, str) else members) if members else ""
    return model_file.path.with_name(f"{model_file.path.stem}_{part or 'model'}.py")


def _check_target(model_file: ModelFile, target: Path, replace: bool) -> None:
    if target.resolve() == model_file.path:
        raise ModelError(f"{target}: is the model file itself", "pass another -o path")
    if target.exists() and not replace:
        raise ModelError(f"{target}: already exists", "pass another -o path, or --replace to overwrite it")


def extract_task(model_file: ModelFile, path: str, out: Path | None, settings: EvalSettings, *,
                 replace: bool = False, timeout_s: float | None = None) -> Path:
    """Write the task file for the module at ``path`` (for every member of its group); raise
    ``ModelError`` when it cannot be captured (nothing is written then). Without ``out`` the file
    is named for the group (``default_task_path``)."""
    if out is not None:
        _check_target(model_file, out, replace)
    task = capture_task(model_file, path, settings, timeout_s=timeout_s)
    target = out or default_task_path(model_file, task.members or [path])
    if out is None:
        _check_target(model_file, target, replace)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(task.source, encoding="utf-8")
    return target


def capture_task(model_file: ModelFile, path: str, settings: EvalSettings, *,
                 timeout_s: float | None = None) -> CapturedTask:
    """The task file (its text and the group's members) for the module at ``path``, written
    nowhere; ``ModelError`` when it cannot be captured."""
    task = extract_tasks(model_file, [path], settings, timeout_s=timeout_s)[0]
    if task.error:
        where = f"`{path}`" if path else "the whole model"
        raise ModelError(f"{model_file.given}: {where} cannot be captured as a task: {task.error}",
                         "write a task file for it by hand (class Model, get_inputs, get_init_inputs) and run "
                         "kevin-opt on it, with --class NAME if your class has another name")
    return task
