"""What the openai backend keeps per stream, and how it reads the client's failures."""

from __future__ import annotations

from typing import Any

import openai

from ..protocols import Generation


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """The HTTP library's transport and timeout errors, which surface while a stream is read.

    The openai client wraps errors raised when a request starts, but not those raised while
    its stream is iterated; the HTTP library differs between client versions.
    """
    transport: list[type[BaseException]] = [openai.APIConnectionError, ConnectionError]
    timeouts: list[type[BaseException]] = [openai.APITimeoutError, TimeoutError]
    for name in ("httpx", "httpx2"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        transport.append(module.TransportError)
        timeouts.append(module.TimeoutException)
    return tuple(transport), tuple(timeouts)


TRANSPORT_ERRORS, TIMEOUT_ERRORS = _transport_errors()


class Retry(Exception):
    """A failure worth another try (connection error, 429, 5xx)."""

    def __init__(self, reason: str, wait_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wait_s = wait_s


class StreamState:
    """What one prompt has produced so far; read by generate() on cancellation."""

    def __init__(self) -> None:
        self.text = ""
        self.reasoning = ""
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.error: BaseException | None = None
        self.complete = False
        """The server ended the stream (as opposed to a cancel cutting it short)."""
        self.done = False
        self.response: Any = None

    def reset(self) -> None:
        self.text = self.reasoning = ""
        self.finish_reason = self.prompt_tokens = self.completion_tokens = None

    def generation(self, *, cancelled: bool) -> Generation:
        return Generation(
            text=self.text,
            reasoning=self.reasoning,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            finish_reason=self.finish_reason,
            cancelled=cancelled,
        )


def retry_after(exc: openai.APIStatusError) -> float | None:
    try:
        return float(exc.response.headers.get("retry-after", ""))
    except (TypeError, ValueError, AttributeError):
        return None


def error_text(exc: openai.APIStatusError) -> str:
    """The server's own words: OpenAI-style ``{"error": {"message"}}`` or vLLM's ``{"message"}``."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error")
        message = inner.get("message") if isinstance(inner, dict) else body.get("message")
        if message:
            return str(message)
    return str(exc.message)
