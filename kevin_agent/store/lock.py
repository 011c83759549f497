"""One owner per run: an exclusive lock on ``<run dir>/lock``.

The owner holds ``fcntl.flock`` on the lock file for as long as it drives the run. The kernel
drops the lock when the owning process ends, however it ends (``kill -9`` included), so a lock
that nobody holds is stale by definition: no pid guessing. The file also names the owner (pid,
host, start time) so that a refusal can say who holds the run.

Forked children (not the compiler and worker processes, which are exec'd and never inherit the
descriptor) would keep the lock alive after the owner died; they close their copy at fork.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import threading
import time
from pathlib import Path

from ..errors import RunLocked
from ..results.versioned import RUN_SCHEMA, Versioned, schema_field

LOCK_FILE = "lock"
_ACQUIRE_TRIES_S = 1.0
"""How long ``acquire`` retries: ``lock_owner`` holds a shared lock for an instant to look."""

_held: dict[int, Path] = {}
_held_lock = threading.Lock()


def _close_in_child() -> None:
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


class LockOwner(Versioned, frozen=True):
    """Who holds a run: the process that drives it (the lock file's text)."""

    schema_: int = schema_field(RUN_SCHEMA)
    pid: int
    """0 when the owner has not written its name yet."""
    host: str
    started_at: str

    def describe(self) -> str:
        if not self.pid:
            return "another process"
        where = "" if self.host == socket.gethostname() else f" on {self.host}"
        since = f" (since {self.started_at})" if self.started_at else ""
        return f"process {self.pid}{where}{since}"


def _read_owner(path: Path) -> LockOwner:
    # The owner writes its name right after it takes the lock; a reader may come in between.
    for _ in range(20):
        try:
            return LockOwner.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            time.sleep(0.01)
    return LockOwner(pid=0, host="", started_at="")


def lock_owner(run_dir: Path) -> LockOwner | None:
    """The live process that holds ``run_dir``, or None when no process does (a run marked
    "running" without an owner was killed)."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return _read_owner(path)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class RunLock:
    """The exclusive hold on one run directory; ``release`` (or process exit) gives it up."""

    def __init__(self, run_dir: Path, fd: int, owner: LockOwner) -> None:
        self.run_dir = run_dir
        self.owner = owner
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, run_dir: Path, run_id: str | None = None) -> RunLock:
        """Take the run, or raise ``RunLocked`` naming the process that holds it."""
        run_dir = Path(run_dir)
        path = run_dir / LOCK_FILE
        deadline = time.monotonic() + _ACQUIRE_TRIES_S
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                owner = _read_owner(path)
                raise RunLocked.held_by(run_id or run_dir.name, owner) from None
            # A releasing owner unlinks the file: a lock on the old inode would be no lock at all.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        owner = LockOwner(pid=os.getpid(), host=socket.gethostname(),
                          started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, owner.model_dump_json().encode(), 0)
        with _held_lock:
            _held[fd] = path
        return cls(run_dir, fd, owner)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the run up (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with _held_lock:
            path = _held.pop(fd, None)
        if path is not None:
            # Unlink while still holding it, so nobody locks a file that is about to vanish.
            try:
                path.unlink()
            except OSError:
                pass
        os.close(fd)

    def __del__(self) -> None:
        # A hold that nothing refers to any more is no hold: a dropped store gives its run up.
        try:
            self.release()
        except Exception:
            pass

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
