"""A stand-in run worker for the warm pool's tests: the real process, pipes and requests, none of
the work. It marks (in the file its job names) when it started, when it asks for the device and
when it has it, then waits for a candidate as a run worker does."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kevin_agent.workers import Message, Parent
from kevin_agent.workers.messages import decode


class StandInJob(Message):
    KIND = "stand-in-job"
    marks: str
    imports_s: float
    device_s: float
    reply_path: str
    progress_fd: int
    control_fd: int


def main() -> None:
    job = decode(Path(sys.argv[1]).read_bytes(), StandInJob)
    parent = Parent(job)

    def mark(what: str) -> None:
        with open(job.marks, "a", encoding="utf-8") as f:
            f.write(f"{what} {time.monotonic()}\n")

    mark("started")
    time.sleep(job.imports_s)  # the imports: host work
    mark("asks")
    parent.request("device")
    mark("device")
    time.sleep(job.device_s)  # the CUDA context, the reference data
    parent.request("candidate")


if __name__ == "__main__":
    main()
