"""The suite's two processes (scripts/test) leave a test marked ``timing`` alone: a real pytest-xdist
run of a generated suite, a timing test in one file and plain tests in another, each writing when it
ran; the plain ones wait for the timing one to begin (or 6 s), so that without the lock they run
beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .conftest import REPO

CONFTEST = "from tests.xdist_timing import pytest_configure_node, pytest_runtest_protocol, pytest_unconfigure  # noqa\n"
INI = "[pytest]\nmarkers =\n    timing: decides on measured speed\n"
TEST = '''import json, os, time
from pathlib import Path
import pytest

BEGUN = Path(os.environ["SPELLS"]).with_suffix(".begun")

def spell(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.environ["SPELLS"], "a") as out:
        out.write(json.dumps([name, start, time.monotonic()]) + "\\n")
'''
TIMED = TEST + '''
@pytest.mark.timing
def test_timed():
    BEGUN.touch()
    spell("timed", 3.0)
'''
PLAIN = TEST + "".join(f'''
def test_plain_{i}():
    deadline = time.monotonic() + 6
    while not BEGUN.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    spell("plain", 0.3)
''' for i in range(6))


def test_a_timing_test_runs_while_no_other_test_does(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in {"conftest.py": CONFTEST, "pytest.ini": INI, "test_a_timed.py": TIMED,
                       "test_b_plain.py": PLAIN}.items():
        (suite / name).write_text(text)
    spells = tmp_path / "spells.jsonl"
    before = set(Path(tempfile.gettempdir()).glob("kevin-tests-*"))  # an enclosing xdist run's own
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPELLS": str(spells)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadfile", str(suite)], cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [json.loads(line) for line in spells.read_text().splitlines()]
    ((_, start, end),) = [r for r in ran if r[0] == "timed"]
    plain = [(s, e) for name, s, e in ran if name == "plain"]
    # none of the plain tests ran while the timed one did
    assert len(plain) == 6 and all(e <= start or s >= end for s, e in plain), (start, end, plain)
    # and the run's lock files are gone with it
    assert not set(Path(tempfile.gettempdir()).glob("kevin-tests-*")) - before
