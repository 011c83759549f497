"""Fixed run records for the TUI tests (no clock, no random ids, so screens render the same
every time), and ways to look at a running app: a widget's text, the whole screen as text."""

from __future__ import annotations

import io
import time
from pathlib import Path

from rich.console import Console

from kevin_agent.events import (Candidate, ConfirmationFinished, ConfirmationStarted, RunFinished, RunStarted,
                                 TurnFinished, TurnStarted)
from kevin_agent.results import (
    BestKernel,
    CheckResult,
    Confirmation,
    Confirmed,
    EvalResult,
    RunInfo,
    Stage,
    Status,
    TaskRef,
    TimingStats,
    TurnRecord,
    Violation,
)
from kevin_agent.store import RunStore

KERNEL_V1 = '''import torch
from torch.utils.cpp_extension import load_inline

cpp = """
torch::Tensor affine(torch::Tensor x) {
    auto y = torch::empty_like(x);
    auto px = x.data_ptr<float>(); auto py = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] * 2.0f + 1.0f;
    return y;
}
"""
mod = load_inline("affine_v1", cpp_sources=cpp, functions=["affine"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return mod.affine(x)
'''

KERNEL_V2 = KERNEL_V1.replace(
    "for (int64_t i = 0; i < x.numel(); ++i)", "#pragma omp simd\n    for (int64_t i = 0; i < n; ++i)"
).replace("auto y = torch::empty_like(x);", "auto y = torch::empty_like(x);\n    const int64_t n = x.numel();")


def timing(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, std_ms=ms / 50, min_ms=ms * 0.95, max_ms=ms * 1.1,
                       p10_ms=ms * 0.97, p90_ms=ms * 1.05, runs=20)


def correct_eval(kernel_ms: float, eager_ms: float = 0.250) -> EvalResult:
    return EvalResult(
        status=Status.CORRECT, stage=Stage.DONE, correct=True, compile_s=31.5, trials=5, trials_passed=5,
        max_abs_err=2.4e-7, max_rel_err=1.1e-7, atol=1e-5, rtol=1e-5, runtime=timing(kernel_ms),
        reference=timing(eager_ms), speedup=round(eager_ms / kernel_ms, 3), device="cpu",
        device_name="Test CPU",
    )


def fixed_records() -> list[TurnRecord]:
    """Two trajectories of three turns with every kind of outcome the screens draw."""
    compile_log = "\n".join(
        ["[1/2] c++ -MMD -MF main.o.d -O3 -c main.cpp -o main.o",
         "main.cpp:7:55: error: 'n' was not declared in this scope",
         "    7 |     for (int64_t i = 0; i < n; ++i) py[i] = px[i] * 2.0f + 1.0f;",
         "      |                                                       ^",
         "ninja: build stopped: subcommand failed."]
    )
    common = dict(prompt="Replace the operators of Model with custom kernels...", reasoning="Fuse the multiply and add.")
    return [
        TurnRecord(trajectory=0, turn=1, status=Status.PARSE_ERROR, response="I would write a kernel.",
                   feedback="Your answer failed to parse: no code block found.",
                   parse_error="no ```python code block in the answer", **common),
        TurnRecord(trajectory=1, turn=1, status=Status.CHECK_FAILED, code=KERNEL_V1.replace(
                   "return mod.affine(x)", "return x * 2 + 1"), summary="Used torch ops.",
                   feedback="Your kernel failed the checks: [torch-compute] ModelNew.forward calls torch ops.",
                   check=CheckResult(passed=False, violations=[Violation(
                       rule="torch-compute", message="ModelNew.forward computes with torch operators", line=17)]),
                   response="```python\n...\n```", **common),
        TurnRecord(trajectory=0, turn=2, status=Status.CORRECT, code=KERNEL_V1, summary="A plain loop in C++.",
                   feedback="Your kernel was correct with a speedup of 1.25x.", response="```python\n...\n```",
                   eval=correct_eval(0.200), prompt_tokens=812, completion_tokens=640, **common),
        TurnRecord(trajectory=1, turn=2, status=Status.COMPILE_ERROR, code=KERNEL_V2.replace(
                   "const int64_t n = x.numel();", ""), summary="Vectorised the loop.",
                   feedback="Your kernel failed to compile: 'n' was not declared in this scope.",
                   eval=EvalResult(status=Status.COMPILE_ERROR, stage=Stage.COMPILE, compile_log=compile_log,
                                   error="'n' was not declared in this scope", compile_s=12.0),
                   response="```python\n...\n```", **common),
        TurnRecord(trajectory=0, turn=3, status=Status.CORRECT, code=KERNEL_V2, summary="Vectorised the loop.",
                   feedback="Your kernel was correct with a speedup of 2.00x.", response="```python\n...\n```",
                   eval=correct_eval(0.125), prompt_tokens=1460, completion_tokens=702, **common),
        TurnRecord(trajectory=1, turn=3, status=Status.INCORRECT, code=KERNEL_V1.replace("2.0f", "3.0f"),
                   summary="Changed the constant.", response="```python\n...\n```",
                   feedback="Your kernel was incorrect: max abs error 1.0e+00 over tolerance.",
                   eval=EvalResult(status=Status.INCORRECT, stage=Stage.CORRECTNESS, trials=5, trials_passed=0,
                                   max_abs_err=1.0, max_rel_err=0.5, atol=1e-5, rtol=1e-5,
                                   error="max abs error 1.0e+00 over tolerance", compile_s=30.2),
                   **common),
    ]


def fixed_info(run_id: str, *, status: str, created_at: str, turns: int = 3, best: BestKernel | None = None,
               name: str = "affine") -> RunInfo:
    return RunInfo(
        run_id=run_id, created_at=created_at, status=status,
        task=TaskRef(path=f"/project/{name}.py", name=name, class_name="Model", digest="0123456789abcdef"),
        device="cpu", device_name="Test CPU", backend="scripted", model="scripted (hand-written responses)",
        turns=turns, trajectories=2, best=best,
    )


def beam_run(root: Path, run_id: str, parents: dict[tuple[int, int], int]) -> None:
    """A finished run of the fixed records (best: t0 turn 3) in which turn (t, n) continued
    trajectory ``parents[(t, n)]``'s turn n - 1."""
    records = {(r.trajectory, r.turn): r for r in fixed_records()}
    for key, parent in parents.items():
        records[key] = records[key].model_copy(update={"parent_trajectory": parent})
    best = BestKernel(trajectory=0, turn=3, speedup=2.0, kernel_path="kernels/t0_turn3.py")
    store = RunStore.create(root, fixed_info(run_id, status="completed", created_at="2025-01-01T12:00:00+00:00",
                                             best=best))
    for rec in records.values():
        store.append(rec)


def confirmation_of_fixed_run() -> Confirmation:
    """The confirmation of the fixed records' two verified kernels: trajectory 0's turn 3 (2.00x in
    its turn) confirmed at 2.70x, its turn 2 (1.25x) dropped on the second look."""
    return Confirmation(seed=1_000_000, device_name="Test CPU", key="fixed", kernels=[
        Confirmed(trajectory=0, turn=3, kernel_path="kernels/t0_turn3.py", run_speedup=2.0, verified=True,
                  speedup_median=2.7, ci95=[2.6, 2.8], runs=100, trials=5, trials_passed=5),
        Confirmed(trajectory=0, turn=2, kernel_path="kernels/t0_turn2.py", run_speedup=1.25, verified=False,
                  error="trial 2 of 5 (seed 1000001): max abs error 3.1e-01 over tolerance"),
    ])


def confirmed_run(root: Path, run_id: str = "20250103-120000-affine-0003") -> Path:
    """A finished run of the fixed records whose best kernels were confirmed."""
    confirmation = confirmation_of_fixed_run()
    store = RunStore.create(root, fixed_info(run_id, status="completed", created_at="2025-01-03T12:00:00+00:00",
                                             best=BestKernel.confirmed(confirmation.kernels[0])))
    store.update_info(confirmation=confirmation)
    for rec in fixed_records():
        store.append(rec)
    return store.dir


def build_store(root: Path) -> Path:
    """A runs root with one finished run (all fixed records) and one interrupted run."""
    records = fixed_records()
    best = BestKernel(trajectory=0, turn=3, speedup=2.0, kernel_path="kernels/t0_turn3.py")
    done = RunStore.create(root, fixed_info("20250101-120000-affine-0001", status="completed",
                                            created_at="2025-01-01T12:00:00+00:00", best=best))
    for rec in records:
        done.append(rec)
    cut = RunStore.create(root, fixed_info("20250102-090000-affine-0002", status="interrupted",
                                           created_at="2025-01-02T09:00:00+00:00", turns=4))
    for rec in records[:2]:
        cut.append(rec)
    return root


def run_events(records: list[TurnRecord] | None = None) -> list:
    """The events a finished run of the fixed records emits, tokens left out."""
    records = records if records is not None else fixed_records()
    events: list = [RunStarted(run_id="20250101-120000-affine-0001", run_dir="/nonexistent", task="affine",
                               device="cpu", device_name="Test CPU", backend="scripted",
                               model="scripted (hand-written responses)", turns=3, trajectories=2)]
    best: BestKernel | None = None
    for rec in records:
        events.append(TurnStarted(trajectory=rec.trajectory, turn=rec.turn))
        if rec.speedup is not None and (best is None or rec.speedup > best.speedup):
            best = BestKernel(trajectory=rec.trajectory, turn=rec.turn, speedup=rec.speedup,
                              kernel_path=f"/runs/kernels/t{rec.trajectory}_turn{rec.turn}.py")
        events.append(TurnFinished(record=rec, best=best))
    events.append(RunFinished(run_id="20250101-120000-affine-0001", reason="completed", best=best,
                              turns_done=len(records)))
    return events


def confirmed_run_events() -> list:
    """The fixed run's events, ending as a run does whose best kernels were confirmed
    (``confirmation_of_fixed_run``)."""
    events = run_events()
    confirmation = confirmation_of_fixed_run()
    best = BestKernel.confirmed(confirmation.kernels[0], Path("/runs"))
    finished = events[-1].model_copy(update={"best": best})
    return [*events[:-1],
            ConfirmationStarted(kernels=[Candidate(trajectory=0, turn=3, speedup=2.0),
                                         Candidate(trajectory=0, turn=2, speedup=1.25)]),
            ConfirmationFinished(confirmation=confirmation, best=best), finished]


def better_module_plan(root: Path):
    """The delivery plan of a run (1.83x, --no-commit) in a repository where an earlier run left
    its module and report, not tracked by git, and the module claims a better kernel (2.70x)."""
    from kevin_agent.config import RunConfig
    from kevin_agent.delivery import plan_delivery

    from .conftest import git_init
    from .run_records import correct, run_info, sample_records, write_task

    repo = git_init(root)
    task = write_task(repo / "layers")
    claim = ('# kevin-opt-kernel: {"speedup": 2.7, "device": "cpu", "device_name": "Test CPU 9000", '
             '"run_id": "20241231-090000-my-relu-0001", "trajectory": 0, "turn": 5}\n')
    (repo / "layers" / "my_relu_kevin.py").write_text(claim + "class ModelNew: ...\n")
    for suffix in ("md", "json", "png"):
        (repo / "layers" / f"my_relu_kevin_report.{suffix}").write_text("an earlier run's report\n")
    records = sample_records()[:4] + [correct(0, 3, 1.83, vs_compile=1.21)]
    return plan_delivery(task, run_info(task), records, RunConfig(commit=False))


# --- looking at a running app -----------------------------------------------------------------
async def wait_for(pilot, condition, timeout: float = 600, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.2)


def text_of(app, selector: str) -> str:
    """The plain text a widget of the current screen renders."""
    return str(app.screen.query_one(selector).render())


def screen_lines(app) -> list[str]:
    """The screen as a person sees it, one string per terminal row (what a snapshot draws)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True,
                      legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


def offered_keys(app) -> set[str]:
    """Keys the footer offers on the current screen."""
    return {key for key, active in app.screen.active_bindings.items() if active.binding.show and active.enabled}


OPTIMIZE_ID = "opt-20250104-100000-layer-stack-0001"
BENCH_ID = "bench-20250105-000000-tasks-abcd"
GROUP_RUN = "20250102-090000-affine-0002"
"""build_store's second run, made by the optimize of ``every_kind`` (which kept its kernel)."""
DAMAGED_RUN = "20250106-000000-affine-0009"


def every_kind(root: Path) -> tuple[Path, Path]:
    """A runs root holding every kind of record (build_store's two runs, the second one made by an
    optimize that committed its kernel; the optimize; a run whose run.json is damaged) and a
    benches root beside it with one bench: ``(runs root, benches root)``."""
    import json

    from kevin_agent.bench.store import BenchStore
    from kevin_agent.results.bench import BenchInfo, BenchTask, TaskResult
    from kevin_agent.results.optimize import GroupRun, OptimizeRecord
    from kevin_agent.store import OptimizeStore

    runs = build_store(root / "runs")
    group = RunStore.open(runs, GROUP_RUN)
    group.update_info(delivery="written, not committed (--no-commit)")  # what a group's run records
    record = OptimizeRecord(
        optimize_id=OPTIMIZE_ID, model_file=str(root / "layer_stack.py"), created_at="2025-01-04T10:00:00+00:00",
        status="delivered", device="cpu", device_name="Test CPU", modules=4, min_saving=0.02, measured=1.31,
        predicted=1.4, commit="3d405aa17a5c0ffee", groups=[
            GroupRun(name="layers.*.act x3", members=["layers.0.act"], class_name="QuickGELU", share=0.38,
                     own_saving=0.3, state="kept", run_id=GROUP_RUN, speedup=2.0, turns=4, turn=2),
            GroupRun(name="head", members=["head"], class_name="Head", share=0.08, own_saving=0.05,
                     state="dropped", why="slower in the whole model")])
    OptimizeStore.create(runs, record).release()
    damaged = RunStore.create(runs, fixed_info(DAMAGED_RUN, status="completed", created_at="2025-01-06T00:00:00+00:00"))
    damaged.release()
    data = json.loads((damaged.dir / "run.json").read_text())
    del data["task"]  # hand-edited, or written by a broken tool
    (damaged.dir / "run.json").write_text(json.dumps(data))
    benches = root / "benches"
    task = BenchTask(task_id="tasks/softmax", path=str(root / "tasks" / "softmax.py"))
    info = BenchInfo(bench_id=BENCH_ID, created_at="2025-01-05T00:00:00+00:00", paths=["tasks"], tasks=[task],
                     device="cpu", backend="scripted", model="scripted", trajectories=1, turns=1)
    bench = BenchStore.create(benches, info)
    bench.record(TaskResult(task_id=task.task_id, path=task.path, status="failed", error="no Model"))
    bench.update_info(status="completed")
    bench.release()
    return runs, benches
