"""The worker processes' one door, for real: a kind of worker made as a new kind is made
(``echo_worker``), its typed messages both ways, and what a child writes that is no message
(garbage on its pipe, a crash in the middle of a line, a reply that is none): the child's own
failure, never the parent's."""

from __future__ import annotations

import os
import signal

import pytest

from kevin_agent.config import EvalSettings
from kevin_agent.results import Stage
from kevin_agent.workers import Go, Message, Note, scrubbed_env
from kevin_agent.workers.messages import WIRE, Entered, Malformed, Want, decode, encode

from ..clihelp import REPO
from .echo_worker import EchoReply, EchoWorker, Number


def _run(tmp_path, mode: str, **kwargs):
    env = scrubbed_env({"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    job = {"mode": mode, "settings": EvalSettings(device="cpu", cpu_threads=None), "number": 1}
    return EchoWorker.run(job, env=env, timeout_s=60, root=tmp_path, **kwargs)


def test_every_message_is_written_one_way_and_read_back_as_its_kind():
    line = encode(Entered(stage=Stage.TIMING))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.startswith(b'{"schema":%d,"kind":"stage"' % WIRE)
    assert decode(line) == Entered(stage=Stage.TIMING)
    assert decode(encode(Want(what="candidate")), Want).what == "candidate"


@pytest.mark.parametrize("line", [b"replied", b"want candidate", b"[1, 2]", b'{"kind": "stage", "stage": "load"}',
                                  b'{"schema": 2, "kind": "go"}', b'{"schema": 1, "kind": "no-such-kind"}',
                                  b'{"schema": 1, "kind": "stage", "stage": "nowhere"}', b'{"schema":1,"kind":"sta'])
def test_what_is_no_message_of_a_known_kind_and_layout_is_malformed(line):
    with pytest.raises(Malformed):
        decode(line)


def test_a_message_of_another_kind_than_the_one_due_is_malformed():
    with pytest.raises(Malformed, match="where Number was due"):
        decode(encode(Go()), Number)


def test_two_kinds_cannot_share_a_name():
    with pytest.raises(TypeError, match="is Go's already"):
        class Another(Message):
            KIND = "go"


def test_a_worker_and_its_parent_talk_in_typed_messages(tmp_path):
    asked, notes, stages = [], [], []

    def answer(what: str) -> Message:
        asked.append(what)
        return Number(number=41) if what == "number" else Go()

    run = _run(tmp_path, "talk", answer=answer, on_stage=stages.append,
               on_message=lambda m: notes.append(m.text) if isinstance(m, Note) else None)
    assert isinstance(run.reply, EchoReply) and run.reply.ok, run.log
    assert run.reply.echo == 42
    assert (asked, notes, stages) == (["go", "number"], ["hello"], [Stage.COMPILE])
    assert not run.timed_out and run.returncode == 0


def test_what_a_worker_writes_that_is_no_message_is_its_own_and_it_still_replies(tmp_path):
    notes = []
    run = _run(tmp_path, "garble", on_message=lambda m: notes.append(m))
    # Its stdout is its log, never its pipe: the text that looks like the protocol is only printed.
    assert run.reply is not None and run.reply.ok and run.reply.echo == 1
    assert notes == [Note(text="still here")]
    assert '{"schema":1,"kind":"replied"}' in run.log
    assert "not a message from the worker: not a message: 'this is no message'" in run.log
    assert "a message of layout 99" in run.log


def test_a_worker_that_dies_in_the_middle_of_a_message_died(tmp_path):
    run = _run(tmp_path, "half")
    assert run.reply is None and not run.timed_out
    assert run.returncode == -signal.SIGABRT
    assert run.died() == "the worker died with SIGABRT"
    assert "an unfinished line b'{\"schema\":1,\"kind\":\"stage\",\"sta'" in run.log


def test_a_reply_that_is_no_reply_is_as_none(tmp_path):
    run = _run(tmp_path, "bad-reply")
    assert run.reply is None
    assert run.died() == "the worker exited with code 0 without a result"
    assert "its reply: not a message" in run.log
