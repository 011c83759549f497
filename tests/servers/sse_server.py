"""A small OpenAI-compatible chat server (standard library only) for the backend tests.

It runs as its own process on 127.0.0.1 and streams Server-Sent Events the way vLLM does:
``content`` deltas, optional ``reasoning_content`` deltas, a usage chunk when asked for, and
``data: [DONE]``. Flags make it misbehave on purpose: fail the first N requests with a status,
stall mid-stream, require a key, hide /models. It prints ``PORT <n>`` once it listens.

    python tests/servers/sse_server.py --port 0 --model tiny --fail 2 --fail-status 503
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_CONTENT = (
    "<think>The add is memory bound.</think>\n```python\nclass ModelNew:\n    pass\n```\n"
    "Replaced the add with a fused kernel."
)


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.failures_left = args.fail
        self.log = open(args.log, "a", encoding="utf-8") if args.log else None

    def record(self, entry: dict) -> None:
        if self.log is None:
            return
        with self.lock:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()

    def take_failure(self) -> bool:
        with self.lock:
            if self.failures_left > 0:
                self.failures_left -= 1
                return True
            return False


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    args = state.args

    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so a stream ends when the socket closes.
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *values: object) -> None:  # noqa: A002
            pass

        def _json(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
            self._json(status, {"error": {"message": message, "type": "error", "code": status}},
                       headers)

        def _authorised(self) -> bool:
            if not args.api_key:
                return True
            if self.headers.get("Authorization") == f"Bearer {args.api_key}":
                return True
            self._error(401, "invalid API key")
            return False

        def do_GET(self) -> None:  # noqa: N802
            state.record({"method": "GET", "path": self.path})
            if not self._authorised():
                return
            if self.path.rstrip("/").endswith("/models") and not args.no_models:
                self._json(200, {"object": "list", "data": [
                    {"id": args.model, "object": "model", "owned_by": "test"}]})
                return
            self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            state.record({"method": "POST", "path": self.path, "body": body})
            if not self._authorised():
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._error(404, f"no route {self.path}")
                return
            if state.take_failure():
                headers = {"Retry-After": str(args.retry_after)} if args.retry_after is not None else {}
                self._error(args.fail_status, "try again later", headers)
                return
            if body.get("model") != args.model:
                self._error(404, f"The model `{body.get('model')}` does not exist.")
                return
            if args.reject_stream_options and "stream_options" in body:
                self._error(400, "unknown field stream_options")
                return
            self._stream(body)

        def _stream(self, body: dict) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            created = int(time.time())
            sent = 0

            def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> None:
                nonlocal sent
                payload = {
                    "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": created,
                    "model": args.model,
                    "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                if usage:
                    payload["usage"] = usage
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                self.wfile.flush()
                sent += 1
                if args.stall_after is not None and sent == args.stall_after:
                    time.sleep(args.stall_s)
                elif args.chunk_delay:
                    time.sleep(args.chunk_delay)

            try:
                chunk({"role": "assistant", "content": ""})
                step = max(1, args.chunk_chars)
                for i in range(0, len(args.reasoning), step):
                    chunk({args.reasoning_field: args.reasoning[i:i + step]})
                for i in range(0, len(args.content), step):
                    chunk({"content": args.content[i:i + step]})
                chunk({}, finish="stop")
                if (body.get("stream_options") or {}).get("include_usage"):
                    chunk({}, usage={"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                state.record({"event": "stream_done"})
            except (BrokenPipeError, ConnectionResetError):
                state.record({"event": "client_closed", "after_chunks": sent})

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--content", default=DEFAULT_CONTENT)
    parser.add_argument("--reasoning", default="")
    parser.add_argument("--reasoning-field", default="reasoning_content")
    parser.add_argument("--chunk-chars", type=int, default=5)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--fail", type=int, default=0, help="fail the first N chat requests")
    parser.add_argument("--fail-status", type=int, default=503)
    parser.add_argument("--retry-after", type=float, default=None)
    parser.add_argument("--stall-after", type=int, default=None, help="stall after N chunks")
    parser.add_argument("--stall-s", type=float, default=30.0)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--no-models", action="store_true")
    parser.add_argument("--reject-stream-options", action="store_true")
    parser.add_argument("--log", default=None, help="append each request as JSON to this file")
    args = parser.parse_args(argv)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(State(args)))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
