"""Precompiled ``torch/extension.h`` for the bindings' translation unit (``main.cpp``).

A precompiled header only serves a compile with the same compiler and flags, so there is
one per bindings compile command (less the extension's name, which the header never
reads), each in its own folder of the shared toolchain folder:
``pch-<key>/torch/extension.h.gch`` beside a one-line ``torch/extension.h`` that includes
the real one. With that folder on ``CPATH``, GCC takes the ``.gch`` when it fits and the
real header when it does not. The key also covers the PyTorch install (GCC does not notice
headers that changed after the ``.gch`` was made) and the compiler.

The second build with a flag set makes the header alongside its own (plain) compile (a
flag set seen once may never come back); builds that start meanwhile go without. At most ``MAX_KEPT`` headers are kept (about
0.8 GB each); the small ``extension.h`` files stay, since ninja lists them as inputs.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .headers import as_list, torch_include

MAX_KEPT = 4
GCH = "extension.h.gch"


def _ninja_variables(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and not line.startswith(" "):
            out[key.strip()] = value.strip()
    return out


def bindings_command(arguments: dict) -> list[str] | None:
    """The compiler and flags ``load_inline`` will compile ``main.cpp`` with, less its name,
    read from the ninja file PyTorch writes for these arguments (None where it cannot)."""
    import torch.utils.cpp_extension as cpp

    writer = getattr(cpp, "_write_ninja_file_to_build_library", None)
    if writer is None:
        return None
    cuda = bool(as_list(arguments.get("cuda_sources")))
    with_cuda = arguments.get("with_cuda")
    with tempfile.TemporaryDirectory(prefix="kevin-flags-") as tmp:
        values = dict(
            path=os.path.join(tmp, "build.ninja"), name=str(arguments.get("name", "x")),
            sources=[os.path.join(tmp, "main.cpp")] + ([os.path.join(tmp, "cuda.cu")] if cuda else []),
            extra_cflags=as_list(arguments.get("extra_cflags")), extra_cuda_cflags=as_list(arguments.get("extra_cuda_cflags")),
            extra_sycl_cflags=[], extra_ldflags=as_list(arguments.get("extra_ldflags")),
            extra_include_paths=as_list(arguments.get("extra_include_paths")),
            with_cuda=cuda if with_cuda is None else bool(with_cuda), with_sycl=False, is_standalone=False)
        params = inspect.signature(writer).parameters
        writer(**{k: v for k, v in values.items() if k in params})
        variables = _ninja_variables(Path(values["path"]).read_text())
    flags = [f for f in shlex.split(variables.get("cflags", "")) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    return [variables.get("cxx", "c++"), *flags, *shlex.split(variables.get("post_cflags", ""))]


def _is_gcc(cxx: str) -> bool:
    try:
        out = subprocess.run([cxx, "-v"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return "gcc version" in out.stderr and "clang" not in out.stderr.lower()


@dataclass
class Header:
    folder: Path
    command: list[str]
    """Compiles the real header into ``partial`` (renamed to the ``.gch`` when done)."""

    @property
    def gch(self) -> Path:
        return self.folder / "torch" / GCH

    @property
    def partial(self) -> Path:
        return self.folder / "torch" / (GCH + ".partial")

    def ready(self) -> bool:
        return self.gch.is_file()

    def failed(self) -> bool:
        return (self.folder / "failed.log").is_file()

    def touch(self) -> None:
        try:
            os.utime(self.gch)
        except OSError:
            pass

    def start_build(self, first_sighting_waits: bool = True) -> Callable[[], None] | None:
        """Start compiling the header unless another build is at it, or (``first_sighting_waits``)
        this is the first build that asked for it: a flag set seen once may never come back.
        The returned function waits for the compile and puts the header in place."""
        if self.failed():
            return None
        seen = self.folder / "seen"
        if first_sighting_waits and not seen.exists():
            seen.touch()
            return None
        lock = open(self.folder / "lock", "w")  # noqa: SIM115 (held until finish)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            return None
        if self.ready():
            lock.close()
            return None
        log = open(self.folder / "build.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def finish() -> None:
            try:
                code = proc.wait()
                log.close()
                if code == 0 and self.partial.is_file():
                    os.replace(self.partial, self.gch)
                    evict(self.folder.parent)
                else:
                    self.partial.unlink(missing_ok=True)
                    os.replace(self.folder / "build.log", self.folder / "failed.log")
            finally:
                lock.close()

        return finish


def _write_once(path: Path, text: str) -> None:
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def for_call(arguments: dict, shared: Path) -> Header | None:
    """The precompiled header that fits this call's bindings compile (maybe not built yet)."""
    import torch

    command = bindings_command(arguments)
    if not command or not _is_gcc(command[0]):
        return None
    real = torch_include() / "torch" / "extension.h"
    identity = {"command": command, "torch": torch.__version__, "git": getattr(torch.version, "git_version", ""),
                "header": real.stat().st_mtime_ns, "compiler": subprocess.run(
                    [command[0], "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[:1]}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
    folder = shared / f"pch-{key}"
    header = Header(folder, [*command, "-x", "c++-header", str(real), "-o", str(folder / "torch" / (GCH + ".partial"))])
    _write_once(folder / "torch" / "extension.h", "#include_next <torch/extension.h>\n")
    _write_once(folder / "command.json", json.dumps(identity, indent=1) + "\n")
    return header


def evict(shared: Path, keep: int = MAX_KEPT) -> None:
    """Remove all but the ``keep`` most recently used precompiled headers."""
    headers = sorted(shared.glob(f"pch-*/torch/{GCH}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in headers[keep:]:
        old.unlink(missing_ok=True)
