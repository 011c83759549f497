#!/usr/bin/env python3
"""Where a whole model's forward spends its time: the transformers LLaMA of
benchmarks/optimize_hf_llama.py in eager without and with the hand-written kernels (the decoder layer at
every layer, the norm at the final norm; labelled hand-written, no model runs), and under torch.compile
without them, timed as ``kevin-opt e2e`` times them (``whole_model._rounds``: interleaved rounds, each
call queued behind the timer's lead), then one forward of each under the profiler: the device's busy
time, the forward's span, the idle time between them, the longest gaps with the kernels on either side,
and the busy time by kind (GEMMs, attention, the kernels' own, Inductor's, the rest).

The rotary tables' kernel is also left out in turn (``eager + kernels but rotary``): its share of the
device's time is small, but transformers makes the tables at the forward's start, right after its
mask code has waited for the device (it reads the mask on the host), where the host's time is the
device's idle time. ``--host-only`` prints the host's time per call of each step of that start.

Usage (repository root):
  python benchmarks/model_gaps.py [--device cuda|cpu] [--rounds 30] [--no-compile] [--json PATH]
On the GPU the size is optimize_hf_llama's (hidden 4096, sequence 2048, bf16, 4 layers); on the CPU
hidden 256, sequence 128, float32, 2 layers. ``LLAMA_HF_*`` in the environment override either.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "benchmarks" / "tasks"
sys.path.insert(0, str(REPO))


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# attention first: cuDNN's flash kernel's name holds "sm90_" too
KINDS = (("attention", ("flash", "fmha", "sdpa", "efficient_attention")),
         ("gemm", ("gemm", "nvjet", "cutlass", "sm90_", "sm80_", "cublas")),
         ("Inductor's", ("triton_",)),
         ("the kernels' own", ("add_rms_norm", "rotary_qk", "rotary_tables", "elementwise<", "row_norm",
                               "rms_norm")))


def kind(name: str) -> str:
    low = name.lower()
    for label, marks in KINDS:
        if any(m.lower() in low for m in marks):
            return label
    return "other"


def timeline(trace: dict, step: str) -> dict:
    """The device kernels launched inside the CPU range ``step`` of a Chrome trace: busy (their
    intervals' union), span (first start to last end), idle, the longest gaps, busy by kind."""
    events = trace.get("traceEvents", [])
    ranges = [e for e in events if e.get("name") == step and e.get("ph") == "X"]
    if not ranges:
        return {}
    begin, end = ranges[-1]["ts"], ranges[-1]["ts"] + ranges[-1]["dur"]
    # cuBLAS and Triton launch through the driver API, the rest through the runtime's
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and begin <= e.get("ts", -1) <= end and "correlation" in e.get("args", {})}
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                      and e.get("args", {}).get("correlation") in launched), key=lambda e: e["ts"])
    if not kernels:
        return {"kernels": 0, "cpu_ms": (end - begin) / 1e3}
    busy, gaps, by_kind = 0.0, [], {}
    reach = kernels[0]["ts"]
    previous = None
    for k in kernels:
        start, stop = k["ts"], k["ts"] + k["dur"]
        if start > reach and previous is not None:
            gaps.append({"at_ms": round((reach - kernels[0]["ts"]) / 1e3, 3), "us": round(start - reach, 1),
                         "after": previous["name"][:70], "before": k["name"][:70]})
        busy += max(0.0, stop - max(start, reach))
        reach = max(reach, stop)
        previous = k
        by_kind[kind(k["name"])] = by_kind.get(kind(k["name"]), 0.0) + k["dur"] / 1e3
    span = reach - kernels[0]["ts"]
    syncs = [e for e in events if e.get("cat") == "cuda_runtime" and begin <= e.get("ts", -1) <= end
             and "Synchronize" in e.get("name", "")]
    return {"kernels": len(kernels), "busy_ms": round(busy / 1e3, 4), "span_ms": round(span / 1e3, 4),
            "idle_ms": round((span - busy) / 1e3, 4), "cpu_ms": round((end - begin) / 1e3, 4),
            "host_syncs": [(s["name"], round(s["dur"], 1)) for s in syncs],
            "gaps": sorted(gaps, key=lambda g: -g["us"])[:6],
            "by_kind_ms": {k: round(v, 4) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])}}


def profiled(fn, device: str, folder: Path, name: str) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.no_grad():
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        with profile(activities=activities) as prof:
            for i in range(3):
                with record_function(f"step{i}"):
                    fn()
                if device == "cuda":
                    torch.cuda.synchronize()
    path = folder / f"{name}.json"
    prof.export_chrome_trace(str(path))
    return timeline(json.loads(path.read_text()), "step2")


def host_costs(model, guards: list, seen: dict, inputs: dict, timer, calls: int = 15) -> dict:
    """What the host spends on each step of the forward's start, per call: where the forward waits
    for the device (transformers' mask code reads the mask on the host), everything the host does
    from there to the first layer's first GEMM is time the device sits idle."""
    import torch
    import torch.nn.functional as F
    from transformers.masking_utils import create_causal_mask

    from kevin_agent.model.worker.guard import bound_arguments

    cuda = timer.device == "cuda"
    layer, guard, rotary = model.layers[0], guards[0], guards[-1]
    args, kwargs = seen["args"], seen["kwargs"]
    values = bound_arguments(guard.original, args, kwargs)
    hidden = args[0]
    position_ids = kwargs.get("position_ids")
    flat = hidden.view(-1, hidden.shape[-1])
    weight = layer.self_attn.q_proj.weight
    heads = layer.self_attn.config.num_attention_heads
    q = torch.randn(1, heads, hidden.shape[1], weight.shape[0] // heads, device=hidden.device, dtype=hidden.dtype)

    def on(flag: bool):
        def set_():
            guard.enabled = rotary.enabled = flag
        return set_

    steps = {
        "rotary_emb, eager": (on(False), lambda: model.rotary_emb(hidden, position_ids=position_ids)),
        "rotary_emb with its kernel": (on(True), lambda: model.rotary_emb(hidden, position_ids=position_ids)),
        "layer with its kernel (the guard, the kernel's forward, its launches)": (on(True), lambda: layer(*args, **kwargs)),
        "the layer's guard called directly": (on(True), lambda: guard(*args, **kwargs)),
        "the guard's checks alone": (on(True), lambda: guard.admitted(guard.bind(args, kwargs))),
        "the kernel's forward alone": (on(True), lambda: guard.kernel.forward(*values)),
        "layer, eager": (on(False), lambda: layer(*args, **kwargs)),
        "F.linear, one projection": (None, lambda: F.linear(flat, weight)),
        "sdpa, causal": (None, lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)),
        "final norm with its kernel": (None, lambda: model.norm(hidden)),
    }
    out = {}
    with torch.no_grad():
        for name, (before, fn) in steps.items():
            if before:
                before()
            fn()
            timer.sync()
            if cuda:
                timer.spin_for(max(50.0, calls * 3.0))
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1e6)
            timer.sync()
            out[name] = statistics.median(times)
        guard.enabled = True
        # the mask code reads the device's answer: timed with the device idle, its wait included
        embeds = model.embed_tokens(inputs["input_ids"])
        # transformers 5.24 names the cache ``cache``; earlier 5.x ``past_key_values`` and ``cache_position``
        params = inspect.signature(create_causal_mask).parameters
        mask_kwargs = {k: v for k, v in (("cache", None), ("past_key_values", None), (
            "cache_position", torch.arange(embeds.shape[1], device=embeds.device))) if k in params}
        times = []
        for _ in range(calls):
            timer.sync()
            start = time.perf_counter()
            create_causal_mask(config=model.config, inputs_embeds=embeds, attention_mask=inputs.get("attention_mask"),
                               position_ids=position_ids, **mask_kwargs)
            times.append((time.perf_counter() - start) * 1e6)
        out["create_causal_mask (its wait on the idle device included)"] = statistics.median(times)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--host-only", action="store_true", help="the host's costs alone, no timed forwards")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--traces", type=Path, default=None, help="keep the Chrome traces here")
    args = parser.parse_args()
    gpu = args.device == "cuda"
    size = {"LLAMA_HF_HIDDEN": "4096" if gpu else "256", "LLAMA_HF_SEQ": "2048" if gpu else "128",
            "LLAMA_HF_DTYPE": "bfloat16" if gpu else "float32", "LLAMA_HF_LAYERS": "4" if gpu else "2"}
    size = {k: os.environ.get(k, v) for k, v in size.items()}
    os.environ.update(size)

    import torch

    from kevin_agent.evaluate.worker import Timer
    from kevin_agent.model.worker.guard import KernelSource, bound_arguments, call_signature, install_kernel
    from kevin_agent.model.worker.whole_model import _rounds

    bench = _load("optimize_hf_llama", REPO / "benchmarks" / "optimize_hf_llama.py")
    task = _load("hf_llama", TASKS / "hf_llama.py")
    torch.manual_seed(0)
    model = task.get_model().to(args.device)
    inputs = {k: v.to(args.device) if isinstance(v, torch.Tensor) else v for k, v in task.get_inputs().items()}
    flavour = "cuda" if gpu else "cpu"
    folder = args.traces or Path(tempfile.mkdtemp(prefix="kevin-model-gaps-"))
    folder.mkdir(parents=True, exist_ok=True)

    # each layer's call as the model makes it, for the exact signature its guard admits
    seen, rotary_seen = {}, {}
    hooks = [model.layers[0].register_forward_pre_hook(lambda m, a, k: seen.update(args=a, kwargs=k), with_kwargs=True),
             model.rotary_emb.register_forward_pre_hook(lambda m, a, k: rotary_seen.update(args=a, kwargs=k),
                                                        with_kwargs=True)]
    with torch.no_grad():
        want = model(**inputs).last_hidden_state.clone()
    for hook in hooks:
        hook.remove()
    layer_signature = call_signature(bound_arguments(model.layers[0].forward, seen["args"], seen["kwargs"]))
    rotary_signature = call_signature(bound_arguments(model.rotary_emb.forward, rotary_seen["args"],
                                                      rotary_seen["kwargs"]))
    norm_signature = call_signature([want])
    sources = {stem: KernelSource(stem, bench._sized((TASKS / f"{stem}_{flavour}.py").read_text(), size))
               for stem in ("llama_decoder_layer", "llama_block_norm", "llama_rotary")}
    started = time.monotonic()
    guards = [install_kernel(model, f"layers.{i}", sources["llama_decoder_layer"], [], signatures=[layer_signature],
                             device=flavour, training=False) for i in range(len(model.layers))]
    guards.append(install_kernel(model, "norm", sources["llama_block_norm"], [int(size["LLAMA_HF_HIDDEN"])],
                                 signatures=[norm_signature], device=flavour, training=False))
    guards.append(install_kernel(model, "rotary_emb", sources["llama_rotary"], [], signatures=[rotary_signature],
                                 device=flavour, training=False))

    def switch(on: bool, rotary: bool | None = None):
        for g in guards:
            g.enabled = on
        guards[-1].enabled = on if rotary is None else rotary

    with torch.no_grad():
        got = model(**inputs).last_hidden_state
    built_s = time.monotonic() - started
    calls = sum(g.kernel_calls for g in guards)
    print(f"size {size} on {args.device}; kernels built/loaded in {built_s:.1f} s; kernel calls in one forward "
          f"{calls} (of {len(guards)}); largest difference from eager {(got - want).abs().max().item():.4g}")
    if calls != len(guards):
        print("the kernels did not run at every member: " + "; ".join(g.source.error for g in guards if g.source.error))
        return 1

    def variant(on: bool, call_inputs: dict, model_=None, rotary: bool | None = None):
        target = model if model_ is None else model_

        def fn():
            switch(on, rotary)
            try:
                return target(**call_inputs)
            finally:
                switch(True)
        return fn

    if args.host_only:
        host = host_costs(model, guards, seen, inputs, Timer(args.device))
        print("host time per call (us, median; the GPU kept busy): " + "; ".join(f"{k} {v:.1f}" for k, v in host.items()))
        return 0
    names = ["eager", "eager + kernels", "eager + kernels but rotary"]
    fns = [variant(False, inputs), variant(True, inputs), variant(True, inputs, rotary=False)]
    compile_s = None
    if not args.no_compile:
        started = time.monotonic()
        compiled = torch.compile(model)
        fns.append(variant(False, inputs, compiled))
        names.append("compiled")
        with torch.no_grad():
            fns[-1]()
        compile_s = time.monotonic() - started
    # one layer alone on the arguments the model gave it: the kernel, and the layer compiled (as a task times them)
    layer = model.layers[0]

    def one_layer(on: bool, target=None):
        def fn():
            switch(on)
            try:
                return (target or layer)(*seen["args"], **seen["kwargs"])
            finally:
                switch(True)
        return fn

    names += ["one layer", "one layer + kernel"]
    fns += [one_layer(False), one_layer(True)]
    if not args.no_compile:
        compiled_layer = torch.compile(layer.forward.original)
        names.append("one layer, compiled")
        fns.append(one_layer(False, compiled_layer))
        with torch.no_grad():
            fns[-1]()
    timer = Timer(args.device)
    times = _rounds(timer, fns, warmup=3, rounds=args.rounds)
    medians = {n: statistics.median(t) for n, t in zip(names, times)}
    profiles = {n: profiled(fn, args.device, folder, n.replace(" ", "_").replace(",", "").replace("+", "with"))
                for n, fn in zip(names, fns)}
    base = medians.get("compiled", medians["eager"])
    print(f"\n{'forward (ms)':<26} {'timed':>8} {'vs ' + ('compiled' if 'compiled' in medians else 'eager'):>12}"
          f" {'busy':>8} {'span':>8} {'idle':>8} {'kernels':>8}")
    for n in names:
        p = profiles[n]
        cells = [f"{p[k]:8.3f}" if k in p else f"{'-':>8}" for k in ("busy_ms", "span_ms", "idle_ms")]
        print(f"{n:<26} {medians[n]:8.3f} {base / medians[n]:11.3f}x {' '.join(cells)} {p.get('kernels', 0):>8}")
    for n in names:
        p = profiles[n]
        if not p.get("kernels"):
            continue
        print(f"\n{n}: busy by kind " + ", ".join(f"{k} {v:.3f}" for k, v in p["by_kind_ms"].items())
              + f"; host waits {p['host_syncs'] or 'none'}")
        for g in p["gaps"][:4]:
            print(f"  gap {g['us']:7.1f} us at {g['at_ms']:.3f} ms: after {g['after']} / before {g['before']}")
    if compile_s is not None:
        print(f"\ntorch.compile's first call: {compile_s:.1f} s")
    host = host_costs(model, guards, seen, inputs, timer)
    print("\nhost time per call (us, median; the GPU kept busy, so launches do not wait): "
          + "; ".join(f"{k} {v:.1f}" for k, v in host.items()))
    result = {"device": torch.cuda.get_device_name() if gpu else "cpu", "size": size, "rounds": args.rounds,
              "median_ms": medians, "profiles": profiles, "compile_s": compile_s, "host_us": host}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
