"""A run's lifecycle with real processes and real signals: one owner per run, and every way a
run can end (SIGINT, SIGTERM, SIGHUP, kill -9) leaves it resumable and shown as it is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kevin_agent.errors import RunLocked
from kevin_agent.runlock import LOCK_FILE, RunLock, lock_owner
from kevin_agent.store import RunStore, effective_status, list_runs

from .tui_support import fixed_info

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kevin_agent.runlock import RunLock
    lock = RunLock.acquire(Path(sys.argv[1]))
    print("held", flush=True)
    time.sleep(600)
""")


def hold_in_child(run_dir: Path) -> subprocess.Popen:
    """Another process that owns ``run_dir`` until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def stored_run(root: Path, status: str = "running") -> RunStore:
    store = RunStore.create(root, fixed_info("20250103-100000-affine-0003", status=status,
                                             created_at="2025-01-03T10:00:00+00:00"))
    store.release()
    return store


# --- the lock ------------------------------------------------------------------------------
def test_a_live_owner_is_named_and_a_killed_one_leaves_no_lock(tmp_path):
    store = stored_run(tmp_path)
    assert lock_owner(store.dir) is None
    proc = hold_in_child(store.dir)
    try:
        owner = lock_owner(store.dir)
        assert owner is not None and owner.pid == proc.pid and owner.host and owner.started_at
        with pytest.raises(RunLocked) as refused:
            RunLock.acquire(store.dir, store.info.run_id)
        assert f"process {proc.pid}" in refused.value.message and refused.value.exit_code == 2
        assert f"kill -INT {proc.pid}" in refused.value.hint
        (info, _), = list_runs(tmp_path)
        assert info.status == "running"
    finally:
        proc.kill()
        proc.wait()
    # kill -9: nothing marked the run, but nothing holds it either.
    assert lock_owner(store.dir) is None
    (info, _), = list_runs(tmp_path)
    assert info.status == "interrupted"
    with RunLock.acquire(store.dir) as lock:
        assert lock.owner.pid == os.getpid() and lock_owner(store.dir).is_self
    assert lock_owner(store.dir) is None and not (store.dir / LOCK_FILE).exists()


def test_effective_status_keeps_recorded_endings(tmp_path):
    for status in ("completed", "stopped", "interrupted", "failed"):
        store = stored_run(tmp_path / status, status)
        assert effective_status(store.info, store.dir) == status
    # A resumed run is running from the moment it is taken, before run.json says so.
    store = stored_run(tmp_path / "resumed", "interrupted")
    store.take()
    assert effective_status(store.info, store.dir) == "running"
    store.release()
    assert effective_status(store.info, store.dir) == "interrupted"


FORKING_HOLDER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from kevin_agent.runlock import RunLock
    lock = RunLock.acquire(Path(sys.argv[1]))
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
    time.sleep(600)
""")


def test_a_forked_child_does_not_keep_a_killed_owners_run(tmp_path):
    """A model server forked by the owner outlives a kill -9 for a while; the run is free anyway."""
    store = stored_run(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", FORKING_HOLDER, str(store.dir)], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        assert lock_owner(store.dir).pid == proc.pid
        proc.kill()
        proc.wait()
        os.kill(child, 0)  # still alive
        assert lock_owner(store.dir) is None
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
