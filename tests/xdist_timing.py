"""Under pytest-xdist (scripts/test runs two processes), a test marked ``timing`` runs alone: it holds
the run's lock exclusively, from its fixtures' set-up to their tear-down, while every other test holds
it shared. Such a test decides on measured speed (a kernel kept or dropped on the whole model's
interval), and the other process's compiles and workers on a 2-core machine move that.

A second lock, the gate, keeps a waiting timing test from being passed over: it holds the gate while
it waits, and the other tests pass through the gate before they take their shared hold, so none
starts once it waits. Each process holds one test's locks at a time, so none waits on itself."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest


def _paths(run: str) -> tuple[Path, Path]:
    folder = Path(tempfile.gettempdir())
    return folder / f"kevin-tests-{run}.gate", folder / f"kevin-tests-{run}.lock"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield
        return
    gate_path, lock_path = _paths(run)
    with open(gate_path, "a") as gate, open(lock_path, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if item.get_closest_marker("timing") else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


RUNS: set[str] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """The controller's note of its run, whose lock files it removes once every process is done."""
    RUNS.add(node.workerinput["testrunuid"])


def pytest_unconfigure(config):
    for run in RUNS:
        for path in _paths(run):
            path.unlink(missing_ok=True)
