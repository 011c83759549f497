"""User-facing errors: one base class with a message and a hint.

The CLI maps these to exit codes and the TUI to notifications. Anything that is not a
``KevinError`` is a bug and propagates with its traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The headless contract's exit codes, defined once for the CLI and the TUI."""

    OK = 0
    """A verified kernel met --min-speedup and was delivered."""
    NONE = 1
    """No verified kernel met it (or delivery was refused)."""
    USAGE = 2
    """Bad input or usage."""
    ENVIRONMENT = 3
    """The environment cannot run it (no GPU, no backend)."""
    INTERRUPTED = 130
    """Interrupted by SIGINT (128 + the signal's number; SIGTERM gives 143, SIGHUP 129), or the person
    quit the terminal UI while the run went on."""

    @staticmethod
    def for_signal(signum: int) -> int:
        return 128 + signum


class KevinError(Exception):
    """An error the person can act on: what went wrong, and what to do about it."""

    #: Exit code for the headless contract: 2 bad input or usage, 3 environment cannot run it.
    exit_code: int = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(KevinError):
    """Bad flags or arguments."""


class TaskError(KevinError):
    """The task file cannot be loaded or its inputs cannot be built."""


class ConfigError(KevinError):
    """Invalid configuration (flags, KEVIN_* environment, [tool.kevin])."""


class RunNotFound(KevinError):
    """A run id that is not in the run store."""


class RunUnreadable(KevinError):
    """A run directory in a layout (``schema``) this version of kevin-opt does not read."""


class RunLocked(KevinError):
    """The run is driven by another live process: two owners would write the same turns twice."""

    @classmethod
    def held_by(cls, run_id: str, owner) -> RunLocked:
        return cls(f"run {run_id} is running in {owner.describe()}",
                   f"wait for it to end, or stop it first (kill -INT {owner.pid}); then resume it"
                   if owner.pid else "wait for it to end, then resume it")


class EnvironmentUnavailable(KevinError):
    """The environment cannot run this (no GPU, no compiler, backend not installed)."""

    exit_code = ExitCode.ENVIRONMENT


class EvaluationOutOfMemory(EnvironmentUnavailable):
    """The evaluation itself ran out of device memory during a run (its own copies, or memory other
    processes took since the task was measured): not a candidate's doing, never shown to the model."""


class BackendError(KevinError):
    """The model backend failed: server unreachable, wrong model, script exhausted."""

    exit_code = ExitCode.ENVIRONMENT


class DeliveryRefused(KevinError):
    """The delivery would overwrite what is the person's (uncommitted changes, a file git could not
    restore): refused before any work, exit 1 as a refused delivery."""

    exit_code = ExitCode.NONE


class GitError(KevinError):
    """The commit could not be made; the files are written but nothing was committed."""

    exit_code = ExitCode.NONE
