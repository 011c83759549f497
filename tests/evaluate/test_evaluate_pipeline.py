"""The evaluator as a pipeline, on the cpu device with real worker processes: submission, the
device gate, stage times, time limits, warm workers, the reference cache, abort and close."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace
from pathlib import Path

import pytest

from ..clihelp import REPO
from ..evalfixtures import TASK_SOURCE, eval_root, runtime_source, scale_task, write_task  # noqa: F401  (fixtures)
from kevin_agent.evaluate import EvalSettings, LocalEvaluator
from kevin_agent.evaluate.parent.gate import DeviceGate, GaveUp
from kevin_agent.protocols import Evaluator
from kevin_agent.results import Stage, Status
from kevin_agent.task import load_task


def _settings(tmp_path, **kw) -> EvalSettings:
    base = dict(device="cpu", cache_dir=tmp_path / "b", warmup_runs=1, timed_runs=3, op_audit=False)
    return EvalSettings(**{**base, **kw})


@pytest.fixture
def evaluator(scale_task, tmp_path):
    ev = LocalEvaluator(scale_task, _settings(tmp_path))
    ev.probe()
    yield ev
    ev.close()


def _wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_submit_resolves_to_a_result_whose_stage_times_add_up(evaluator):
    assert isinstance(evaluator, Evaluator)
    future = evaluator.submit(runtime_source("honest_python"))
    res = future.result(timeout=300)
    assert res.status is Status.CORRECT, res.error
    times = res.stage_s
    assert times is not None and times.load > 0 and times.correctness > 0 and times.timing > 0
    assert times.total == pytest.approx(res.wall_s, abs=0.05)


def test_device_busy_holds_timing_back_while_correctness_goes_on(evaluator):
    seen: list[tuple[float, Stage]] = []
    with evaluator.device_busy():
        future = evaluator.submit(runtime_source("honest_python"),
                                  on_stage=lambda s: seen.append((time.monotonic(), s)))
        _wait_for(lambda: any(s is Stage.CORRECTNESS for _, s in seen))
        time.sleep(2.0)
        assert Stage.TIMING not in [s for _, s in seen]
        released = time.monotonic()
    res = future.result(timeout=120)
    assert res.status is Status.CORRECT, res.error
    timing_started = next(t for t, s in seen if s is Stage.TIMING)
    assert timing_started >= released
    assert res.stage_s.queue >= 1.5


def test_timing_has_the_device_alone(evaluator):
    """Two candidates at once: one's correctness never overlaps the other's timing."""
    seen: list[tuple[float, int, Stage]] = []
    lock = threading.Lock()

    def note(i):
        def on_stage(s):
            with lock:
                seen.append((time.monotonic(), i, s))
        return on_stage

    futures = [evaluator.submit(runtime_source("honest_python"), on_stage=note(i)) for i in range(2)]
    results = [f.result(timeout=300) for f in futures]
    assert all(r.status is Status.CORRECT for r in results), [r.error for r in results]
    spans = {}
    for i in range(2):
        start = next(t for t, j, s in seen if j == i and s is Stage.TIMING)
        end = next(t for t, j, s in seen if j == i and s is Stage.DONE)
        spans[i] = (start, end)
    for i in range(2):
        other = 1 - i
        for t, j, s in seen:
            if j == other and s in (Stage.LOAD, Stage.CORRECTNESS, Stage.TIMING):
                assert not spans[i][0] < t < spans[i][1], (i, s)


PID_CANDIDATE = '''
import os

import torch.nn as nn

with open({pidfile!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale + 1.0  # {tag}
'''

HANG_ON_CALL = '''
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        while self.calls >= {call}:
            pass
        return x * self.scale + 1.0
'''

FIXED_SCALE = '''
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        return x * 2.0 + 1.0
'''


def _worker_pids(evaluator) -> set[int]:
    """Live processes whose command line names a job in this evaluator's folder."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if str(evaluator.scratch) in cmdline and state not in ("Z", "X"):
            pids.add(int(proc.name))
    return pids


@pytest.mark.parametrize(("call", "stage"), [(1, Stage.CORRECTNESS), (12, Stage.TIMING)])
def test_a_hang_is_killed_at_the_limit_derived_from_the_reference(scale_task, tmp_path, call, stage):
    """Call 1 hangs in the correctness trials; call 12 (after the ten of the trials) in timing."""
    ev = LocalEvaluator(scale_task, _settings(tmp_path, stage_floor_s=3.0, run_timeout_s=300))
    try:
        ev.probe()
        hang, after = ev.evaluate([HANG_ON_CALL.format(call=call), runtime_source("honest_python")])
    finally:
        ev.close()
    assert hang.status is Status.TIMEOUT and hang.stage is stage, (hang.status, hang.error)
    limit = float(re.search(r"timed out after ([\d.]+) s", hang.error).group(1))
    calls, per_call_ms = re.search(r"stage_floor_s 3 s \+ stage_time_factor 50 x (\d+) calls x ([\d.e+-]+) ms, "
                                   "the reference's own time per call", hang.error).groups()
    # Beside the calls, what moving the stage's inputs takes (drawing each run's copy), where it is named.
    moved = sum(float(s) for s in re.findall(r" \+ ([\d.e+-]+) s to draw", hang.error))
    assert limit == pytest.approx(3.0 + 50 * int(calls) * float(per_call_ms) / 1e3 + moved, rel=0.01)
    # Derived from the reference, not run_timeout_s (300 s). A few seconds on a quiet machine; the
    # reference's own time, and so the limit, grows with the machine's load.
    run_timeout_s = 300
    assert limit < run_timeout_s / 2, hang.error
    spent = getattr(hang.stage_s, stage.value)
    # Killed at the limit (the error gives it to 3 digits), far nearer it than the run's timeout.
    assert 0.995 * limit <= spent < (limit + run_timeout_s) / 2, (spent, hang.stage_s)
    # The next candidate did not wait for run_timeout_s: it is correct, and took less than half of it.
    assert after.status is Status.CORRECT, after.error
    assert after.wall_s < run_timeout_s / 2


def test_prestarted_workers_wait_for_one_candidate_each_and_are_never_reused(scale_task, tmp_path):
    pidfile = tmp_path / "pids"
    ev = LocalEvaluator(scale_task, _settings(tmp_path))
    try:
        ev.probe()
        results, ran = [], []
        for i in range(3):
            _wait_for(lambda: ev.pool.ready_count() > 0)
            waiting = _worker_pids(ev)
            res = ev.submit(PID_CANDIDATE.format(pidfile=str(pidfile), tag=i)).result(timeout=300)
            assert res.status is Status.CORRECT, res.error
            ran.append(int(pidfile.read_text().split()[-1]))  # its build imported it too, earlier
            assert ran[-1] in waiting  # started before its candidate came
            results.append(res)
        assert len(set(ran)) == 3, ran
        # Each ends once it has replied (reaped in the background, off the candidate's clock).
        _wait_for(lambda: not (set(ran) & _worker_pids(ev)), timeout=10)
        # Their load is the candidate's alone: well under what starting a process with torch takes.
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        bare_import_s = time.monotonic() - started
        assert max(r.stage_s.load for r in results) < bare_import_s / 2, ([r.stage_s for r in results], bare_import_s)
    finally:
        ev.close()


def test_a_worker_that_replied_ends_off_its_candidates_clock_and_frees_its_slot_once_gone(scale_task, tmp_path,
                                                                                            monkeypatch):
    """A run worker's process takes a while to end after its reply (on cuda the driver tears down a
    context that may hold gigabytes): that is neither the candidate's time nor the device's, but the
    worker's share of the memory plan stays taken until the process is gone."""
    from kevin_agent.evaluate.jobs import EvalWorker

    # The worker's end waits for the test: whatever the machine's load, the result must come
    # back while it is still waiting, and the slot is freed only once it is over.
    may_end = threading.Event()
    ending = threading.Event()

    class SlowToEnd(EvalWorker):
        def finish(self) -> int:
            if not self.finished:
                ending.set()
                may_end.wait(timeout=600)
            return super().finish()

    monkeypatch.setattr(LocalEvaluator, "_start_run_worker", lambda self: SlowToEnd(
        self.job("run"), env=self.env(self.scratch / "extensions"), root=self.scratch))
    ev = LocalEvaluator(scale_task, _settings(tmp_path, eval_workers=1))
    try:
        ev.probe()
        first = ev.submit(runtime_source("honest_python")).result(timeout=300)
        returned_before_its_worker_ended = not may_end.is_set()
        # One evaluation at a time: its slot is still taken while the worker ends, free once it is gone.
        _wait_for(ending.is_set)
        taken = not ev._run_slots.acquire(blocking=False)
        may_end.set()
        _wait_for(lambda: ev._run_slots.acquire(blocking=False))
        ev._run_slots.release()
    finally:
        may_end.set()
        ev.close()
    assert first.status is Status.CORRECT, first.error
    assert returned_before_its_worker_ended and taken


def test_abort_kills_waiting_and_running_workers_and_removes_their_folders(scale_task, tmp_path):
    ev = LocalEvaluator(scale_task, _settings(tmp_path, stage_floor_s=300))
    ev.probe()
    seen: list[Stage] = []
    future = ev.submit(HANG_ON_CALL.format(call=1), on_stage=seen.append)
    _wait_for(lambda: Stage.CORRECTNESS in seen and ev.pool.ready_count() > 0)
    workers = _worker_pids(ev)
    assert len(workers) >= 2  # the hanging one and the next one, waiting
    assert list(ev.scratch.glob("kevin-job-*"))
    ev.abort()
    res = future.result(timeout=120)
    # Ended by the abort, not by the hang's limit (stage_floor_s 300): the result says so.
    assert res.status is Status.RUNTIME_ERROR and "interrupted" in res.error
    _wait_for(lambda: not (workers & _worker_pids(ev)), timeout=10)
    _wait_for(lambda: not list(ev.scratch.glob("kevin-job-*")), timeout=10)
    late = ev.submit(runtime_source("honest_python")).result(timeout=10)
    assert "interrupted" in late.error
    ev.close()
    assert not ev.scratch.exists()


def _files_state(folder: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if not p.name.startswith(".")}


def test_reference_data_is_made_once_per_task_and_settings(tmp_path):
    task_file = write_task(tmp_path / "task")
    first = LocalEvaluator(load_task(task_file), _settings(tmp_path))
    first.probe()
    folders = list((tmp_path / "b" / "reference").iterdir())
    assert len(folders) == 1
    made = _files_state(folders[0])
    # Inputs that come out the same from their seed are drawn again where they are used, not stored.
    assert {"meta.json", "outputs.pt"} <= set(made) and "inputs.pt" not in made
    assert first.reference.sets[0].digests and first.reference.sets[0].drawn_on == "cpu"
    (res,) = first.evaluate([FIXED_SCALE])
    assert res.status is Status.CORRECT, res.error
    first.close()
    # The workers imported the task and wrote no bytecode beside it: the person's folder is as it was.
    assert sorted(p.name for p in task_file.parent.iterdir()) == [task_file.name]

    # A second evaluator (a resumed run, another process) reads it and changes nothing.
    second = LocalEvaluator(load_task(task_file), _settings(tmp_path))
    second.probe()
    assert second.reference == first.reference
    (res,) = second.evaluate([FIXED_SCALE])
    second.close()
    assert res.status is Status.CORRECT, res.error
    assert _files_state(folders[0]) == made

    # The task changes: other data, and the candidate tuned to the old task is caught.
    task_file.write_text(TASK_SOURCE.replace("return [2.0]", "return [3.0]"))
    third = LocalEvaluator(load_task(task_file), _settings(tmp_path))
    third.probe()
    (res,) = third.evaluate([FIXED_SCALE])
    third.close()
    assert len(list((tmp_path / "b" / "reference").iterdir())) == 2
    assert res.status is Status.INCORRECT, res.error


def test_a_timing_stops_builds_and_warming_workers_until_it_ends(tmp_path):
    """A process group registered as pausable makes no progress while the gate is held alone."""
    ticks = tmp_path / "ticks"
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True:\n"
                             f"    open({str(ticks)!r}, 'a').write('x')\n    time.sleep(0.01)\n"],
                            start_new_session=True)
    gate = DeviceGate(tmp_path / "lock")
    try:
        with gate.pausable(proc.pid):
            _wait_for(lambda: ticks.exists() and ticks.stat().st_size > 5)
            with gate.exclusive():
                time.sleep(0.2)
                before = ticks.stat().st_size
                time.sleep(1.0)
                assert ticks.stat().st_size == before
            time.sleep(0.5)
            assert ticks.stat().st_size > before
    finally:
        proc.kill()
        proc.wait()


def test_checks_keep_starting_while_generation_holds_a_timing_back(tmp_path):
    """A timing that waits for the generation does not hold up other candidates' checks."""
    gate = DeviceGate(tmp_path / "lock")
    order: list[str] = []

    def time_it():
        with gate.exclusive():
            order.append("timing")

    with gate.shared(patient=False):
        waiting = threading.Thread(target=time_it)
        waiting.start()
        time.sleep(0.3)
        with gate.shared():
            order.append("check")
        assert order == ["check"]
    waiting.join(timeout=5)
    assert order == ["check", "timing"]


def _hold_flock(path: Path, seconds: float, letting_go: Path | None = None) -> subprocess.Popen:
    """Another process holding the lock for ``seconds``; it writes ``letting_go`` just before it
    lets go."""
    mark = f"open({str(letting_go)!r}, 'w').close()\n" if letting_go else ""
    holder = subprocess.Popen([sys.executable, "-c", f"import fcntl, time\nf = open({str(path)!r}, 'a')\n"
                               f"fcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep({seconds})\n"
                               f"{mark}"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_the_gate_holds_across_processes_and_a_wait_can_be_abandoned(tmp_path):
    lock, letting_go = tmp_path / "lock", tmp_path / "letting-go"
    holder = _hold_flock(lock, 1.5, letting_go)
    with DeviceGate(lock).shared():
        assert letting_go.exists()  # in only once the other process (timing) let go
    holder.wait()

    holder = _hold_flock(lock, 600)
    gate = DeviceGate(lock)
    threading.Timer(0.5, gate.close).start()
    with pytest.raises(GaveUp):
        with gate.shared():
            pass
    assert holder.poll() is None  # given up while the other process still held the lock
    holder.kill()
    holder.wait()
    with DeviceGate(lock).exclusive():  # the abandoned wait did not keep the lock
        pass


def test_the_load_stage_has_its_own_limit_not_one_derived_from_the_reference():
    """No kernel runs while a candidate loads; a machine busy with builds must not make an honest
    import time out, so load gets load_timeout_s while the kernel's stages get derived limits."""
    from kevin_agent.evaluate.reference import stage_limit

    settings = EvalSettings(device="cpu", stage_floor_s=3.0, load_timeout_s=90.0, run_timeout_s=300.0)
    reference = SimpleNamespace(eager=SimpleNamespace(median_ms=0.5), call_s=0.0005, answers_stored=True,
                                transfer_bytes_per_s=0.0, draw_s=0.0, signatures=[])
    load = stage_limit("load", settings, reference)
    assert load.seconds == 90.0 and "load_timeout_s" in load.how
    assert stage_limit("correctness", settings, reference).seconds < 10
    assert stage_limit("load", settings.model_copy(update={"run_timeout_s": 60.0}), reference).seconds == 60.0


UNREPEATABLE_TASK = TASK_SOURCE.replace("import torch\n", "import random\nimport torch\n", 1).replace(
    "return [torch.randn(128, 512)]", "return [torch.randn(128, 512) * random.uniform(0.5, 2.0)]")


def test_inputs_that_do_not_repeat_from_their_seed_are_stored_and_still_verify(tmp_path):
    # get_inputs() scales by Python's own random numbers: drawing a set again would give other
    # values, so each worker takes the inputs the reference answered from disk instead.
    task_file = write_task(tmp_path / "task")
    task_file.write_text(UNREPEATABLE_TASK)
    ev = LocalEvaluator(load_task(task_file), _settings(tmp_path))
    try:
        ev.probe()
        folder = next((tmp_path / "b" / "reference").iterdir())
        assert ev.reference.inputs_stored and (folder / "inputs.pt").is_file()
        good, bad = ev.evaluate([FIXED_SCALE, FIXED_SCALE.replace("x * 2.0", "x * 2.5")])
    finally:
        ev.close()
    assert good.status is Status.CORRECT, good.error
    assert bad.status is Status.INCORRECT, bad.error


def test_get_inputs_runs_with_the_evaluation_device_as_torch_default(tmp_path):
    # The sets are drawn where they are used: get_inputs() runs under the device as the default
    # device (here torch's meta device stands in for a GPU), and the same seed gives the same set.
    torch = pytest.importorskip("torch")
    from kevin_agent.evaluate.jobs import Job
    from kevin_agent.evaluate.worker.taskcode import import_task, make_inputs

    task_file = write_task(tmp_path / "task")
    job = Job(mode="probe", settings=EvalSettings(device="cpu"), task_path=str(task_file), reply_path="",
              progress_fd=0, control_fd=0)
    module = import_task(job)
    (on_meta,) = make_inputs(module, job, 7, "as-given", on="meta")
    (on_host,) = make_inputs(module, job, 7, "rescaled", on="cpu")
    (again,) = make_inputs(module, job, 7, "rescaled", on="cpu")
    assert on_meta.device.type == "meta" and tuple(on_meta.shape) == (128, 512)
    assert on_host.device.type == "cpu" and torch.equal(on_host, again)


SIGNATURES_TASK = TASK_SOURCE + '''

def get_input_signatures():
    # As a task extracted from a model names them: most frequent first, the first get_inputs()'s.
    return [(24, get_inputs), (8, lambda: [torch.randn(16, 512)]), (2, lambda: [torch.randn(3, 7)]),
            (1, lambda: [torch.randn(1, 5)])]
'''

RIGHT_ONLY_AT_128_ROWS = """
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        return x * 2.0 + (1.0 if x.shape[0] == 128 else 1.5)
"""


def test_a_kernel_is_verified_at_every_input_signature_the_task_names_and_its_speedup_weighted(tmp_path):
    task_file = write_task(tmp_path / "task")
    task_file.write_text(SIGNATURES_TASK)
    ev = LocalEvaluator(load_task(task_file), _settings(tmp_path))
    try:
        ev.probe()
        assert [s.count for s in ev.reference.signatures] == [24, 8, 2, 1]
        assert ev.reference.signatures[1].inputs == ["float32[16, 512]"]
        good, wrong_elsewhere = ev.evaluate([FIXED_SCALE, RIGHT_ONLY_AT_128_ROWS])
    finally:
        ev.close()
    assert good.status is Status.CORRECT, good.error
    assert [s.signature for s in good.signatures] == [0, 1, 2, 3]
    # The three most frequent are timed, the fourth only checked; the weighted speedup is the
    # reference's time over the candidate's, each signature counted as often as the model calls it.
    timed = [s for s in good.signatures if s.speedup is not None]
    assert [s.signature for s in timed] == [0, 1, 2] and good.signatures[3].runtime is None
    expected = (sum(s.count * s.reference.median_ms for s in timed) / sum(s.count * s.runtime.median_ms for s in timed))
    assert good.weighted_speedup == pytest.approx(expected)
    # Right at the headline's 128 rows, wrong at the model's other shapes: not verified.
    assert wrong_elsewhere.status is Status.INCORRECT
    assert "at input signature 1 of 4 (float32[16, 512], 8 calls per forward)" in wrong_elsewhere.error


def test_a_worker_getting_ready_on_a_shared_device_holds_a_timing_back_only_once_it_uses_the_device(tmp_path):
    """cuda's warm workers share the device while they get ready, but their imports (seconds of
    host work) come first: a timing does not wait for them, and they are stopped while it runs. A
    replacement started beside a candidate used to delay that candidate's timing by its imports."""
    from kevin_agent.workers import Limit, WorkerProcess, WorkerSet, scrubbed_env
    from kevin_agent.evaluate.parent.warm import WarmPool

    from .stand_in_worker import StandInJob

    class StandIn(WorkerProcess):
        ENTRY = "tests.evaluate.stand_in_worker"
        JOB = StandInJob

    marks = tmp_path / "marks"
    env = scrubbed_env({"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    gate = DeviceGate(tmp_path / "lock")
    job = {"marks": str(marks), "imports_s": 1.0, "device_s": 1.0}
    pool = WarmPool(lambda: StandIn(job, env=env, root=tmp_path), size=1, gate=gate, give_up=lambda: False,
                    prep_limit=Limit(60, "test"), registry=WorkerSet(), share_device=True)

    def marked() -> set[str]:
        return {line.split()[0] for line in marks.read_text().splitlines()} if marks.exists() else set()
    try:
        pool.open()
        _wait_for(lambda: "started" in marked(), timeout=30)
        with gate.exclusive():  # a timing, while the worker imports
            assert "asks" not in marked()  # it did not wait for the imports
            time.sleep(1.5)
            assert "asks" not in marked()  # and they made no progress while it ran
        _wait_for(lambda: "device" in marked(), timeout=30)
        with gate.exclusive():  # a timing, while the worker uses the device: it waits for the worker
            assert pool.ready_count() == 1
    finally:
        pool.close()


def test_check_builds_its_candidate_while_the_probe_makes_the_reference_data(tmp_path):
    """`kevin-opt check` submits its candidate before it probes: the build (the compile worker
    imports the candidate) goes on while the probe draws the sets, instead of after it."""
    from kevin_agent.cli.commands import probe_and_evaluate

    marks = tmp_path / "marks"
    slow = TASK_SOURCE.replace("def get_inputs():\n", "def get_inputs():\n    import time\n    time.sleep(0.3)\n")
    task = load_task(write_task(tmp_path / "task", slow))
    candidate = (f"import time\nopen({str(marks)!r}, 'a').write(f'imported {{time.time()}}\\n')\n"
                 + runtime_source("honest_python"))
    evaluator = LocalEvaluator(task, _settings(tmp_path))
    try:
        result = probe_and_evaluate(evaluator, task, candidate)
    finally:
        evaluator.close()
    assert result.status is Status.CORRECT, result.error
    assert task.probe is not None
    (meta,) = (tmp_path / "b" / "reference").glob("*/meta.json")  # written last by the probe
    first_import = min(float(line.split()[1]) for line in marks.read_text().splitlines())
    assert first_import < meta.stat().st_mtime
