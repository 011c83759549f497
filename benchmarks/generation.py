#!/usr/bin/env python3
"""What generation costs for Kevin-32B's shape on this machine's GPUs: vLLM configurations of
kevin-opt's own vllm backend, measured side by side in one run.

    python3 benchmarks/generation.py [--configs bf16,kv-fp8,fp8,...] [--out DIR]
        [--trajectories 16] [--response-tokens 2048] [--turn1-tokens 1024] [--turn8-tokens 14000]
        [--deadline-s 540]

The model is QwQ-32B's architecture (Kevin-32B's) with random weights (vLLM's ``dummy`` load
format) and a tokenizer made offline; see ``DIFFERENCES``. Each configuration runs in a process of
its own (so its GPU memory is surely given back) and answers, through ``VLLMBackend.generate``:
a turn 1 (every trajectory the same task prompt) and a turn 8 (every trajectory its own long
prompt of earlier attempts), each response exactly ``--response-tokens`` long (EOS ignored).
Printed per configuration: engine start time, KV cache capacity (blocks x block size, as the
engine allocated it, in sequences of the full context), the GPU memory left for kernel
evaluation, and per turn the wall time, aggregate and per-trajectory tokens/s, time to first
token and preemptions. Full results go to OUT/generation.json, the table to OUT/generation.md,
every engine's log to OUT/generation.log. Configurations that would not finish before
``--deadline-s`` are skipped, and said so.

Configurations (``--configs``, comma-separated, in the order given; default: all that the GPUs
allow except the 2-GPU one): see ``CONFIGS``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pydantic import BaseModel  # noqa: E402

from kevin_agent.backends.capacity import GiB, KvCacheDtype, ModelShape, Quantization  # noqa: E402

#: vLLM's use of its share besides weights and KV cache: the peak activations of its profiling
#: pass (8192 batched tokens), CUDA graphs, the CUDA context and cuBLAS/NCCL workspaces. This
#: benchmark prints the estimate below beside the engine's own count.
RESERVE_BYTES = 3 * GiB


class KvEstimate(BaseModel):
    """What fits in the KV cache, estimated before the engine starts."""

    weight_bytes_per_gpu: int
    kv_bytes_per_gpu: int
    tokens: int
    sequences: int
    """Sequences of ``context_tokens`` that fit at once."""


def estimate_kv(
    shape: ModelShape,
    *,
    gpu_bytes: int,
    gpu_memory_utilization: float,
    context_tokens: int,
    tensor_parallel_size: int = 1,
    quantization: Quantization = "none",
    kv_cache_dtype: KvCacheDtype = "auto",
    reserve_bytes: int = RESERVE_BYTES,
) -> KvEstimate:
    """KV cache tokens and full-context sequences for ``shape`` on ``tensor_parallel_size``
    GPUs of ``gpu_bytes`` each (the KV heads, like the weights, are split over them)."""
    weights = shape.weight_bytes(quantization) // tensor_parallel_size
    kv_bytes = max(0, int(gpu_bytes * gpu_memory_utilization) - weights - reserve_bytes)
    per_token = shape.kv_bytes_per_token(kv_cache_dtype) / tensor_parallel_size
    tokens = int(kv_bytes // per_token)
    return KvEstimate(weight_bytes_per_gpu=weights, kv_bytes_per_gpu=kv_bytes, tokens=tokens,
                      sequences=tokens // context_tokens)


CONTEXT_TOKENS = 32768

#: name -> (what it is, RunConfig fields, environment, GPUs needed). Every configuration uses
#: bf16 activations, 16 sequences at most at once, 8192 batched tokens per step.
CONFIGS: dict[str, tuple[str, dict[str, Any], dict[str, str], int]] = {
    "bf16": ("vLLM's plain bf16 configuration: bf16 weights and KV cache, prefix caching, CUDA graphs, "
             "engine core in its own process", {"kv_cache_dtype": "auto"}, {}, 1),
    "kv-fp8": ("kevin-opt's default: fp8 KV cache, bf16 weights", {"kv_cache_dtype": "fp8"}, {}, 1),
    "fp8": ("fp8 weights and fp8 KV cache (--quantization fp8)", {"kv_cache_dtype": "fp8", "quantization": "fp8"},
            {}, 1),
    "eager": ("bf16, no CUDA graphs or torch.compile, engine core in the caller's process (the first vLLM "
              "run's setting)", {"kv_cache_dtype": "auto", "cuda_graphs": False},
              {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, 1),
    "kv-fp8-ngram": ("the default plus n-gram speculative decoding (--speculative ngram)",
                     {"kv_cache_dtype": "fp8", "speculative": "ngram"}, {}, 1),
    "fp8-ngram": ("fp8 weights and KV cache plus n-gram speculative decoding",
                  {"kv_cache_dtype": "fp8", "quantization": "fp8", "speculative": "ngram"}, {}, 1),
    "kv-fp8-tp2": ("the default over two GPUs (--tensor-parallel-size 2), kernels between turns",
                   {"kv_cache_dtype": "fp8", "tensor_parallel_size": 2}, {}, 2),
}
DEFAULT_CONFIGS = ["bf16", "kv-fp8", "fp8", "fp8-ngram"]
#: Configurations that also answer turn 1 with prefix sharing off (each prompt its own cache salt).
UNSHARED_IN = ("kv-fp8",)

#: Set unless given: no network, no usage reports, and none of the optional kernel libraries
#: that a trimmed vLLM install (scripts/pack-vllm) leaves out.
ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PYTHONUNBUFFERED": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_USE_DEEP_GEMM": "0",
}

DIFFERENCES = [
    "weights are random (vLLM's dummy load format): same shapes, bytes and kernels as Kevin-32B, but the "
    "output is noise, so responses are cut at a fixed length (EOS ignored) instead of ending on their own",
    "the tokenizer is a byte-level BPE trained here on this repository's files and padded with unused "
    "tokens to QwQ's 152,064 ids (Qwen's has 151,665): embedding, output head and sampling cost the same, "
    "but a text has another token count, so prompts are sized in tokens",
    "prompts are rendered by kevin-opt's templates for examples/rmsnorm.py, earlier attempts taken from the "
    "example responses, then cut or extended to the token counts asked for",
    "n-gram speculative decoding cannot show its acceptance rate on noise: its rows measure its overhead",
]


# --- the model --------------------------------------------------------------------------------------


def make_model(folder: Path) -> Path:
    """config.json of QwQ-32B's shape and a tokenizer of its vocabulary size; no weights."""
    import importlib.util

    from transformers import Qwen2Config

    from kevin_agent.backends.capacity import QWQ_32B

    spec = importlib.util.spec_from_file_location("make_tiny_qwen2", REPO / "scripts" / "make_tiny_qwen2.py")
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    corpus = [p.read_text(encoding="utf-8", errors="replace") for p in tiny.default_corpus()]
    tokenizer = tiny.train_tokenizer(8192, corpus)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    _pad_vocabulary(folder / "tokenizer.json", QWQ_32B.vocab_size)
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["chat_template"] = tiny.CHAT_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=QWQ_32B.vocab_size, hidden_size=QWQ_32B.hidden_size,
        intermediate_size=QWQ_32B.intermediate_size, num_hidden_layers=QWQ_32B.layers,
        num_attention_heads=QWQ_32B.attention_heads, num_key_value_heads=QWQ_32B.kv_heads,
        max_position_embeddings=40960, rms_norm_eps=1e-5, rope_theta=1000000.0, tie_word_embeddings=False,
        use_sliding_window=False, max_window_layers=QWQ_32B.layers, eos_token_id=eos,
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None,
    )
    config.architectures = ["Qwen2ForCausalLM"]
    config.torch_dtype = "bfloat16"
    config.save_pretrained(folder)
    return folder


def _pad_vocabulary(path: Path, size: int) -> None:
    """Add never-produced tokens until the tokenizer has ``size`` ids, so every id the random
    model samples decodes (to text made of ASCII, which the byte-level decoder passes through)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in data.get("added_tokens", [])}
    next_id, n = 0, 0
    while len(taken) < size:
        while next_id in taken:
            next_id += 1
        vocab[f"<|unused{n}|>"] = next_id
        taken.add(next_id)
        n += 1
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


# --- the prompts ------------------------------------------------------------------------------------


def make_prompts(model_dir: Path, trajectories: int, turn1_tokens: int, turn8_tokens: int) -> dict[str, list[str]]:
    """Turn 1: the same first-turn prompt for every trajectory. Turn 8: per trajectory, the
    prompt with seven earlier attempts, in an order of its own (so prompts part after the task)."""
    from transformers import AutoTokenizer

    from kevin_agent.engine.parsing import parse_response
    from kevin_agent.engine.prompting import Attempt, feedback_sentence, render_prompt
    from kevin_agent.results import Status
    from kevin_agent.task import load_task

    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    def sized(text: str, target: int, filler: str) -> str:
        # The chat template adds a few tokens around the text.
        target -= 12
        while count(text) < target:
            text += "\n\n" + filler
        ids = tokenizer.encode(text, add_special_tokens=False)[:target]
        return tokenizer.decode(ids)

    task = load_task(REPO / "examples" / "rmsnorm.py", "Model")
    pool = []
    for name in ("rmsnorm", "bias_gelu", "softmax"):
        for line in (REPO / "examples" / f"{name}.cuda.jsonl").read_text().splitlines():
            if line.strip():
                parsed = parse_response(json.loads(line)["text"])
                pool.append((parsed.code, parsed.summary))
    outcomes = [(Status.CORRECT, ""), (Status.COMPILE_ERROR, "error: identifier \"blockDim\" is undefined"),
                (Status.INCORRECT, "max abs difference 0.031 exceeds atol=0.01"), (Status.CORRECT, "")]
    render = dict(task=task, device="cuda", device_name="NVIDIA H200", budget_tokens=10**9, count_tokens=count)
    first = render_prompt(attempts=[], **render).text
    turn1 = [sized(first, turn1_tokens, task.model_source)] * trajectories
    turn8 = []
    for t in range(trajectories):
        attempts = []
        for a in range(7):
            code, summary = pool[(t + 3 * a) % len(pool)]
            status, error = outcomes[(t + a) % len(outcomes)]
            feedback = feedback_sentence(status, error=error, speedup=1.0 + 0.1 * ((t * 7 + a) % 13))
            attempts.append(Attempt(code=code, summary=summary, feedback=feedback))
        text = render_prompt(attempts=attempts, **render).text
        turn8.append(sized(text, turn8_tokens, pool[t % len(pool)][0]))
    return {"turn1": turn1, "turn8": turn8, "turn1_tokens": [count(p) for p in turn1[:1]],
            "turn8_tokens": [count(p) for p in turn8]}


# --- one configuration (in a process of its own) -------------------------------------------------------


def gpu_memory() -> list[dict[str, int]]:
    """Used and free MiB per GPU, from nvidia-smi (no CUDA context in this process)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used,memory.free,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, check=False)
    except OSError:
        return []
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and all(part.isdigit() for part in parts):
            rows.append(dict(zip(("index", "used_mib", "free_mib", "total_mib"), map(int, parts), strict=True)))
    return rows


def run_turn(backend, prompts: list[str], shared: bool) -> dict[str, Any]:
    first: dict[int, float] = {}
    last: dict[int, float] = {}

    def on_token(i: int, channel: str, text: str) -> None:
        now = time.monotonic()
        first.setdefault(i, now)
        last[i] = now

    backend.prefix_sharing = shared
    start = time.monotonic()
    gens = backend.generate(prompts, on_token=on_token)
    wall = time.monotonic() - start
    stats = backend.last_stats
    tokens = [g.completion_tokens or 0 for g in gens]
    per_trajectory = [
        (tokens[i] - 1) / (last[i] - first[i]) for i in range(len(gens))
        if i in first and last[i] > first[i] and tokens[i] > 1
    ]
    ttft = [first[i] - start for i in first]
    # The engine's own per-request decode rates (first token to last); the client's, from the
    # streamed deltas, where the engine reported none.
    rates = [r for r in (t.decode_tokens_per_s for t in stats.requests) if r is not None] or per_trajectory
    return {
        "trajectories": len(prompts),
        "prompt_tokens": statistics.median(g.prompt_tokens or 0 for g in gens),
        "response_tokens": statistics.median(tokens),
        "wall_s": wall,
        "aggregate_tok_s": sum(tokens) / wall,
        "decode_tok_s_sum": sum(rates) if rates else None,
        "per_trajectory_tok_s_median": statistics.median(rates) if rates else None,
        "per_trajectory_tok_s_min": min(rates) if rates else None,
        "client_per_trajectory_tok_s_median": statistics.median(per_trajectory) if per_trajectory else None,
        "ttft_median_s": statistics.median(stats.first_token_s or ttft) if (stats.first_token_s or ttft) else None,
        "ttft_max_s": max(stats.first_token_s or ttft) if (stats.first_token_s or ttft) else None,
        "client_ttft_median_s": statistics.median(ttft) if ttft else None,
        "engine": stats.summary(),
    }


def worker(name: str, model_dir: Path, prompts_path: Path, result_path: Path, trajectories: int,
           response_tokens: int) -> int:
    from kevin_agent.backends.capacity import QWQ_32B
    from kevin_agent.backends.vllm import VLLMBackend
    from kevin_agent.config import RunConfig
    from kevin_agent.gpus import detect_gpus

    _, fields, env, _ = CONFIGS[name]
    os.environ.update(env)
    os.environ["KEVIN_VLLM_ENGINE_ARGS"] = json.dumps({"load_format": "dummy"})
    prompts = json.loads(prompts_path.read_text())
    config = RunConfig(model=str(model_dir), backend="vllm", device="cuda", trajectories=trajectories,
                       max_tokens=response_tokens, context_tokens=CONTEXT_TOKENS, temperature=0.9, **fields)
    gpus = detect_gpus()
    result: dict[str, Any] = {"config": name, "settings": fields, "env": env}
    start = time.monotonic()
    backend = VLLMBackend(config, gpus=gpus, sampling={"ignore_eos": True})
    try:
        result["startup_s"] = time.monotonic() - start
        cap = backend.capacity
        estimate = estimate_kv(QWQ_32B, gpu_bytes=gpus[0].memory_bytes,
                               gpu_memory_utilization=config.gpu_memory_utilization, context_tokens=CONTEXT_TOKENS,
                               tensor_parallel_size=backend.plan.tensor_parallel_size,
                               quantization=config.quantization, kv_cache_dtype=config.kv_cache_dtype)
        memory = gpu_memory()
        eval_gpu = backend.plan.eval_gpu or 0
        result.update(
            kv_blocks=cap.blocks, kv_block_size=cap.block_size, kv_tokens=cap.tokens,
            kv_sequences_at_context=cap.tokens / CONTEXT_TOKENS, kv_tokens_estimated=estimate.tokens,
            eval_gpu=eval_gpu, eval_gpu_free_gib=memory[eval_gpu]["free_mib"] / 1024 if memory else None,
            model_gpus=backend.plan.model_gpus, gpu_memory=memory,
        )
        turns = [("turn1", "turn1", True), ("turn8", "turn8", True)]
        if name in UNSHARED_IN:
            turns.insert(1, ("turn1_unshared", "turn1", False))
        for key, prompt_key, shared in turns:
            result[key] = run_turn(backend, prompts[prompt_key], shared)
            print(f"[{name}] {key}: {json.dumps(result[key])}", flush=True)
    finally:
        backend.close()
    result["total_s"] = time.monotonic() - start
    result_path.write_text(json.dumps(result, indent=2))
    return 0


# --- the whole run ------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("vllm", "torch", "transformers", "triton"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "-"
    return out


def wait_for_free_gpus(limit_s: float = 60.0) -> None:
    """Until every GPU's memory is given back (the engine's processes may outlive the worker
    by a moment)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if all(row["used_mib"] < 2048 for row in gpu_memory()):
            return
        time.sleep(1.0)


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


ROWS: list[tuple[str, Any]] = [
    ("engine start (s)", lambda r: fmt(r.get("startup_s"))),
    ("KV cache: tokens (estimate)", lambda r: f"{r['kv_tokens']:,} ({r['kv_tokens_estimated']:,})"),
    ("KV cache: sequences of 32K", lambda r: fmt(r.get("kv_sequences_at_context"), 2)),
    ("GPU memory left for kernels (GiB)", lambda r: fmt(r.get("eval_gpu_free_gib"))),
]
TURN_ROWS: list[tuple[str, str, int]] = [
    ("prompt / response tokens", "", 0),
    ("wall time of the turn (s)", "wall_s", 1),
    ("aggregate tok/s, whole turn", "aggregate_tok_s", 0),
    ("aggregate tok/s, decoding (sum over trajectories)", "decode_tok_s_sum", 0),
    ("per-trajectory tok/s, median (min)", "", 1),
    ("time to first token, median (max) s", "", 2),
    ("preemptions", "", 0),
    ("prefix cache hit rate", "", 2),
]


def ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


def turn_cell(turn: dict[str, Any] | None, label: str, key: str, digits: int) -> str:
    if turn is None:
        return "-"
    engine = turn["engine"]
    if label.startswith("prompt"):
        return f"{turn['prompt_tokens']:.0f} / {turn['response_tokens']:.0f}"
    if label.startswith("per-trajectory"):
        return f"{fmt(turn['per_trajectory_tok_s_median'], 1)} ({fmt(turn['per_trajectory_tok_s_min'], 1)})"
    if label.startswith("time to first"):
        return f"{fmt(turn['ttft_median_s'], 2)} ({fmt(turn['ttft_max_s'], 2)})"
    if label == "preemptions":
        return str(engine["preemptions"])
    if label.startswith("prefix"):
        return fmt(engine["prefix_cache_hit_rate"], 2)
    return fmt(turn[key], digits)


def table(results: list[dict[str, Any]]) -> str:
    done = [r for r in results if "error" not in r and "skipped" not in r]
    lines = ["| | " + " | ".join(r["config"] for r in done) + " |", "|---" * (len(done) + 1) + "|"]
    for label, cell in ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in done) + " |")
    base = next((r for r in done if r["config"] == "bf16"), None)
    for turn in ("turn1", "turn1_unshared", "turn8"):
        if not any(turn in r for r in done):
            continue
        for label, key, digits in TURN_ROWS:
            lines.append(f"| {turn}: {label} | " + " | ".join(turn_cell(r.get(turn), label, key, digits)
                                                             for r in done) + " |")
        if base is not None and turn in base:
            for label, key in (("whole turn", "aggregate_tok_s"), ("decoding", "decode_tok_s_sum")):
                lines.append(f"| {turn}: {label} tok/s vs bf16 | " + " | ".join(
                    ratio(r.get(turn, {}).get(key), base[turn].get(key)) for r in done) + " |")
        if any(r.get(turn, {}).get("engine", {}).get("spec_draft_tokens") for r in done):
            lines.append(f"| {turn}: speculative acceptance (noise) | " + " | ".join(
                fmt(r[turn]["engine"]["spec_acceptance"], 2) if turn in r else "-" for r in done) + " |")
    for r in results:
        if "error" in r or "skipped" in r:
            lines.append(f"\n{r['config']}: {r.get('error') or r.get('skipped')}")
    return "\n".join(lines)


def try_eager(code: int | str, results: list[dict[str, Any]], names: list[str]) -> bool:
    """After a configuration failed: whether to try the engine in this process without
    torch.compile and CUDA graphs (the setting that ran before), which tells whether those are what
    failed. Only when nothing has run yet, and never after a deadline's kill (that is no failure of
    the engine; the configuration was just too slow for the time left)."""
    ran = any("error" not in r and "skipped" not in r for r in results)
    return code != "timeout" and not ran and "eager" not in names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=None, help=f"comma-separated, from: {', '.join(CONFIGS)}")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or tempfile.gettempdir()))
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--response-tokens", type=int, default=2048)
    parser.add_argument("--turn1-tokens", type=int, default=1024)
    parser.add_argument("--turn8-tokens", type=int, default=14000)
    parser.add_argument("--deadline-s", type=float, default=540.0, help="skip configurations that would end later")
    parser.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "kevin-qwq32b-shape")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--prompts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.model_dir, args.prompts, args.result, args.trajectories,
                      args.response_tokens)

    started = time.monotonic()
    for name, value in ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    from kevin_agent.gpus import detect_gpus

    gpus = detect_gpus()
    names = args.configs.split(",") if args.configs else [n for n in DEFAULT_CONFIGS if CONFIGS[n][3] <= len(gpus)]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "generation.log"
    header = [
        f"GPUs: {', '.join(f'{g.name} ({g.memory_bytes / 2**30:.0f} GiB, {g.capability})' for g in gpus) or 'none'}",
        f"versions: {json.dumps(versions())}; "
        + " ".join(f"{k}={os.environ[k]}" for k in ENVIRONMENT if k.startswith("VLLM_USE")),
        f"model: QwQ-32B's shape (Kevin-32B's), random weights; {args.trajectories} trajectories, context "
        f"{CONTEXT_TOKENS}; prompts of {args.turn1_tokens} tokens (turn 1: the task prompt, the same for all) "
        f"and {args.turn8_tokens} tokens (turn 8: seven earlier attempts, one prompt per trajectory, near the "
        f"prompt budget of {CONTEXT_TOKENS} - 16384 reserved for the response); responses fixed at "
        f"{args.response_tokens} tokens (EOS ignored) so that a configuration takes about two minutes. With "
        "responses this short prefill weighs heavily in the whole-turn rate; Kevin's responses run to "
        "thousands of tokens, where the decoding rate decides",
        "differences from Kevin-32B: " + "; ".join(DIFFERENCES),
    ]
    print("\n".join(header), flush=True)
    model_dir = args.model_dir if (args.model_dir / "config.json").is_file() else make_model(args.model_dir)
    prompts_path = args.out / "prompts.json"
    prompts = make_prompts(model_dir, args.trajectories, args.turn1_tokens, args.turn8_tokens)
    prompts_path.write_text(json.dumps(prompts))
    print(f"model folder {model_dir}; prompt tokens: turn 1 {prompts['turn1_tokens'][0]}, turn 8 "
          f"{min(prompts['turn8_tokens'])}-{max(prompts['turn8_tokens'])}; setup {time.monotonic() - started:.0f} s",
          flush=True)

    results: list[dict[str, Any]] = []
    durations: list[float] = []
    queue = list(names)
    while queue:
        name = queue.pop(0)
        left = args.deadline_s - (time.monotonic() - started)
        if CONFIGS[name][3] > len(gpus):
            results.append({"config": name, "skipped": f"needs {CONFIGS[name][3]} GPUs, {len(gpus)} visible"})
            continue
        # The first configuration also pays torch.compile's cold caches: the longest to expect.
        expected = max(durations) if durations else 150.0
        if left < expected:
            results.append({"config": name, "skipped": f"{left:.0f} s left before the deadline, a configuration "
                                                      f"takes about {expected:.0f} s"})
            print(f"[{name}] skipped: {results[-1]['skipped']}", flush=True)
            continue
        result_path = args.out / f"result-{name}.json"
        result_path.unlink(missing_ok=True)
        print(f"[{name}] {CONFIGS[name][0]}", flush=True)
        t0 = time.monotonic()
        with open(log_path, "a", encoding="utf-8") as log:
            offset = log.tell()
            log.write(f"\n===== {name} =====\n")
            log.flush()
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--model-dir", str(model_dir),
                   "--prompts", str(prompts_path), "--result", str(result_path),
                   "--trajectories", str(args.trajectories), "--response-tokens", str(args.response_tokens)]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=max(30.0, left))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                code = "timeout"
        elapsed = time.monotonic() - t0
        durations.append(elapsed)
        if code == 0 and result_path.is_file():
            result = json.loads(result_path.read_text())
            result_path.unlink()
            results.append(result)
            print(f"[{name}] done in {elapsed:.0f} s: start {result['startup_s']:.0f} s, KV "
                  f"{result['kv_sequences_at_context']:.2f} x 32K, turn 8 {result['turn8']['aggregate_tok_s']:.0f} tok/s, "
                  f"{result['turn8']['engine']['preemptions']} preemptions", flush=True)
        else:
            with open(log_path, encoding="utf-8", errors="replace") as log:
                log.seek(offset)
                tail = log.read().splitlines()[-60:]
            results.append({"config": name, "error": f"exit {code} after {elapsed:.0f} s", "log_tail": tail})
            print(f"[{name}] FAILED (exit {code} after {elapsed:.0f} s); log tail:\n  " + "\n  ".join(tail), flush=True)
            if try_eager(code, results, names):
                names.append("eager")
                queue.insert(0, "eager")
        wait_for_free_gpus()
        (args.out / "generation.json").write_text(json.dumps({"header": header, "results": results}, indent=2))
    text = table(results)
    (args.out / "generation.md").write_text("\n".join(header) + "\n\n" + text + "\n")
    print(f"\ntotal {time.monotonic() - started:.0f} s\n\n{text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
