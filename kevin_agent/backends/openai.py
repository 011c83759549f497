"""The openai backend: any OpenAI-compatible server (vLLM, SGLang, llama.cpp, a hosted API).

This is how people run Kevin on other GPUs or other machines: ``vllm serve`` there, and
``--backend openai --base-url http://HOST:8000/v1`` here. The prompts of one turn are sent at
once, one streaming request each, so the server batches them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import openai

from ..config import DEFAULT_MODEL, RunConfig
from ..errors import BackendError, ConfigError
from ..protocols import DoneCallback, Generation
from .chatstream import TIMEOUT_ERRORS, TRANSPORT_ERRORS, Retry, StreamState, error_text, retry_after
from .streaming import BatchBackend, SerialCallback, ThinkSplitter

#: Sent when no key is configured: local servers ignore it, but the client insists on one.
PLACEHOLDER_KEY = "not-needed"

#: How long a cancelled generate() waits for its streams to close before returning.
CANCEL_GRACE_S = 0.5

#: The check before a run waits this long for the server to accept a connection: a server that is
#: not there is said at once, not after the retries a request of a running turn gets.
CHECK_CONNECT_S = 5.0

SERVE_HINT = (
    f"start a server with: vllm serve {DEFAULT_MODEL} --max-model-len 32768 --reasoning-parser deepseek_r1 "
    "(add --tensor-parallel-size N for N GPUs), or use --backend vllm on a GPU machine"
)


class OpenAIBackend(BatchBackend):
    """Streams chat completions from an OpenAI-compatible server."""

    name = "openai"
    calls_on_done = True

    #: First retry waits this long, then twice as long each time.
    retry_backoff_s: float = 1.0
    #: The longest single wait between retries, also for a server's Retry-After.
    max_backoff_s: float = 30.0

    def __init__(self, config: RunConfig) -> None:
        if not config.base_url:
            raise ConfigError(
                "the openai backend needs the server's URL",
                "pass --base-url http://HOST:PORT/v1 (or set KEVIN_BASE_URL)",
            )
        self.base_url = config.base_url.rstrip("/")
        self.model = config.model
        self.temperature = config.temperature
        self.max_tokens = config.max_tokens
        self.retries = config.retries
        self.timeout_s = config.request_timeout_s
        key = config.api_key.get_secret_value() if config.api_key is not None else PLACEHOLDER_KEY
        # Retries are ours (backoff, cancellation, clear messages), so the client makes none.
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=key, timeout=self.timeout_s, max_retries=0
        )
        self._model_checked = False
        self._usage_option = True

    # --- the Backend protocol -----------------------------------------------------------------

    def _answer(self, prompts: Sequence[str], emit: SerialCallback, cancel: threading.Event | None,
                on_done: DoneCallback | None) -> list[Generation]:
        if not self._model_checked:
            self.check_model()
        # Workers watch ``stop``, never the caller's event: a failure in one prompt stops the
        # others without looking like the person's cancel.
        stop = threading.Event()
        streams = [StreamState() for _ in prompts]
        workers = [
            threading.Thread(
                target=self._worker, args=(i, prompt, streams[i], emit, stop),
                name=f"kevin-openai-{i}", daemon=True,
            )
            for i, prompt in enumerate(prompts)
        ]
        for worker in workers:
            worker.start()
        # Poll rather than join: a stalled stream must not delay the person's stop.
        cancelled = False
        reported: set[int] = set()
        while not all(s.done for s in streams):
            for i, s in enumerate(streams):
                # Handed on from this thread, so the caller's callback never runs in a worker.
                if s.done and s.error is None and i not in reported and on_done is not None:
                    reported.add(i)
                    on_done(i, s.generation(cancelled=False))
            failed = next((s.error for s in streams if s.error is not None), None)
            if failed is not None:
                stop.set()
                self._join(workers, streams)
                raise failed
            if cancel is not None and cancel.is_set():
                cancelled = True
                stop.set()
                self._join(workers, streams)
                break
            stop.wait(0.02)
        failed = next((s.error for s in streams if s.error is not None), None)
        if failed is not None and not cancelled:
            raise failed
        return [s.generation(cancelled=cancelled and not s.complete) for s in streams]

    def count_tokens(self, text: str) -> int:
        # No tokenizer on this side; code runs about three characters a token, and
        # overestimating only drops an old attempt from the prompt a little early.
        return len(text) // 3 + 1

    def close(self) -> None:
        self._client.close()

    # --- checks -------------------------------------------------------------------------------

    def served_models(self) -> list[str]:
        """The model names the server lists at /models (empty when it has no such endpoint)."""
        return self._with_retries(self._list_models, None)

    def _list_models(self, client: openai.OpenAI | None = None) -> list[str]:
        try:
            return [m.id for m in (client or self._client).models.list()]
        except openai.NotFoundError:
            return []

    def check(self) -> None:
        """Before the run: the server answers and serves the model (``Backend`` says when). One try
        with a short connect timeout: nothing listening is said at once. A server that answers
        busy (429, 5xx) is retried as any request is."""
        client = self._client.with_options(timeout=openai.Timeout(self.timeout_s, connect=CHECK_CONNECT_S))
        try:
            served = self._classify(lambda: self._list_models(client))
        except Retry as retry:
            if retry.reason.startswith("cannot connect"):
                raise self._gave_up(retry.reason, 0) from None
            served = self.served_models()
        if served and self.model not in served:
            raise self._wrong_model(served)
        self._model_checked = True

    def check_model(self) -> None:
        """Fail early and clearly when the server is down or does not serve ``self.model``."""
        served = self.served_models()
        if served and self.model not in served:
            raise self._wrong_model(served)
        self._model_checked = True

    # --- one prompt ---------------------------------------------------------------------------

    def _worker(
        self, index: int, prompt: str, stream: StreamState, emit: SerialCallback, cancel: threading.Event
    ) -> None:
        try:
            self._with_retries(lambda: self._stream_once(index, prompt, stream, emit, cancel), cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            stream.error = exc
        finally:
            stream.done = True

    def _with_retries(self, call, cancel: threading.Event | None):
        attempt = 0
        while True:
            try:
                return self._classify(call)
            except Retry as retry:
                if attempt >= self.retries or (cancel is not None and cancel.is_set()):
                    raise self._gave_up(retry.reason, attempt) from None
                wait = retry.wait_s if retry.wait_s is not None else self.retry_backoff_s * 2**attempt
                attempt += 1
                if cancel is not None:
                    if cancel.wait(min(wait, self.max_backoff_s)):
                        return None
                else:
                    time.sleep(min(wait, self.max_backoff_s))

    def _classify(self, call):
        """Run ``call`` and turn the client's exceptions into retries or BackendErrors."""
        try:
            return call()
        except TIMEOUT_ERRORS:
            raise BackendError(
                f"the server at {self.base_url} sent nothing for {self.timeout_s:g} s",
                "check the server's log; for slow servers raise KEVIN_REQUEST_TIMEOUT_S",
            ) from None
        except openai.RateLimitError as exc:
            raise Retry("429 too many requests", retry_after(exc)) from None
        except openai.AuthenticationError:
            raise BackendError(
                f"the server at {self.base_url} refused the API key (401)",
                "set KEVIN_API_KEY (or OPENAI_API_KEY) to a key the server accepts",
            ) from None
        except openai.PermissionDeniedError:
            raise BackendError(
                f"the server at {self.base_url} denied access to model {self.model!r} (403)",
                "check the API key's permissions",
            ) from None
        except openai.NotFoundError as exc:
            raise self._wrong_model(self._served_quietly(), detail=error_text(exc)) from None
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise Retry(f"{exc.status_code} from the server: {error_text(exc)}") from None
            raise BackendError(
                f"the server at {self.base_url} rejected the request ({exc.status_code}): "
                f"{error_text(exc)}",
                "check --model, the prompt length against the server's --max-model-len, and "
                "the server's log",
            ) from None
        except TRANSPORT_ERRORS as exc:
            raise Retry(f"cannot connect ({type(exc).__name__}: {exc})") from None

    def _stream_once(
        self, index: int, prompt: str, stream: StreamState, emit: SerialCallback, cancel: threading.Event
    ) -> None:
        stream.reset()
        extra: dict[str, Any] = {}
        if self._usage_option:
            extra["stream_options"] = {"include_usage": True}
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": prompt}],
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                stream=True,
                **extra,
            )
        except openai.BadRequestError as exc:
            # Older servers reject stream_options; usage is a nicety, so drop it and go on.
            if self._usage_option and "stream_options" in error_text(exc):
                self._usage_option = False
                return self._stream_once(index, prompt, stream, emit, cancel)
            raise
        stream.response = response
        splitter = ThinkSplitter()
        deadline = time.monotonic() + self.timeout_s
        try:
            for chunk in response:
                if cancel.is_set():
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError
                if chunk.usage is not None:
                    stream.prompt_tokens = chunk.usage.prompt_tokens
                    stream.completion_tokens = chunk.usage.completion_tokens
                for choice in chunk.choices or []:
                    delta = choice.delta
                    thought = _reasoning_delta(delta)
                    if thought:
                        stream.reasoning += thought
                        emit(index, "reasoning", thought)
                    if delta is not None and delta.content:
                        stream.text += delta.content
                        for channel, part in splitter.feed(delta.content):
                            emit(index, channel, part)
                    if choice.finish_reason:
                        stream.finish_reason = choice.finish_reason
            for channel, part in splitter.flush():
                emit(index, channel, part)
            stream.complete = True
        finally:
            response.close()

    # --- errors -------------------------------------------------------------------------------

    def _join(self, workers: list[threading.Thread], streams: list[StreamState]) -> None:
        for stream in streams:
            if stream.response is not None and not stream.done:
                try:
                    stream.response.close()
                except Exception:  # noqa: BLE001 - closing from another thread is best effort
                    pass
        deadline = time.monotonic() + CANCEL_GRACE_S
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))

    def _served_quietly(self) -> list[str]:
        try:
            return [m.id for m in self._client.models.list()]
        except Exception:  # noqa: BLE001 - only used to improve a message
            return []

    def _wrong_model(self, served: list[str], detail: str = "") -> BackendError:
        listed = ", ".join(served) if served else "none listed at /models"
        message = f"the server at {self.base_url} does not serve model {self.model!r}; it serves: {listed}"
        if detail and not served:
            message += f" ({detail})"
        hint = f"pass --model {served[0]}" if served else "pass --model with the server's model name"
        return BackendError(message, hint)

    def _gave_up(self, reason: str, attempts: int) -> BackendError:
        tries = f"after {attempts + 1} tries" if attempts else "on the first try"
        if reason.startswith("cannot connect"):
            return BackendError(
                f"cannot reach the OpenAI-compatible server at {self.base_url} ({tries}): {reason}",
                SERVE_HINT,
            )
        return BackendError(f"the server at {self.base_url} kept failing ({tries}): {reason}",
                            "check the server's log, or raise KEVIN_RETRIES")


def _reasoning_delta(delta: Any) -> str:
    """vLLM's reasoning parsers put thinking in ``reasoning_content`` (older) or
    ``reasoning`` (newer); both arrive as extra fields on the delta."""
    if delta is None:
        return ""
    for field in ("reasoning_content", "reasoning"):
        value = getattr(delta, field, None)
        if isinstance(value, str) and value:
            return value
    return ""
