"""What crosses between a parent and one of its workers: the job file, the lines on the two pipes
and the reply file, each a message of one kind.

A kind is one pydantic model (a subclass of ``Message`` naming its ``KIND``); ``encode`` is the one
way any of them is written (a JSON object on one line, ``schema`` and ``kind`` first) and
``decode`` the one way it is read. The kinds every worker speaks are here: ``Entered`` (it entered an
evaluation stage), ``Note`` (what it is doing, in a word), ``Want`` (it asks and blocks until
answered), ``Go`` (the plain answer) and ``Replied`` (its reply file is complete); a kind of worker
adds its own job, reply and answers beside its code (``evaluate.jobs``, ``model.jobs``).

A line that does not decode is what the child wrote, never a failure of the parent's: the parent
keeps it for the log and goes on (``parent.WorkerProcess.follow``). Kept free of torch.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, Field, ValidationError

from ..config import EvalSettings
from ..results import Stage

WIRE = 1
"""The layout of every message (``schema`` on each): parent and worker are one installation, so a
message of another layout is a malformed one."""
_ENVELOPE = ("schema", "kind")

M = TypeVar("M", bound="Message")


class Malformed(ValueError):
    """A line, or a file, that is not a message of a known kind and layout."""


class Message(BaseModel):
    """One message between a parent and a worker; each subclass is a kind of its own (``KIND``)."""

    KIND: ClassVar[str] = ""
    _kinds: ClassVar[dict[str, type[Message]]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if not cls.KIND:
            return  # a base of kinds, never sent itself
        clash = set(_ENVELOPE) & set(cls.model_fields)
        if clash:
            raise TypeError(f"{cls.__name__}: {sorted(clash)} belong to the envelope")
        known = Message._kinds.get(cls.KIND)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise TypeError(f"{cls.__name__}: kind {cls.KIND!r} is {known.__name__}'s already")
        Message._kinds[cls.KIND] = cls


def encode(message: Message) -> bytes:
    """The one way a message is written: one line of JSON, ``schema`` and ``kind`` first."""
    body = message.model_dump(mode="json")
    return (json.dumps({"schema": WIRE, "kind": message.KIND, **body}, separators=(",", ":")) + "\n").encode()


def decode(data: bytes | str, expected: type[M] = Message) -> M:  # type: ignore[assignment]
    """The message ``data`` holds (one line, or a whole file), of kind ``expected`` or one of its
    subclasses; ``Malformed`` for anything else."""
    try:
        obj = json.loads(data)
    except ValueError:
        raise Malformed(f"not a message: {_shown(data)}") from None
    if not isinstance(obj, dict):
        raise Malformed(f"not a message: {_shown(data)}")
    schema, kind = obj.pop("schema", None), obj.pop("kind", None)
    if schema != WIRE:
        raise Malformed(f"a message of layout {schema!r}, not {WIRE}: {_shown(data)}")
    cls = Message._kinds.get(kind) if isinstance(kind, str) else None
    if cls is None or not issubclass(cls, expected):
        raise Malformed(f"a message of kind {kind!r} where {expected.__name__} was due: {_shown(data)}")
    try:
        return cls.model_validate(obj)
    except ValidationError as exc:
        raise Malformed(f"a {kind} message with {exc.error_count()} bad fields: {_shown(data)}") from None


def _shown(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text.strip()[:120])


# --- what every worker says -------------------------------------------------------------------
class Entered(Message):
    """The worker entered an evaluation stage: its limit and its clock's bucket change."""

    KIND = "stage"
    stage: Stage


class Note(Message):
    """What the worker is doing now, in a few words (``recording``, ``capturing encoder.0``)."""

    KIND = "note"
    text: str


class Want(Message):
    """The worker asks for something and waits for the answer (``candidate``, ``device``, ``timing``)."""

    KIND = "want"
    what: str


class Go(Message):
    """The answer to a ``Want`` that carries nothing but its moment: go on."""

    KIND = "go"


class Replied(Message):
    """The worker's last line: its reply file is complete, and the parent need not wait for it to
    exit (a CUDA context takes a while to tear down, and nothing of it is the work's)."""

    KIND = "replied"


# --- what every job and every reply holds ------------------------------------------------------
class Job(Message):
    """What a worker is started with (its job file). The parent fills in the pipes and the reply's
    path; a kind of worker adds what its work needs."""

    mode: str
    """Which of its kind's works the worker does."""
    settings: EvalSettings
    """Device, seed, threads and limits, as the evaluation has them."""
    reply_path: str
    progress_fd: int
    """The worker's end of the pipe it writes its messages to."""
    control_fd: int
    """The worker's end of the pipe it reads the parent's answers from."""


class Reply(Message):
    """What a worker found (its reply file): its success or its failure, in words, and the machine."""

    ok: bool
    error_kind: str = ""
    """Whose failure ``error`` is; a kind of worker names the kinds it has."""
    error: str = ""
    hint: str = ""
    """What the person can do about ``error``."""
    device_name: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
