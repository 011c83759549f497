"""The ranking of a profile and its table, on profiles written out by hand (no worker, no torch)."""

from __future__ import annotations

import pytest

from kevin_agent.model.ranking import amdahl, rank
from kevin_agent.model.records import (
    ArgSpec,
    ModelProfile,
    ModuleProfile,
    SignatureCount,
)
from kevin_agent.model.table import cells, table_lines


def sig(shape, calls=1, out=None) -> SignatureCount:
    arg = ArgSpec(kind="tensor", shape=list(shape), dtype="float32")
    return SignatureCount(key=f"float32[{','.join(map(str, shape))}]", calls=calls, args=[arg],
                          output_bytes=out if out is not None else arg.nbytes)


def module(path, time_ms, *, children=(), library="", library_ms=0.0, shape=(1024, 1024), cls="M"):
    return ModuleProfile(path=path, class_name=cls, calls=1, signatures=[sig(shape)], time_ms=time_ms,
                         self_ms=time_ms, children=list(children), share=0.0, amdahl=None, library=library,
                         library_ms=library_ms)


def profile(*modules, bandwidth=10.0) -> ModelProfile:
    """The modules as a worker measures them: a parent's self time is its time less its children's."""
    times = {m.path: m.time_ms for m in modules}
    for m in modules:
        m.self_ms = max(0.0, m.time_ms - sum(times.get(c, 0.0) for c in m.children))
    return ModelProfile(model_file="m.py", device="cpu", device_name="cpu", forward_ms=100.0,
                        profiled_forward_ms=100.0, forwards=5, bandwidth_gb_s=bandwidth, modules=list(modules))


def test_a_block_does_not_outrank_the_module_that_holds_its_saving():
    # block = norm + GEMM + act: its saving is mostly act's and norm's, so they rank above it
    ranked = rank(profile(
        module("", 100.0, children=["block"]),
        module("block", 90.0, children=["block.norm", "block.fc", "block.act"], library_ms=30.0),
        module("block.norm", 10.0),
        module("block.fc", 30.0, library="gemm", library_ms=30.0),
        module("block.act", 45.0),
    ))
    order = [m.path for m in ranked.ranked]
    assert order[:2] == ["block.act", "block.norm"], order
    fc = ranked.module("block.fc")
    assert fc.rank is None and fc.headroom == 0 and fc.saving == 0
    block = ranked.module("block")
    # its own saving is what its children's kernels leave: its glue ops and the traffic between them
    children = sum(ranked.module(c).saving for c in block.children)
    assert block.own_saving == pytest.approx(max(0.0, block.saving - children))


def test_a_parents_own_saving_is_its_self_time_not_a_difference_of_medians():
    # each time is a median over forwards: a forward interrupted inside act gives the block a time
    # above its children's sum, but its self time, taken forward by forward, stays small
    m = [module("", 100.0, children=["block"]), module("block", 90.0, children=["block.act"]),
         module("block.act", 45.0)]
    noisy = profile(*m)
    noisy.modules[1].self_ms = 1.0
    ranked = rank(noisy)
    block, act = ranked.module("block"), ranked.module("block.act")
    assert act.rank == 1 and block.own_saving < 0.011 and block.own_saving < act.own_saving
    assert ranked.modules[0].path == "" and ranked.modules[0].rank is None and ranked.modules[0].amdahl is None


def test_share_bound_and_headroom_against_the_floor():
    # 8 MiB in, 8 MiB out at 10 GB/s: 1.68 ms at the copy rate, 0.42 ms with the cpu headroom of 4
    ranked = rank(profile(module("", 100.0, children=["a", "b"]), module("a", 40.0, shape=(2048, 1024)),
                          module("b", 0.5, shape=(2048, 1024))))
    a, b = ranked.module("a"), ranked.module("b")
    assert a.share == pytest.approx(0.4) and a.amdahl == pytest.approx(1 / 0.6)
    assert a.floor_ms == pytest.approx(2 * 2048 * 1024 * 4 / (4 * 10e6))
    assert a.headroom == pytest.approx(1 - a.floor_ms / 40.0)
    assert a.saving == pytest.approx(a.share * a.headroom) and a.rank == 1
    # b runs close to its floor: little to save, so it ranks below a although it moves as much
    assert b.headroom < 0.2 and (b.rank is None or b.rank > a.rank)


def test_amdahl_prediction():
    assert amdahl(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl(0.6, 6.0) == pytest.approx(1 / (0.4 + 0.1))


@pytest.mark.parametrize("path", ["layers.11.mlp.act", "encoder.layers.11.attention.output.dense_activation"])
def test_table_fits_80_columns_and_keeps_paths_whole_first(path):
    ranked = rank(profile(module("", 100.0, children=[path, "x"]), module(path, 50.0, cls="AVeryLongActivationClass"),
                          module("x", 10.0, library="gemm", library_ms=10.0, cls="Linear")))
    lines = table_lines(ranked, width=80)
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].split()[:3] == ["#", "module", "class"] and "share" in lines[0] and "saves" in lines[0]
    top = next(line for line in lines if line.startswith("1  "))
    gemm = next(line for line in lines if line.startswith("-"))
    if len(path) < 20:  # a path of usual length stays whole, and so does the note; the class gives way
        assert path in top and "library GEMM" in gemm and "AVeryLo…" in top
    else:  # a long one keeps its end, the part that tells modules apart
        assert "…" in top and path[-8:] in top
    assert cells(ranked.module("x"))[-1] == "library GEMM"


def test_each_module_reaches_a_share_of_its_roofline_from_its_bytes_or_its_flops():
    # a: 16 MiB moved at 10 GB/s, no FLOPs: 1.68 ms of its 4 ms. fc: 2 x 1024^3 FLOPs at 0.05 TFLOP/s
    # (42.9 ms) dwarf its 8 MiB (0.84 ms): of its 50 ms, the FLOPs' share.
    fc = module("fc", 50.0, library="gemm", library_ms=50.0, shape=(1024, 1024)).model_copy(
        update={"flops": 2 * 1024 ** 3})
    ranked = rank(profile(module("", 100.0, children=["a", "fc"]), module("a", 4.0, shape=(2048, 1024)), fc)
                  .model_copy(update={"flop_rate_tflop_s": 0.05, "flop_dtype": "float32"}))
    a, gemm = ranked.module("a"), ranked.module("fc")
    assert a.roofline == pytest.approx(2 * 2048 * 1024 * 4 / 10e6 / 4.0)
    assert gemm.roofline == pytest.approx(2 * 1024 ** 3 / 0.05e9 / 50.0)
    # The column stands next to the headroom, in the table and its cells.
    header = table_lines(ranked, width=120)[0].split()
    assert header[header.index("roofline") + 1] == "headroom"
    assert cells(a)[7] == f"{100 * a.roofline:.1f}%" and cells(ranked.modules[0])[7] == ""


def test_a_module_that_moves_no_bytes_has_no_roofline_share_and_none_is_shown_above_100():
    # drop: Dropout in eval (returns its input) timed at 2 us: counted by its bytes it would read
    # 4 MB / 10 GB/s = 0.84 ms, 42000% of its time. norm: faster than its DRAM floor (data in cache).
    drop = module("drop", 0.002, cls="Dropout").model_copy(
        update={"signatures": [sig((1024, 1024)).model_copy(update={"aliased": True})]})
    ranked = rank(profile(module("", 100.0, children=["drop", "norm"]), drop, module("norm", 0.5)))
    d, n = ranked.module("drop"), ranked.module("norm")
    assert d.moves_nothing and d.roofline is None and d.floor_ms == 0.0
    assert cells(d)[7] == "—" and cells(d)[-1] == "moves no bytes (returns its input or a view)"
    assert n.roofline > 1.0 and cells(n)[7] == "100% cache"  # 8 MiB at 10 GB/s is 0.84 ms > 0.5 ms
    group = next(g for g in ranked.groups if g.name == "drop")
    assert group.moves_nothing and cells(group)[7] == "—"


def test_the_profile_sees_which_calls_return_their_input_unwritten():
    """A real model's forward under the profile's hooks: Dropout in eval and a view move nothing;
    an in-place ReLU (same storage, written) and a copy do."""
    import torch

    from kevin_agent.formatting import fmt_fraction
    from kevin_agent.model.worker.loading import LoadedModel
    from kevin_agent.model.worker.profiling import record_calls

    class View(torch.nn.Module):
        def forward(self, x):
            return x.view(-1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.drop = torch.nn.Dropout(0.1)
            self.act = torch.nn.ReLU(inplace=True)
            self.flat = View()

        def forward(self, x):
            return self.flat(self.act(self.drop(self.lin(x))))

    model = Net().eval()
    names = [name for name, _ in model.named_modules()]
    recorded = record_calls(LoadedModel(module=None, model=model, inputs=[torch.randn(4, 8)], path="m.py",
                                        device="cpu"))
    aliased = {names[i]: [s.aliased for s in sigs.values()] for i, sigs in recorded.signatures.items()}
    assert aliased == {"": [False], "lin": [False], "drop": [True], "act": [False], "flat": [True]}
    assert fmt_fraction(2.75) == "100% (in cache)" and fmt_fraction(0.93) == "93%"
