#!/usr/bin/env python3
"""Build a tiny random-weight Qwen2 model with its own tokenizer, entirely offline.

Kevin-32B is a Qwen2ForCausalLM (QwQ-32B base); this makes a model of the same architecture
family small enough (well under 5 MB) to exercise the vllm and openai backends end to end on a
machine that cannot download weights. Its output is noise: it tests the plumbing, not the model.

    python scripts/make_tiny_qwen2.py OUT_DIR [--vocab 1000] [--context 32768]

Needs ``transformers``, ``tokenizers`` and ``torch`` (CPU is enough).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# ChatML as Qwen2 uses it; like QwQ's, the generation prompt opens the thinking block.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n' }}{% endif %}"
)

# Prompt-like prose; the code the tokenizer learns from is the repository's own (default_corpus).
CORPUS = '''
You write custom CUDA kernels to replace the pytorch operators in the given architecture to get
speedups. You have complete freedom to choose the set of operators you want to replace. Consider
shared memory, kernel fusion, warp primitives and vectorization. Restart your reasoning process
and generate new, complete code. The kernel compiled and was correct with a speedup of 1.5x.
Your kernel failed to compile. Your kernel produced an incorrect result. Summarize your changes.
'''


def default_corpus() -> list[Path]:
    repo = Path(__file__).resolve().parents[1]
    patterns = ["kevin_agent/**/*.py", "prompts/**/*.j2", "prompts/**/*.py", "examples/*.py"]
    return sorted({p for pattern in patterns for p in repo.glob(pattern) if p.is_file()})


def train_tokenizer(vocab_size: int, extra_text: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([CORPUS, *extra_text], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=32768,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(vocab_size: int, context: int, eos_id: int, pad_id: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head size 64: supported by every vLLM attention backend
        num_key_value_heads=1,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="folder to write the model and tokenizer into")
    parser.add_argument("--vocab", type=int, default=1000, help="tokenizer vocabulary size")
    parser.add_argument("--context", type=int, default=32768, help="max_position_embeddings")
    parser.add_argument("--corpus", type=Path, nargs="*", default=None,
                        help="text files to train the tokenizer on (default: this repository's "
                             "Python sources, prompts and examples)")
    args = parser.parse_args(argv)

    files = args.corpus if args.corpus is not None else default_corpus()
    extra = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    tokenizer = train_tokenizer(args.vocab, extra)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    model = build_model(len(tokenizer), args.context, eos_id, pad_id)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    # Newer transformers write the template to chat_template.jinja only; older ones (as a vLLM
    # install may pin) read it from tokenizer_config.json, so it goes in both.
    config_path = args.out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text(encoding="utf-8"))
    tokenizer_config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    size = sum(f.stat().st_size for f in args.out.iterdir() if f.is_file())
    print(f"wrote {args.out}: vocab {len(tokenizer)}, {model.num_parameters()} parameters, "
          f"{size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
