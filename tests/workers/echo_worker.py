"""A kind of worker made for the tests, as a new kind is made: its messages and one module whose
``main()`` hands ``serve`` its work. What it does is the job's ``mode``: talk (a note, a stage, two
requests and a reply), garble (write what is no message on its pipe and protocol-like text on its
stdout, then reply), half (die in the middle of a message), bad-reply (reply with what is no reply)."""

from __future__ import annotations

import os

from kevin_agent.results import Stage
from kevin_agent.workers import Job, Message, Reply, WorkerProcess
from kevin_agent.workers.child import Parent, serve
from kevin_agent.workers.messages import Replied


class EchoJob(Job):
    KIND = "echo-job"
    number: int = 0


class Number(Message):
    """The parent's answer to ``want number``."""

    KIND = "echo-number"
    number: int


class EchoReply(Reply):
    KIND = "echo-reply"
    echo: int = 0


class EchoWorker(WorkerProcess):
    ENTRY = "tests.workers.echo_worker"
    JOB = EchoJob
    REPLY = EchoReply
    PREFIX = "kevin-echo-"


def work(job: EchoJob, parent: Parent) -> EchoReply:
    if job.mode == "talk":
        parent.note("hello")
        parent.stage(Stage.COMPILE)
        parent.request("go")
        answer = parent.request("number", Number)
        return EchoReply(ok=True, echo=answer.number + job.number)
    if job.mode == "garble":
        os.write(job.progress_fd, b"this is no message\n{\"schema\": 99, \"kind\": \"stage\"}\n")
        print('{"schema":1,"kind":"replied"}\nwant candidate\nreplied', flush=True)
        parent.note("still here")
        return EchoReply(ok=True, echo=job.number)
    if job.mode == "half":
        os.write(job.progress_fd, b'{"schema":1,"kind":"stage","sta')
        os.abort()
    if job.mode == "bad-reply":
        with open(job.reply_path, "w") as f:
            f.write("{not a reply")
        parent.send(Replied())
        os._exit(0)
    raise ValueError(f"no mode {job.mode}")


def main() -> None:
    serve(EchoJob, work, lambda job, exc: EchoReply(ok=False, error=f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    main()
