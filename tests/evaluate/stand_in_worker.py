"""A stand-in run worker for the warm pool's tests: the real process, pipes and requests, none of
the work. It marks (in the file its job names) when it started, when it asks for the device and
when it has it, then waits for a candidate as a run worker does."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pydantic import BaseModel

from kevin_agent.evaluate.jobs import WANT


class StandInJob(BaseModel):
    marks: str
    imports_s: float
    device_s: float
    reply_path: str
    progress_fd: int
    control_fd: int


def main() -> None:
    job = StandInJob.model_validate_json(Path(sys.argv[1]).read_text())
    out = os.fdopen(job.progress_fd, "w", buffering=1, encoding="utf-8")
    answers = os.fdopen(job.control_fd, "r", encoding="utf-8")

    def mark(what: str) -> None:
        with open(job.marks, "a", encoding="utf-8") as f:
            f.write(f"{what} {time.monotonic()}\n")

    def request(what: str) -> None:
        out.write(WANT + what + "\n")
        answers.readline()

    mark("started")
    time.sleep(job.imports_s)  # the imports: host work
    mark("asks")
    request("device")
    mark("device")
    time.sleep(job.device_s)  # the CUDA context, the reference data
    request("candidate")


if __name__ == "__main__":
    main()
