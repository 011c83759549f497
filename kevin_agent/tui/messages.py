"""Engine events as typed Textual messages, and the sink that posts them from the engine thread.

The engine runs in a thread worker and calls ``TuiSink.emit`` from that thread.
``post_message`` is thread-safe, so every event except streamed text becomes one message.
Tokens and a build's output arrive far faster than a terminal can redraw: the sink buffers
them and keeps at most one ``TokensReady`` message in the queue; whoever handles it drains
the buffer in one go.
"""

from __future__ import annotations

import threading
from typing import Literal

from textual.message import Message
from textual.message_pump import MessagePump

from ..events import (
    ConfirmationFinished,
    ConfirmationStarted,
    EvalOutput,
    EvalStage,
    Event,
    GenerationFinished,
    Notice,
    RunFinished,
    RunStarted,
    TokenDelta,
    TurnFinished,
    TurnStarted,
)

Channel = Literal["reasoning", "text", "eval"]
"""The model's reasoning, its answer, or the evaluation's output (``EvalOutput``)."""


class EngineMessage(Message):
    """Base of the messages that carry one engine event."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class RunStartedMessage(EngineMessage):
    event: RunStarted


class TurnStartedMessage(EngineMessage):
    event: TurnStarted


class GenerationFinishedMessage(EngineMessage):
    event: GenerationFinished


class EvalStageMessage(EngineMessage):
    event: EvalStage


class TurnFinishedMessage(EngineMessage):
    event: TurnFinished


class NoticeMessage(EngineMessage):
    event: Notice


class ConfirmationStartedMessage(EngineMessage):
    event: ConfirmationStarted


class ConfirmationFinishedMessage(EngineMessage):
    event: ConfirmationFinished


class RunFinishedMessage(EngineMessage):
    event: RunFinished


class TokensReady(Message):
    """Streamed text (tokens, a build's output) is waiting in the sink; drain it with ``TuiSink.drain``."""

    def can_replace(self, message: Message) -> bool:
        # One pending wake-up is enough: the handler drains everything buffered so far.
        return isinstance(message, TokensReady)


_MESSAGES: dict[type, type[EngineMessage]] = {
    RunStarted: RunStartedMessage,
    TurnStarted: TurnStartedMessage,
    GenerationFinished: GenerationFinishedMessage,
    EvalStage: EvalStageMessage,
    TurnFinished: TurnFinishedMessage,
    Notice: NoticeMessage,
    ConfirmationStarted: ConfirmationStartedMessage,
    ConfirmationFinished: ConfirmationFinishedMessage,
    RunFinished: RunFinishedMessage,
}


def message_for(event: Event) -> EngineMessage:
    """The typed message for a (non-token) event."""
    return _MESSAGES[type(event)](event)


class TuiSink:
    """An ``EventSink`` that forwards engine events to a Textual message pump (the app)."""

    def __init__(self, target: MessagePump) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._chunks: list[tuple[int, int, Channel, str]] = []
        self._wake_pending = False

    def emit(self, event: Event) -> None:
        if isinstance(event, TokenDelta):
            self._buffer(event.trajectory, event.turn, event.channel, event.text)
        elif isinstance(event, EvalOutput):
            self._buffer(event.trajectory, event.turn, "eval", event.text)
        elif type(event) in _MESSAGES:
            self._target.post_message(message_for(event))

    def _buffer(self, trajectory: int, turn: int, channel: Channel, text: str) -> None:
        with self._lock:
            self._chunks.append((trajectory, turn, channel, text))
            if self._wake_pending:
                return
            self._wake_pending = True
        self._target.post_message(TokensReady())

    def drain(self) -> list[tuple[int, int, Channel, str]]:
        """Take every buffered token chunk, merged per (trajectory, turn, channel) run."""
        with self._lock:
            chunks, self._chunks = self._chunks, []
            self._wake_pending = False
        merged: list[tuple[int, int, Channel, list[str]]] = []
        for traj, turn, channel, text in chunks:
            if merged and merged[-1][:3] == (traj, turn, channel):
                merged[-1][3].append(text)
            else:
                merged.append((traj, turn, channel, [text]))
        return [(t, n, c, "".join(parts)) for t, n, c, parts in merged]
