"""A recorded optimize replayed through ``protocols.OptimizeProgress``: the model screen's states
without compiles. ``ReplaySession`` has ``OptimizeSession``'s face (record, store root, config,
consent, run, abort); its first group's run emits the fixed run's events live, its second group
points at a run of the store (``tui_support.build_store``)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from kevin_agent.errors import ExitCode
from kevin_agent.results.optimize import GroupRun, OptimizeRecord

from ..tui_support import build_store, run_events

STORED_RUN = "20250102-090000-affine-0002"
"""build_store's interrupted run (2 of 4 turns): the second group's."""


def recorded(model_file: Path) -> OptimizeRecord:
    return OptimizeRecord(
        optimize_id="opt-20250103-100000-layer-stack-0001", model_file=str(model_file),
        created_at="2025-01-03T10:00:00+00:00", device="cpu", device_name="Test CPU", modules=4, min_saving=0.02,
        forward_ms=1.84, plan=["worth a kernel (3 groups, each could save at least 2.0% of the forward):"],
        groups=[GroupRun(name="layers.*.act x3", members=["layers.0.act", "layers.1.act", "layers.2.act"],
                         class_name="QuickGELU", share=0.384, own_saving=0.297, turns=3),
                GroupRun(name="layers.*.norm x3", members=["layers.0.norm", "layers.1.norm", "layers.2.norm"],
                         class_name="RowNorm", share=0.301, own_saving=0.214, turns=4),
                GroupRun(name="head", members=["head"], class_name="Head", share=0.08, own_saving=0.05, turns=3)])


class ReplaySession:
    def __init__(self, root: Path, *, hold: bool = False, commit: bool = True) -> None:
        """``hold``: stop after the second group's run began, until aborted (or 60 s)."""
        self.root = build_store(root / "runs")
        (root / "layer_stack.py").write_text("# the model\n")
        self.store = SimpleNamespace(root=self.root, save=lambda: None)
        self.config = SimpleNamespace(commit=commit)
        self.replace = self.accept_flagged = False
        self.consent = None
        self.record = recorded(root / "layer_stack.py")
        self.hold = hold
        self.asked: list[list[Path]] = []
        self._aborted = threading.Event()

    def abort(self) -> None:
        self._aborted.set()

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

    def _end(self, status: str, code: int, why: str = "") -> OptimizeRecord:
        self.record.status, self.record.exit_code, self.record.why = status, int(code), why
        return self.record

    def run(self, progress) -> OptimizeRecord:
        r = self.record
        act, norm, head = r.groups
        progress.note("profiling layer_stack.py on cpu (a worker: warm-up, then the profiler)")
        progress.planned(r)
        head.state, head.why = "skipped", "cannot be captured as a task: its forward takes a dict"
        progress.group_changed(r, head)
        act.state, act.run_id = "running", "20250101-120000-affine-0001"
        progress.group_changed(r, act)
        sink = progress.run_events(r, act)
        for event in run_events():
            sink.emit(event)
        act.state, act.speedup, act.turn = "verified", 2.0, 3
        act.signatures = ["float32[64,512]"]
        progress.group_changed(r, act)
        norm.state, norm.run_id, norm.turn = "running", STORED_RUN, 2
        progress.group_changed(r, norm)
        if self.hold:
            self._aborted.wait(60)
            return self._end("interrupted", ExitCode.INTERRUPTED, "interrupted")
        norm.state, norm.speedup, norm.turn = "verified", 1.5, 4
        progress.group_changed(r, norm)
        progress.note("running the whole model layer_stack.py without and with the 2 kernels, in fresh workers")
        act.state, act.contribution = "kept", 1.31
        norm.state, norm.why, norm.contribution = "dropped", "the whole model is slower with it (0.97x)", 0.97
        r.measured, r.predicted = 1.31, 1.43
        progress.combined(r)
        paths = [Path(r.model_file), Path(r.model_file).with_name("layer_stack_layers_act_kevin.py")]
        if self.consent is not None and not self.consent(r, paths):
            r.notes.append("declined: nothing written, nothing committed")
            return self._end("nothing", ExitCode.NONE, "declined: nothing written")
        self.asked.append(paths)
        r.commit = "3d405aa17a0000000000000000000000000000"
        r.notes += ["wrote layer_stack.py, layer_stack_layers_act_kevin.py",
                    "committed 3d405aa17a00 on main: layer_stack.py, layer_stack_layers_act_kevin.py"]
        return self._end("delivered", ExitCode.OK)
