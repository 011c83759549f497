"""Parent side of a model worker (``jobs.ModelWorker``): one job in a fresh worker, and what its
reply means for the person.

The person's model runs only in there: the tool's own process never imports it or touches
the device.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from ..errors import EnvironmentUnavailable, KevinError
from ..workers import Message, Note, scrubbed_env
from .jobs import ModelReply, ModelWorker
from .modelfile import ModelError, ModelFile


def run_model_job(job_fields: dict, *, timeout_s: float, extra_env: dict[str, str] | None = None,
                  on_note: Callable[[str], None] | None = None) -> ModelReply:
    """Run one model job in a fresh worker (``on_note`` hears what it says it is doing); raise a
    ``KevinError`` when it gives no reply."""
    def on_message(message: Message) -> None:
        if isinstance(message, Note) and on_note is not None:
            on_note(message.text)

    run = ModelWorker.run(job_fields, env=scrubbed_env(extra_env), timeout_s=timeout_s, on_message=on_message)
    if run.timed_out:
        raise EnvironmentUnavailable(f"the model worker ran past its limit of {timeout_s:g} s and was stopped",
                                     "make get_inputs() smaller, or raise --timeout")
    if run.reply is None:
        tail = "\n".join(run.log.strip().splitlines()[-15:])
        raise KevinError(f"{run.died()} while running the model" + (f":\n{tail}" if tail else ""),
                         "the model file may crash the interpreter on import; run it with python to see")
    return run.reply


def checked(reply: ModelReply, model_file: ModelFile) -> ModelReply:
    """The reply when it is a success; else its error as the person should see it."""
    if reply.ok:
        return reply
    if reply.error_kind == "environment":
        raise EnvironmentUnavailable(reply.error, reply.hint or None)
    if reply.error_kind == "module":
        raise ModelError(f"{model_file.given}: {reply.error}", closest_paths(reply.error, reply.paths))
    if reply.error_kind == "internal":
        raise EnvironmentUnavailable(f"{reply.error} (a fault of kevin-opt's, not of {model_file.given})",
                         "please report it with this message; your model file is not the cause")
    hints = {"model": "run the file with python to see the error, and fix it there",
             "kernel": "check that the kernel module was delivered for this model and module"}
    raise ModelError(f"{model_file.given}: {reply.error}", reply.hint or hints.get(reply.error_kind))


def closest_paths(error: str, paths: list[str]) -> str:
    """A hint naming the module paths nearest the one asked for (quoted in ``error``)."""
    wanted = error.split("'")[1] if error.count("'") >= 2 else ""
    named = [p for p in paths if p]
    near = difflib.get_close_matches(wanted, named, n=5, cutoff=0.4)
    near += [p for p in named if wanted and (p.startswith(wanted) or wanted.startswith(p)) and p not in near]
    shown = near[:5] or named[:8]
    label = "closest paths" if near else "its module paths"
    return f"{label}: {', '.join(shown)}" + ("" if near or len(named) <= 8 else f" (and {len(named) - 8} more)")
