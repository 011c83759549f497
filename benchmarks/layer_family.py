#!/usr/bin/env python3
"""The shapes a whole-decoder-layer kernel is admitted at: ``kevin-opt extract`` of a transformers
LlamaDecoderLayer (benchmarks/tasks/hf_llama.py, one layer), then the family check of the hand-written
answer (benchmarks/tasks/llama_decoder_layer_{cuda,cpu}.py; labelled hand-written, no model runs)
against the extracted task at other batch sizes and sequence lengths, as ``optimize`` runs it before
it delivers the kernel. Prints the verified signature, each family tried and what it passed.

Usage (repository root): python benchmarks/layer_family.py [--device cuda|cpu] [--json PATH]
On the GPU the size is hidden 4096, sequence 2048, bf16; on the CPU hidden 256, sequence 96, float32
(not 128, the head size: a sequence length the size of a head reads as one dimension in a signature).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "benchmarks" / "tasks"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    gpu = args.device == "cuda"
    size = {"LLAMA_HF_HIDDEN": "4096" if gpu else "256", "LLAMA_HF_SEQ": "2048" if gpu else "96",
            "LLAMA_HF_DTYPE": "bfloat16" if gpu else "float32", "LLAMA_HF_LAYERS": "1"}
    size = {k: os.environ.get(k, v) for k, v in size.items()}
    os.environ.update(size)
    spec = importlib.util.spec_from_file_location("optimize_hf_llama", REPO / "benchmarks" / "optimize_hf_llama.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from kevin_agent.config import EvalSettings
    from kevin_agent.model.family import check_family
    from kevin_agent.model.marks import extracted_from

    started = time.monotonic()
    repo = Path(tempfile.mkdtemp(prefix="kevin-layer-family-"))
    shutil.copy(TASKS / "hf_llama.py", repo / "hf_llama.py")
    proc = subprocess.run([sys.executable, "-m", "kevin_agent.cli", "extract", "hf_llama.py", "--module", "layers.0",
                           "--device", args.device, "-o", "task.py"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "CI": "true"})
    print(proc.stdout.strip()[-1500:])
    if proc.returncode != 0:
        print(proc.stderr.strip()[-3000:])
        return 1
    extracted = time.monotonic() - started
    task = repo / "task.py"
    signature = extracted_from(task.read_text()).signatures[0].key
    code = bench._sized((TASKS / f"llama_decoder_layer_{'cuda' if gpu else 'cpu'}.py").read_text(), size)
    check = check_family(str(task), "Model", code, [signature], EvalSettings(device=args.device))
    result = {"device": args.device, "size": size, "signature": signature, "admitted": check.admitted,
              "passed": check.passed, "failed": check.failed, "unvaried": check.unvaried,
              "extract_s": round(extracted, 1), "family_s": round(time.monotonic() - started - extracted, 1)}
    print(f"verified at   {signature}")
    for key, shapes in check.passed.items():
        print(f"admitted      {key}\n  tried at    " + "\n              ".join(shapes))
    for key, why in {**check.failed, **check.unvaried}.items():
        print(f"at its shape alone: {key}: {why}")
    print(f"extract {result['extract_s']} s, family check (build and trials) {result['family_s']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if check.passed else 1


if __name__ == "__main__":
    sys.exit(main())
