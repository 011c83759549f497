"""Start a server as a real subprocess on 127.0.0.1 and stop it again (test support)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SSE_SERVER = HERE / "sse_server.py"


class ServerProcess:
    """A running server: ``url`` is its OpenAI base URL (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self, proc: subprocess.Popen, port: int, output: list[str]) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.output = output

    def stop(self) -> None:
        if self.proc.poll() is None:
            # The server runs in its own process group, so helpers it started stop too.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _drain(proc: subprocess.Popen, output: list[str], port_box: list[int], ready: threading.Event):
    assert proc.stdout is not None
    for line in proc.stdout:
        output.append(line)
        if line.startswith("PORT ") and not port_box:
            port_box.append(int(line.split()[1]))
            ready.set()
    ready.set()


def start_sse_server(*args: str, timeout_s: float = 20.0) -> ServerProcess:
    """Start tests/servers/sse_server.py with ``args`` and wait until it listens."""
    cmd = [sys.executable, str(SSE_SERVER), "--port", "0", *args]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    output: list[str] = []
    port_box: list[int] = []
    ready = threading.Event()
    threading.Thread(target=_drain, args=(proc, output, port_box, ready), daemon=True).start()
    if not ready.wait(timeout_s) or not port_box:
        proc.kill()
        raise RuntimeError(f"server did not start: {''.join(output)}")
    return ServerProcess(proc, port_box[0], output)


def free_port() -> int:
    """A port nothing listens on (bound and released, so it is closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_command(cmd: list[str], port: int, *, ready_path: str = "/v1/models",
                  timeout_s: float = 120.0, env: dict[str, str] | None = None) -> ServerProcess:
    """Start any server command listening on ``port`` and wait until ``ready_path`` answers 200."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=env,
    )
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True).start()
    server = ServerProcess(proc, port, output)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {''.join(output)[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{ready_path}", timeout=2) as reply:
                if reply.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"server not ready after {timeout_s:g} s: {''.join(output)[-4000:]}")
