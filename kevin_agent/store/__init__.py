"""The run directory on disk: ``run.json``, ``turns.jsonl``, each turn's prompt, response and
kernel (``runs``), and the lock a live run holds on it (``lock``). Below the engine, which writes
it, and every front end that reads it back; it imports the result records and nothing else."""

from .lock import LOCK_FILE, RunLock, lock_owner
from .optimizes import OptimizeStore, effective_optimize_status, list_optimizes, new_optimize_id
from .runs import (
                   Damaged,
                   RunStore,
                   default_runs_root,
                   effective_status,
                   list_runs,
                   new_run_id,
                   now_iso,
                   read_info,
                   read_records,
                   write_atomic,
)

__all__ = ["Damaged", "LOCK_FILE", "OptimizeStore", "RunLock", "RunStore", "default_runs_root", "effective_optimize_status",
           "effective_status", "list_optimizes", "list_runs", "lock_owner", "new_optimize_id",
           "new_run_id", "now_iso", "read_info", "read_records", "write_atomic"]
