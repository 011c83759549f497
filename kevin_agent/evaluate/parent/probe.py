"""The probe, from the parent's side: one worker builds the task and makes (or finds) its
reference data (``worker.trials``, ``reference``), with the device shared while it draws and alone
while it times the reference; what went wrong becomes the person's error, naming what to do."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Protocol

from ...config import EvalSettings
from ...errors import EnvironmentUnavailable, TaskError
from ...task import Task
from .. import reference
from ..toolchain import cache
from ...workers import Go, WorkerSet
from ..jobs import EvalWorker, WorkerReply
from .gate import DeviceGate, Holding
from .logs import tail
from .machine import detect_device


class ProbeHost(Protocol):
    """What the probe uses of the evaluator it belongs to."""

    task: Task
    settings: EvalSettings
    device: str
    gate: DeviceGate
    scratch: Path
    workers_running: WorkerSet

    @property
    def aborted(self) -> bool: ...
    def job(self, mode: str) -> dict: ...
    def env(self, build_folder: Path | None) -> dict[str, str]: ...


def probe_task(host: ProbeHost, folder: Path) -> tuple[WorkerReply, reference.ReferenceData]:
    """The probe worker's reply and the task's reference data in ``folder``; raises
    ``TaskError`` or ``EnvironmentUnavailable`` when the task cannot be probed here."""
    if host.device == "cuda" and detect_device() != "cuda":
        raise EnvironmentUnavailable("the cuda device was asked for but no NVIDIA GPU is visible",
                                     hint="run on a machine with a GPU, or pass --device cpu")
    holding = Holding(host.gate, lambda: host.aborted)

    def answer(what: str) -> Go:
        if what == "timing":
            holding.take()
        return Go()

    # One maker per task and settings: a second evaluator waits, then finds the data made.
    with cache.locked(folder), tempfile.TemporaryDirectory(prefix="kevin-probe-") as tmp:
        try:
            holding.share()
            run = EvalWorker.run(host.job("probe"), env=host.env(Path(tmp)), timeout_s=host.settings.run_timeout_s,
                                 answer=answer, root=host.scratch, registry=host.workers_running)
        finally:
            holding.release()
    reply = run.reply
    where = str(host.task.path)
    if reply is None:
        what = (f"building the task's inputs timed out after {host.settings.run_timeout_s:g} s"
                if run.timed_out else f"building the task crashed: {run.died()}\n{tail(run.log, 10)}")
        raise TaskError(f"{where}: {what}", hint="run the file's get_inputs() and Model by hand")
    if reply.error_kind == "environment":
        raise EnvironmentUnavailable(reply.error, hint=reply.hint or "pass --device cpu to run on the CPU")
    if not reply.ok or reply.probe is None:
        raise TaskError(f"{where}: {reply.error}", hint=reply.hint or "fix the task file so that "
                        f"{host.task.class_name}(*get_init_inputs())(*get_inputs()) runs")
    made = reference.read(folder)
    if made is None:
        raise TaskError(f"{where}: the reference data was not made\n{tail(run.log, 10)}",
                        hint="run the file's get_inputs() and Model by hand")
    return reply, made
