"""Worker processes: the one door through which the tool starts, talks to, clocks and ends a child
process. Everything that touches torch, a GPU or the person's code runs in one (evaluation,
model profiling and extraction, the end-to-end check); the tool's own process never does.

- ``parent``: the tool's side. ``WorkerProcess`` starts one (its own session, a scrubbed
  environment, a folder, a log, two pipes), follows it (its stages against their ``Limit``s,
  a ``StageClock``, its requests answered) and kills and reaps it with its children;
  ``WorkerSet`` and ``kill_all_workers`` end many at once.
- ``child``: the worker's side. ``serve`` reads its job, runs its work, writes its reply and
  ends it; ``Parent`` is its end of the pipes.
- ``messages``: what crosses between them, one pydantic model per kind, written and read one way.

A kind of worker is one module of its own (its ``main()`` calls ``serve``) and its messages (a job,
a reply, any answers of its own), with a ``WorkerProcess`` subclass naming the three: see
``docs/architecture.md``. Nothing here imports torch until a worker's settings ask for it.
"""

from .child import Parent, profiled, serve
from .messages import Go, Job, Message, Note, Reply
from .parent import Limit, StageClock, WorkerProcess, WorkerRun, WorkerSet, kill_all_workers, scrubbed_env

__all__ = ["Go", "Job", "Limit", "Message", "Note", "Parent", "Reply", "StageClock", "WorkerProcess", "WorkerRun",
           "WorkerSet", "kill_all_workers", "profiled", "scrubbed_env", "serve"]
