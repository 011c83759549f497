"""Pieces every backend shares: splitting streamed text into reasoning and answer, a callback
wrapper that is safe to call from several threads, and the start of ``generate`` (``BatchBackend``)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal

from ..protocols import DoneCallback, Generation, TokenCallback

Channel = Literal["reasoning", "text"]

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"


class ThinkSplitter:
    """Routes streamed text to the ``reasoning`` or ``text`` channel by ``<think>`` tags.

    Models like Kevin (QwQ) think inline: ``<think> ... </think>`` then the answer. The tags may
    arrive split across chunks, so a tail that could be the start of a tag is held back until
    the next chunk decides it. The tags themselves are not shown; the full text, tags included,
    is kept by the caller for parsing.
    """

    def __init__(self, *, in_reasoning: bool = False) -> None:
        self.in_reasoning = in_reasoning
        self._pending = ""

    def feed(self, chunk: str) -> list[tuple[Channel, str]]:
        out: list[tuple[Channel, str]] = []
        data = self._pending + chunk
        self._pending = ""
        while data:
            tag = CLOSE_TAG if self.in_reasoning else OPEN_TAG
            pos = data.find(tag)
            if pos >= 0:
                self._push(out, data[:pos])
                data = data[pos + len(tag):]
                self.in_reasoning = not self.in_reasoning
                continue
            keep = _partial_tag_suffix(data, tag)
            self._push(out, data[: len(data) - keep])
            self._pending = data[len(data) - keep:]
            break
        return out

    def flush(self) -> list[tuple[Channel, str]]:
        """What was held back at the end of the stream (it was not a tag after all)."""
        out: list[tuple[Channel, str]] = []
        self._push(out, self._pending)
        self._pending = ""
        return out

    def _push(self, out: list[tuple[Channel, str]], text: str) -> None:
        if text:
            out.append(("reasoning" if self.in_reasoning else "text", text))


def _partial_tag_suffix(data: str, tag: str) -> int:
    """Length of the longest suffix of ``data`` that is a proper prefix of ``tag``."""
    for size in range(min(len(tag) - 1, len(data)), 0, -1):
        if tag.startswith(data[-size:]):
            return size
    return 0


class SerialCallback:
    """Calls ``on_token`` under a lock: prompts stream from several threads at once, and the
    receiver (event sinks, the TUI) should not have to be thread-safe."""

    def __init__(self, on_token: TokenCallback | None) -> None:
        self._on_token = on_token
        self._lock = threading.Lock()

    def __call__(self, index: int, channel: Channel, text: str) -> None:
        if self._on_token is None or not text:
            return
        with self._lock:
            self._on_token(index, channel, text)


class BatchBackend(ABC):
    """What every built-in backend's ``generate`` does before its own work: no prompts is no call,
    and tokens reach the caller through one ``SerialCallback``. A backend writes ``_answer``."""

    def generate(
        self,
        prompts: Sequence[str],
        *,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
        on_done: DoneCallback | None = None,
    ) -> list[Generation]:
        if not prompts:
            return []
        return self._answer(prompts, SerialCallback(on_token), cancel, on_done)

    @abstractmethod
    def _answer(self, prompts: Sequence[str], emit: SerialCallback, cancel: threading.Event | None,
                on_done: DoneCallback | None) -> list[Generation]:
        """``generate`` for at least one prompt, ``on_token`` already wrapped as ``emit``."""
