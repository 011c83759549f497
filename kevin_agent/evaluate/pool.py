"""Parent side of a worker: start it isolated, watch its stages, enforce the time limit.

Each worker runs ``python -m kevin_agent.evaluate.worker JOB.json`` in a new session (so the
whole process group, compiler children included, can be killed), with a scrubbed environment
and its stdout/stderr captured to a log. The parent never imports the candidate and never
touches the GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..results import Stage
from .jobs import Job, WorkerReply

_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "COOKIE", "AUTH")
_SECRET_PREFIXES = ("HF_", "HUGGING", "OPENAI_", "ANTHROPIC_", "KEVIN_", "AWS_", "AZURE_", "GOOGLE_",
                    "GH_", "GITHUB_", "GITLAB_", "WANDB_", "SSH_")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def scrubbed_env(extra: dict[str, str] | None = None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without anything that looks like a credential."""
    source = os.environ if environ is None else environ
    env = {
        k: v for k, v in source.items()
        if not any(w in k.upper() for w in _SECRET_WORDS) and not k.upper().startswith(_SECRET_PREFIXES)
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class WorkerRun:
    reply: WorkerReply | None
    returncode: int
    timed_out: bool
    stage: Stage | None
    """The last stage the worker announced."""
    log: str
    wall_s: float

    def died(self) -> str:
        """How the worker ended without a reply, in words."""
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"the worker died with {name}"
        return f"the worker exited with code {self.returncode} without a result"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_live_groups: set[int] = set()
_live_lock = threading.Lock()


def kill_all_workers() -> None:
    """Kill every worker this process started and that is still running, with its children
    (compilers included): the run is being interrupted."""
    with _live_lock:
        groups = list(_live_groups)
    for pgid in groups:
        _kill_group(pgid)


def run_worker(job_fields: dict, *, env: dict[str, str], timeout_s: float,
               on_stage: Callable[[Stage], None] | None = None) -> WorkerRun:
    """Run one job to its end or its time limit; never raises for what the job does."""
    with tempfile.TemporaryDirectory(prefix="kevin-job-") as tmp:
        folder = Path(tmp)
        job = Job(**job_fields, reply_path=str(folder / "reply.json"), progress_path=str(folder / "stages"))
        job_path = folder / "job.json"
        job_path.write_text(job.model_dump_json())
        Path(job.progress_path).touch()
        log_path = folder / "log.txt"
        start = time.monotonic()
        stages: list[Stage] = []
        with open(log_path, "wb") as log, open(job.progress_path, encoding="utf-8") as progress:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kevin_agent.evaluate.worker", str(job_path)],
                cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            with _live_lock:
                _live_groups.add(proc.pid)
            timed_out = False
            try:
                timed_out = _watch(proc, progress, start, timeout_s, on_stage, stages)
            finally:
                # Children the candidate left behind (a daemon, a stuck compiler) go with the group,
                # also when the parent is interrupted while it waits.
                _kill_group(proc.pid)
                proc.wait()
                with _live_lock:
                    _live_groups.discard(proc.pid)
        stage = stages[-1] if stages else None
        wall = time.monotonic() - start
        reply = None
        reply_path = Path(job.reply_path)
        if not timed_out and reply_path.is_file():
            reply = WorkerReply.model_validate_json(reply_path.read_text(encoding="utf-8"))
        log_text = log_path.read_text(encoding="utf-8", errors="replace")
        return WorkerRun(reply=reply, returncode=proc.returncode, timed_out=timed_out, stage=stage,
                         log=log_text, wall_s=wall)


def _watch(proc: subprocess.Popen, progress, start: float, timeout_s: float,
           on_stage: Callable[[Stage], None] | None, stages: list[Stage]) -> bool:
    """Follow the worker's stage lines until it exits; True when it ran past ``timeout_s``."""
    while True:
        try:
            proc.wait(timeout=0.05)
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
        for line in progress.read().splitlines():
            if line.strip() in Stage._value2member_map_:
                stages.append(Stage(line.strip()))
                if on_stage is not None:
                    on_stage(stages[-1])
        if finished:
            return False
        if time.monotonic() - start > timeout_s:
            return True
