"""A run's lifecycle with real processes and real signals: one owner per run, and every way a
run can end (SIGINT, SIGTERM, SIGHUP, kill -9) leaves it resumable and shown as it is."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from textual.widgets import Button, DataTable, Static

from kevin_agent.run import finish
from kevin_agent.config import RunConfig
from kevin_agent.errors import RunLocked
from kevin_agent.delivery.kernel_module import read_claim
from kevin_agent.run.launch import start_run
from kevin_agent.registry import build_registry
from kevin_agent.results.records import SCHEMA
from kevin_agent.store import LOCK_FILE, RunLock, lock_owner
from kevin_agent.store import RunStore, effective_status, list_runs
from kevin_agent.tui import KevinApp
from kevin_agent.tui.screens.dialogs import ConfirmScreen

from ..clihelp import kevin
from ..conftest import git_init
from ..tui.test_tui import GOOD, RESPONSES, TASK, make_project, text_of, wait_for
from ..tui_support import build_store, fixed_info

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kevin_agent.store import RunLock
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
        assert lock.owner.pid == os.getpid() == lock_owner(store.dir).pid
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
    from kevin_agent.store import RunLock
    lock = RunLock.acquire(Path(sys.argv[1]))
    child = os.fork()
    if child == 0:
        # The child names itself: by then the fork hooks that drop its copy of the lock have run.
        print(os.getpid(), flush=True)
        time.sleep(60)
        os._exit(0)
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


# --- real runs, real signals ------------------------------------------------------------------
# A compiler that never finishes: the run sits in its compile stage, with a worker and a
# "compiler" process of its own, without costing the machine a real build.
SLOW_CXX = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "slow-c++ 1.0"; exit 0; fi
echo $$ >> "$SLOW_CXX_PIDS"
exec sleep 600
"""


class Project:
    """A repository with a task and a one-answer script, and the environment its runs get."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = git_init(tmp_path / "proj")
        (self.root / "affine.py").write_text(TASK)
        answer = "```python\n" + GOOD.replace("affine_tui", "affine_never_built") + "```\nA C++ loop."
        (self.root / "responses.jsonl").write_text(json.dumps({"text": answer}) + "\n")
        subprocess.run(["git", "-C", self.root, "add", "."], check=True)
        subprocess.run(["git", "-C", self.root, "commit", "-qm", "my layer"], check=True)
        cxx = tmp_path / "slow-cxx"
        cxx.write_text(SLOW_CXX)
        cxx.chmod(0o755)
        self.compiler_pids = tmp_path / "compiler-pids"
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.mark = uuid.uuid4().hex
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_")}
        self.env.update(CI="true", PYTHONUNBUFFERED="1", CXX=str(cxx), SLOW_CXX_PIDS=str(self.compiler_pids),
                        TMPDIR=str(self.tmp), KEVIN_CACHE_DIR=str(tmp_path / "cache"), LIFECYCLE_TEST_MARK=self.mark)

    def start(self, *args: str, **popen) -> subprocess.Popen:
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", *args], cwd=self.root, env=self.env,
                                text=True, **popen)

    def run(self, *extra: str) -> subprocess.Popen:
        return self.start("run", "affine.py", "--device", "cpu", "--backend", "scripted", "--responses",
                          "responses.jsonl", "--turns", "1", "--headless", *extra)

    def wait_for_compiler(self, count: int = 1, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.compiler_pids.exists() and len(self.compiler_pids.read_text().split()) >= count:
                return
            time.sleep(0.2)
        raise AssertionError("the run never reached its compile")

    def processes(self) -> list[int]:
        """Live processes this project's runs started (workers, compilers), found through /proc."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if f"LIFECYCLE_TEST_MARK={self.mark}".encode() not in (entry / "environ").read_bytes():
                    continue
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                found.append(int(entry.name))
        return found

    def settled(self, timeout: float = 10) -> list[int]:
        deadline = time.monotonic() + timeout
        while (alive := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return alive

    def kill_leftovers(self) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def runs(self) -> list[Path]:
        return sorted((self.root / ".kevin" / "runs").glob("*/run.json"))

    def history(self) -> list[dict]:
        proc = kevin("history", "--json", cwd=self.root)
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert (data["schema"], data["kind"]) == (SCHEMA, "history")
        return data["runs"]


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    yield project
    project.kill_leftovers()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_ends_the_run_resumably_and_leaves_nothing_running(project, signum):
    proc = project.run("--json", "summary.json")
    project.wait_for_compiler()
    assert project.processes(), "the run's worker and compiler should be running"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    (run_json,) = project.runs()
    run_id = run_json.parent.name
    assert f"interrupted by {signum.name}" in stderr
    assert f"Continue with: kevin-opt resume {run_id}" in stderr and "Traceback" not in stderr
    assert project.settled() == [], "a worker or compiler outlived the run"
    assert list(project.tmp.iterdir()) == []  # no kevin-job-* or kevin-probe-* folder left
    assert json.loads(run_json.read_text())["status"] == "interrupted"
    assert not (run_json.parent / LOCK_FILE).exists()
    summary = json.loads((project.root / "summary.json").read_text())
    assert summary["reason"] == "interrupted" and summary["exit_code"] == 128 + signum
    assert summary["signal"] == signum.name and summary["delivery"] is None
    # The compile in flight was dropped, not recorded as a failure the model would be told about.
    assert (run_json.parent / "turns.jsonl").read_text() == ""


def test_a_killed_run_shows_as_interrupted_and_has_one_owner_when_resumed(project):
    proc = project.run()
    project.wait_for_compiler()
    proc.kill()  # kill -9: nothing in the run gets to say anything
    proc.communicate(timeout=30)
    project.kill_leftovers()  # the orphaned worker (its own session) is beyond anyone's reach
    (run_json,) = project.runs()
    run_id = run_json.parent.name
    assert json.loads(run_json.read_text())["status"] == "running"  # as the kill left it on disk...
    (listed,) = project.history()
    assert listed["status"] == "interrupted"  # ...and as every view shows it
    plain = kevin("history", "--plain", cwd=project.root).stdout
    assert run_id in plain and " interrupted " in plain and " running " not in plain

    first = project.start("resume", run_id, "--headless")
    project.wait_for_compiler(2)
    assert project.history()[0]["status"] == "running"
    second = kevin("resume", run_id, "--headless", cwd=project.root, env=project.env)
    assert second.returncode == 2, second.stderr
    assert f"run {run_id} is running in process {first.pid}" in second.stderr
    assert f"kill -INT {first.pid}" in second.stderr
    assert "resuming" not in second.stderr  # refused before anything was loaded
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 143, stderr
    assert project.settled() == []
    assert project.history()[0]["status"] == "interrupted"


def _take_terminal() -> None:
    # In the child: a session of its own whose controlling terminal is the pty on stdin, so that
    # closing the pty hangs it up (SIGHUP), as closing a terminal window does.
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A pseudo-terminal a process runs on, as a person's terminal would be; its output is kept.
    ``controlling``: the pty is the process's controlling terminal (``hang_up`` closes it)."""

    def __init__(self, project: Project, *args: str, size: tuple[int, int] = (100, 30),
                 controlling: bool = False, env: dict | None = None) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        env = {k: v for k, v in (env or project.env).items() if k != "CI"}
        env["TERM"] = "xterm-256color"
        session = {"preexec_fn": _take_terminal} if controlling else {"start_new_session": True}
        self.proc = subprocess.Popen([sys.executable, "-m", "kevin_agent.cli", *args], cwd=project.root, env=env,
                                     stdin=slave, stdout=slave, stderr=slave, **session)
        os.close(slave)
        self._master: int | None = master
        self._chunks: list[bytes] = []
        self._closing = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        # Polled, so that hang_up can stop the reader before it closes the pty: a read blocked on
        # the pty would keep it open.
        while not self._closing.is_set():
            if not select.select([fd], [], [], 0.1)[0]:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self._chunks.append(chunk)

    @property
    def output(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    def send(self, keys: str) -> None:
        os.write(self._master, keys.encode())

    def hang_up(self) -> None:
        """Close the terminal under the process, as closing its window or killing its tmux session does."""
        self._closing.set()
        self._reader.join(timeout=10)
        os.close(self._master)
        self._master = None

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        if self._master is not None:
            os.close(self._master)
            self._master = None
        return code


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_on_a_terminal_run_and_resume_open_the_tui_and_signals_end_them(project, signum):
    term = Terminal(project, "run", "affine.py", "--device", "cpu", "--backend", "scripted", "--responses",
                    "responses.jsonl", "--turns", "1")
    project.wait_for_compiler()
    term.proc.send_signal(signum)
    assert term.wait() == 128 + signum, term.output
    assert "\x1b[?1049h" in term.output  # the TUI was open (alternate screen)
    (run_json,) = project.runs()
    run_id = run_json.parent.name
    assert f"Continue with: kevin-opt resume {run_id}" in term.output
    assert json.loads(run_json.read_text())["status"] == "interrupted"
    assert project.settled() == [] and list(project.tmp.iterdir()) == []

    term = Terminal(project, "resume", run_id)
    project.wait_for_compiler(2)
    assert "\x1b[?1049h" in term.output  # `resume` on a terminal opens the TUI too
    term.proc.send_signal(signal.SIGINT)  # from outside: under the TUI, Ctrl+C is a key
    assert term.wait() == 130, term.output
    assert f"Continue with: kevin-opt resume {run_id}" in term.output
    assert json.loads(run_json.read_text())["status"] == "interrupted"
    assert project.settled() == [] and not (run_json.parent / LOCK_FILE).exists()


# --- the TUI's side of the finish path --------------------------------------------------------
def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def one_turn_config(repo: Path, **extra) -> RunConfig:
    # The verified kernel the TUI tests compile, so the shared build cache serves it.
    return RunConfig(backend="scripted", responses=repo / "responses.jsonl", device="cpu", turns=1, timed_runs=5,
                     warmup_runs=1, correctness_trials=2, min_speedup=0, **extra)


async def question(pilot, app, what: str = "the question") -> tuple[str, str, str]:
    """Wait for a question to be on screen; its title, its body and its yes button."""
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query("#yes"), 120, what)
    screen = app.screen
    body = screen.query_one("#dialog-body Static", Static)
    return (screen.query_one("#dialog").border_title, getattr(body, "plain", None) or str(body.render()),
            str(screen.query_one("#yes", Button).label))


async def ended(pilot, app) -> None:
    await wait_for(pilot, lambda: app.outcome is not None, 600, "the run to end")


@pytest.mark.slow
async def test_c_under_no_commit_writes_and_never_commits(tmp_path):
    repo = make_project(tmp_path / "proj", [RESPONSES[2]])
    head = git(repo, "rev-parse", "HEAD")
    config = one_turn_config(repo, commit=False)
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink), runs_root=repo / ".kevin" / "runs",
                   deliver_at_end=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await ended(pilot, app)
        await pilot.press("c")
        title, body, yes = await question(pilot, app)
        assert (title, yes) == ("write the best kernel?", "Write (y)")
        assert "commit  no (--no-commit)" in body and "module  affine_kevin.py: new" in body
        await pilot.press("y")
        await wait_for(pilot, lambda: app.delivery is not None, 120, "the delivery")
        header = text_of(app, "#run-header")
        assert "written, not committed (--no-commit)" in header and "committed " not in header.replace(
            "not committed", "")
    assert app.delivery.outcome == "written" and app.exit_code == 0
    assert git(repo, "rev-parse", "HEAD") == head
    assert "?? affine_kevin.py" in git(repo, "status", "--porcelain", "--untracked-files=all")
    (info, _), = list_runs(repo / ".kevin" / "runs")
    assert info.commit is None and info.delivery == "written, not committed (--no-commit)"
    assert info.status == "completed"  # given up once delivered: no longer "running"


@pytest.mark.slow
async def test_no_at_the_end_leaves_the_tree_alone_and_a_better_kernel_is_asked_about(tmp_path):
    from kevin_agent.evaluate.toolchain.cache import cpu_name

    repo = make_project(tmp_path / "proj", [RESPONSES[2]])
    better = (f'# kevin-opt-kernel: {{"speedup": 99.0, "device": "cpu", "device_name": {json.dumps(cpu_name())}, '
              '"run_id": "20250101-000000-affine-0000", "trajectory": 0, "turn": 7}\n' + GOOD)
    (repo / "affine_kevin.py").write_text(better)
    git(repo, "add", "affine_kevin.py")
    git(repo, "commit", "-qm", "the kernel of an earlier run")
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    config = one_turn_config(repo)
    registry = build_registry()
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink, registry=registry),
                   runs_root=repo / ".kevin" / "runs")
    async with app.run_test(size=(100, 30)) as pilot:
        await ended(pilot, app)
        title, body, yes = await question(pilot, app, "the question at the end")
        assert (title, yes) == ("replace the existing files?", "Replace and commit (y)")
        assert "claims 99.00x" in body and "turn 7" in body
        await pilot.press("n")
        await wait_for(pilot, lambda: app.delivery is not None, 60, "the answer to be recorded")
        assert app.delivery.outcome == "declined" and app.exit_code == 1
        assert "not written (declined)" in text_of(app, "#run-header")
        assert git(repo, "status", "--porcelain", "--untracked-files=all") == status
        out = io.StringIO()
        assert finish.close(app.ending(), finish.Outputs(), registry, stream=out) == 1
        assert "declined: nothing written, nothing committed" in out.getvalue()
        # Asked again with c, the answer is yes: the better-claiming module is replaced, and committed.
        await pilot.press("c")
        await question(pilot, app)
        await pilot.press("y")
        await wait_for(pilot, lambda: app.delivery.outcome != "declined", 120, "the delivery")
    assert app.delivery.committed and app.exit_code == 0
    assert read_claim(repo / "affine_kevin.py").speedup == app.outcome.best.speedup
    assert "replaced affine_kevin.py, which claimed 99.00x" in "\n".join(app.delivery.notes)
    assert git(repo, "status", "--porcelain", "--", "affine_kevin.py") == ""


@pytest.mark.slow
async def test_a_refusal_says_where_the_kernel_waits_and_the_exit_does_not_blame_a_change_put_away(tmp_path):
    """The module has an edit of the person's when the run ends: nothing is written, and the TUI
    says where the winner is and how to deliver it. Stashed before quitting, the edit is not
    blamed on the way out: resume delivers now."""
    from kevin_agent.tui import _close

    repo = make_project(tmp_path / "proj", [RESPONSES[2]])
    (repo / "affine_kevin.py").write_text("# an earlier kernel\n")
    git(repo, "add", "affine_kevin.py")
    git(repo, "commit", "-qm", "an earlier kernel")
    (repo / "affine_kevin.py").write_text("# an earlier kernel, edited\n")
    registry = build_registry()
    config = one_turn_config(repo)
    app = KevinApp(lambda sink: start_run(config, repo / "affine.py", sink, registry=registry),
                   runs_root=repo / ".kevin" / "runs")
    async with app.run_test(size=(100, 30)) as pilot:
        await ended(pilot, app)
        await wait_for(pilot, lambda: app.delivery is not None, 120, "the delivery")
        notes = "\n".join(app.delivery.notes)
        run_id = app.outcome.run_id
        assert app.delivery.outcome == "refused" and "uncommitted changes in affine_kevin.py" in notes
        assert f"the winning kernel is kept in {repo / '.kevin' / 'runs' / run_id / 'kernels'}" in notes, notes
        assert f"kevin-opt resume {run_id} delivers it once the changes there are committed, stashed" in notes
        git(repo, "stash", "-q")
        await pilot.press("q")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = _close(app, finish.Outputs(), registry)
    said = err.getvalue()
    assert code == 1 and "uncommitted changes in affine_kevin.py: commit, stash" not in said, said
    assert "when the run ended there were uncommitted changes in affine_kevin.py; there are none now" in said
    assert f"kevin-opt resume {run_id} delivers it now" in said
    assert (repo / "affine_kevin.py").read_text() == "# an earlier kernel\n"  # nothing written on the way out


async def test_history_shows_a_live_run_as_running_and_does_not_resume_it(tmp_path):
    root = build_store(tmp_path / "runs")
    cut = root / "20250102-090000-affine-0002"
    holder = hold_in_child(cut)
    try:
        app = KevinApp(runs_root=root)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            table = app.screen.query_one("#runs", DataTable)
            assert str(table.get_row_at(0)[2]) == "live"  # id, kind, status
            assert app.screen.run_id == cut.name
            await pilot.press("r")
            await pilot.pause()
            assert not app.running and app.engine is None
            messages = [" ".join(n.message.split()) for n in app._notifications]
            assert any(f"process {holder.pid}" in m for m in messages), messages
            # Asked to resume it all the same, the app refuses it by the lock, naming its owner.
            app.resume_run(cut.name)
            await pilot.pause()
            assert not app.running and app.engine is None
            messages = [" ".join(n.message.split()) for n in app._notifications]
            assert any(f"is running in process {holder.pid}" in m for m in messages), messages
    finally:
        holder.kill()
        holder.wait()


def test_a_signal_to_the_history_on_a_terminal_speaks_of_no_run(project):
    term = Terminal(project, "history", "--run-dir", str(project.root / "runs"))
    deadline = time.monotonic() + 60
    while "history" not in term.output and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "\x1b[?1049h" in term.output, term.output  # the TUI is open
    term.proc.send_signal(signal.SIGTERM)
    assert term.wait() == 143, term.output
    assert "interrupted by SIGTERM" in term.output and "before the run started" not in term.output
    assert "Continue with" not in term.output
