#!/usr/bin/env python3
"""Checks the hand-written LlamaDecoderLayer answers (benchmarks/tasks/llama_decoder_layer_{cuda,cpu}.py)
as the evaluation meets them: the static rules on both files, then the answer for the device against a
real transformers layer. A small LlamaModel runs one forward as people call it (input_ids, an attention
mask, use_cache=False); its second layer's call is recorded (the arguments as transformers passed them
and the output), the answer is loaded with the model's sizes written over its constants, as
benchmarks/optimize_hf_llama.py writes them, given the layer's weights by name (strict), and called
with the recorded arguments bound in the layer's signature's order, defaults filled, as the evaluation
calls it. Cases: float32 and bf16; all heads for k/v and grouped (one kv head); one sequence with the
mask of ones (which transformers hands the layer as None: causal) and two, one right-padded (a real mask).

Usage (repository root):
  python benchmarks/decoder_layer_check.py [--device cpu|cuda] [--bench]
``--bench`` (cuda) also times the layer at the benchmark's size (hidden 4096, sequence 2048, bf16),
eager against the answer.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import re
import sys
import tempfile
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaModel

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kevin_agent.model.worker.guard import bound_arguments  # noqa: E402

TASKS = REPO / "benchmarks" / "tasks"


def answer_path(device: str) -> Path:
    return TASKS / f"llama_decoder_layer_{'cuda' if device == 'cuda' else 'cpu'}.py"


def sized(code: str, config: LlamaConfig, dtype: torch.dtype) -> str:
    """The answer with the model's sizes over its constants, one line each (``HIDDEN = 4096``)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    values = {"HIDDEN": config.hidden_size, "INTERMEDIATE": config.intermediate_size,
              "HEADS": config.num_attention_heads, "KV_HEADS": config.num_key_value_heads, "HEAD_DIM": head_dim,
              "EPS": repr(config.rms_norm_eps), "DTYPE": str(dtype)}
    for name, value in values.items():
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", code, count=1, flags=re.M)
        if n != 1:
            raise SystemExit(f"{name}: no `{name} = ...` line in the answer")
    return code


def load_answer(code: str, folder: Path, name: str):
    path = folder / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_layer(model: LlamaModel, inputs: dict, index: int = 1):
    """One decoder layer's call in a real forward: its args, kwargs and output."""
    layer, seen = model.layers[index], {}
    pre = layer.register_forward_pre_hook(lambda m, a, k: seen.update(args=a, kwargs=k), with_kwargs=True)
    post = layer.register_forward_hook(lambda m, a, out: seen.update(out=out))
    with torch.no_grad():
        model(**inputs)
    pre.remove()
    post.remove()
    out = seen["out"][0] if isinstance(seen["out"], tuple) else seen["out"]
    return layer, seen["args"], seen["kwargs"], out


def config_for(hidden: int, heads: int, kv_heads: int, seq: int) -> LlamaConfig:
    return LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 43 // 16, num_hidden_layers=2,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=1000,
                       max_position_embeddings=max(seq, 2048), rms_norm_eps=1e-6)


def check_case(device: str, dtype: torch.dtype, kv_heads: int, padded: bool, folder: Path) -> bool:
    torch.manual_seed(0)
    seq = 64
    config = config_for(256, 2, kv_heads, seq)
    model = LlamaModel(config).to(device=device, dtype=dtype).eval()
    # The padded case is a batch of two, the second sequence padded: the rotary tables then hold one row
    # a position, shared by the batch.
    ids = torch.randint(0, config.vocab_size, (2 if padded else 1, seq), device=device)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, seq - 9:] = 0
    layer, args, kwargs, want = record_layer(model, {"input_ids": ids, "attention_mask": mask, "use_cache": False})
    values = bound_arguments(layer.forward, args, kwargs)
    name = f"decoder_layer_{device}_{str(dtype).split('.')[-1]}_kv{kv_heads}{'_padded' if padded else ''}"
    answer = load_answer(sized(answer_path(device).read_text(), config, dtype), folder, name)
    new = answer.ModelNew().to(device)
    new.load_state_dict(layer.state_dict(), strict=True)
    with torch.no_grad():
        got = new(*values)
    diff = (got.float() - want.float()).abs()
    mask_seen = "None (causal)" if values[1] is None else f"{values[1].dtype} {tuple(values[1].shape)}"
    differ = int((got != want).sum())
    print(f"  {str(dtype):15} kv_heads {kv_heads}  mask {mask_seen:28} max |diff| {diff.max().item():.3e}  "
          f"(max |out| {want.float().abs().max().item():.2f})  differing {differ}/{want.numel()}  "
          f"equal {torch.equal(got, want)}")
    return got.shape == want.shape and diff.max().item() <= (1e-4 if dtype == torch.float32 else 5e-2)


def bench(folder: Path) -> None:
    """The layer at the benchmark's size on the GPU: eager against the answer, and how close they are."""
    torch.manual_seed(0)
    seq, dtype = 2048, torch.bfloat16
    config = config_for(4096, 32, 32, seq)
    config.num_hidden_layers = 1
    model = LlamaModel(config).to(device="cuda", dtype=dtype).eval()
    ids = torch.randint(0, config.vocab_size, (1, seq), device="cuda")
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False}
    layer, args, kwargs, want = record_layer(model, inputs, index=0)
    values = bound_arguments(layer.forward, args, kwargs)
    answer = load_answer(sized(answer_path("cuda").read_text(), config, dtype), folder, "decoder_layer_bench")
    new = answer.ModelNew().to("cuda")
    new.load_state_dict(layer.state_dict(), strict=True)

    def timed(fn, reps=50) -> float:
        with torch.no_grad():
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
        return start.elapsed_time(end) / reps

    with torch.no_grad():
        got = new(*values)
    eager = timed(lambda: layer(*args, **kwargs))
    mine = timed(lambda: new(*values))
    print(f"\nbench: hidden 4096, sequence 2048, bf16, one layer on {torch.cuda.get_device_name()}")
    print(f"  eager {eager:.3f} ms   answer {mine:.3f} ms   speedup {eager / mine:.3f}x")
    print(f"  max |diff| {(got.float() - want.float()).abs().max().item():.3e}  differing "
          f"{int((got != want).sum())}/{want.numel()}  equal {torch.equal(got, want)}")


def static_checks() -> bool:
    """The rules a candidate meets before it runs, on both answers, each for its own device."""
    from kevin_agent.checks.rules import run_checks

    ok = True
    print("static checks")
    for device in ("cuda", "cpu"):
        result = run_checks(answer_path(device).read_text(), device)
        ok &= result.passed
        print(f"  {answer_path(device).name}: {'passed' if result.passed else 'FAILED'}")
        for v in result.violations:
            print(f"    line {v.line}: [{v.rule}] {v.message}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--bench", action="store_true", help="cuda: time the layer at the benchmark's size")
    parser.add_argument("--skip-static", action="store_true",
                        help="no static checks (they need the tool's dependencies, pydantic among them, which a "
                             "bare GPU machine may lack; they read only the files, so run them anywhere)")
    args = parser.parse_args()
    ok = True
    if not args.skip_static:
        ok &= static_checks()
    print(f"\n{answer_path(args.device).name} against transformers' LlamaDecoderLayer on {args.device} "
          f"(hidden 256, 2 heads of 128, MLP 688, sequence 64; transformers' second layer)")
    print(f"  the layer's forward: {inspect.signature(LlamaModel(config_for(256, 2, 2, 64)).layers[0].forward)}")
    with tempfile.TemporaryDirectory(prefix="kevin-decoder-layer-") as tmp:
        for dtype in (torch.float32, torch.bfloat16):
            for kv_heads in (2, 1):
                for padded in (False, True):
                    ok &= check_case(args.device, dtype, kv_heads, padded, Path(tmp))
        if args.bench and args.device == "cuda":
            bench(Path(tmp))
    print("\nall passed" if ok else "\nFAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
