"""The vLLM options: engine arguments from the settings, the KV-cache capacity arithmetic for
Kevin-32B's shape, where the model and the kernels go on the GPUs, and the refusals."""

from __future__ import annotations

import json
import sys
from types import ModuleType, SimpleNamespace

import pytest

from kevin_agent.backends.capacity import (
    GiB,
    QWQ_32B,
    ModelShape,
    default_trajectories,
    model_shape,
    room_flags,
    trajectories_note,
)
from kevin_agent.backends.vllm import MAX_BATCHED_TOKENS, NGRAM, engine_fields
from kevin_agent.backends.vllm_stats import EngineStatsSink, KvCapacity
from kevin_agent.config import RunConfig
from kevin_agent.errors import BackendError, ConfigError
from kevin_agent.gpus import (
    Gpu,
    check_engine_options,
    eval_worker_env,
    parse_nvidia_smi,
    plan_gpus,
    visible,
)

from ..clihelp import REPO, kevin

# nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap --format=csv,noheader,nounits
H200_X2 = ("0, GPU-5f1c0a2e-0000-4a5b-9c1d-000000000000, NVIDIA H200, 143771, 9.0\n"
           "1, GPU-77aa19b3-1111-4c2d-8e3f-111111111111, NVIDIA H200, 143771, 9.0\n")
A100 = "0, GPU-0a0a0a0a-2222-4e4e-9f9f-222222222222, NVIDIA A100-SXM4-80GB, 81920, 8.0\n"
H200_BYTES = 143771 << 20


def h200s(n: int) -> list[Gpu]:
    return parse_nvidia_smi(H200_X2)[:n]


# --- engine arguments -----------------------------------------------------------------------------


def test_engine_fields_defaults():
    config = RunConfig()
    fields = engine_fields(config, plan_gpus(config, h200s(1)))
    assert fields["kv_cache_dtype"] == "fp8"
    assert fields["quantization"] is None
    assert fields["enable_prefix_caching"] is True
    assert fields["enforce_eager"] is False, "CUDA graphs and torch.compile stay on, as vLLM runs by default"
    assert fields["max_num_seqs"] == 16, "room for the paper's 16 trajectories before the count is settled"
    assert fields["max_num_batched_tokens"] == MAX_BATCHED_TOKENS
    assert fields["tensor_parallel_size"] == 1 and fields["max_model_len"] == 32768
    assert fields["gpu_memory_utilization"] == 0.80 and fields["dtype"] == "bfloat16"
    assert fields["disable_log_stats"] is False, "preemptions and prefix-cache hits come from the stats"
    assert "speculative_config" not in fields


def test_engine_fields_follow_every_option():
    config = RunConfig(kv_cache_dtype="auto", quantization="fp8", prefix_caching=False, cuda_graphs=False,
                       speculative="ngram", trajectories=6, context_tokens=16384, gpu_memory_utilization=0.9)
    fields = engine_fields(config, plan_gpus(config, h200s(1)))
    assert (fields["kv_cache_dtype"], fields["quantization"]) == ("auto", "fp8")
    assert fields["enable_prefix_caching"] is False and fields["enforce_eager"] is True
    assert fields["speculative_config"] == NGRAM
    assert fields["speculative_config"] is not NGRAM, "vLLM may change the dict it is given"
    assert NGRAM["method"] == "ngram" and NGRAM["prompt_lookup_min"] <= NGRAM["prompt_lookup_max"]
    assert (fields["max_num_seqs"], fields["max_model_len"], fields["gpu_memory_utilization"]) == (6, 16384, 0.9)


def test_engine_fields_take_the_tensor_parallel_size_of_the_plan():
    config = RunConfig(tensor_parallel_size=2)
    assert engine_fields(config, plan_gpus(config, h200s(2)))["tensor_parallel_size"] == 2


# --- capacity ----------------------------------------------------------------------------------------


def test_qwq_32b_sizes_by_hand():
    # Per layer: q and o 5120x5120 each, k and v 5120x1024 each, MLP 3 x 5120x27648.
    per_layer = 2 * 5120 * 5120 + 2 * 5120 * 1024 + 3 * 5120 * 27648
    assert per_layer == 487_587_840
    assert QWQ_32B.linear_params == 64 * per_layer == 31_205_621_760
    # Embedding and output head (untied), q/k/v biases (40+8+8 heads x 128), two norms per layer, final norm.
    other = 2 * 152064 * 5120 + 64 * ((40 + 16) * 128 + 2 * 5120) + 5120
    assert QWQ_32B.other_params == other == 1_558_254_592
    assert QWQ_32B.params == 32_763_876_352
    assert QWQ_32B.weight_bytes("none") == 2 * 32_763_876_352  # 61.0 GiB
    assert round(QWQ_32B.weight_bytes("none") / GiB, 1) == 61.0
    assert QWQ_32B.weight_bytes("fp8") == 31_205_621_760 + 2 * 1_558_254_592  # 32.0 GiB
    assert QWQ_32B.kv_bytes_per_token("auto") == 64 * 2 * 8 * 128 * 2 == 256 * 1024
    assert QWQ_32B.kv_bytes_per_token("fp8") == 128 * 1024


def test_model_shape_from_a_config_folder_and_by_name(tmp_path):
    config = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256,
              "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 1000, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = model_shape(str(tmp_path))
    assert shape == ModelShape(layers=2, hidden_size=128, intermediate_size=256, attention_heads=2, kv_heads=1,
                               head_dim=64, vocab_size=1000, tie_word_embeddings=True)
    assert shape.kv_bytes_per_token() == 2 * 2 * 1 * 64 * 2
    assert model_shape("cognition-ai/Kevin-32B") == QWQ_32B
    assert model_shape(str(tmp_path / "no-such-model")) is None


def test_engine_capacity_in_sequences():
    capacity = KvCapacity(blocks=12_000, block_size=16, context_tokens=32768)
    assert capacity.tokens == 192_000 and capacity.sequences == 5


@pytest.mark.parametrize(("fit", "trajectories"), [(None, 1), (0, 1), (6, 6), (16, 16), (19, 16)])
def test_default_trajectories_fit_without_preemption_up_to_the_papers_16(fit, trajectories):
    assert default_trajectories(fit) == trajectories


def test_first_line_compares_with_the_papers_16_x_8():
    note = trajectories_note(16, 8, sequences_that_fit=19, context_tokens=32768, chosen=True)
    assert note == "as in the paper; the KV cache holds 19 sequences of 32768 tokens"
    note = trajectories_note(6, 8, sequences_that_fit=6, context_tokens=32768, chosen=True,
                             room=room_flags("auto", "none"))
    assert note == ("the paper: 16 x 8; the KV cache holds 6 sequences of 32768 tokens: --kv-cache-dtype fp8 or "
                    "--quantization fp8 makes room for more, --trajectories 16 runs the paper's setting with "
                    "preemption")
    note = trajectories_note(12, 8, sequences_that_fit=12, context_tokens=32768, chosen=True,
                             room=room_flags("fp8", "none"))
    assert ": --quantization fp8 makes room for more" in note and "--kv-cache-dtype" not in note
    assert room_flags("fp8", "fp8") == []
    note = trajectories_note(16, 8, sequences_that_fit=6, context_tokens=32768, chosen=False)
    assert note == "as in the paper; the KV cache holds 6 sequences of 32768 tokens, so vLLM may preempt and recompute some"
    assert trajectories_note(1, 8, sequences_that_fit=None, context_tokens=32768, chosen=True) == (
        "the paper: 16 x 8; --trajectories 16 for its setting")
    assert trajectories_note(2, 3, sequences_that_fit=None, context_tokens=32768, chosen=False) == "the paper: 16 x 8"


def test_the_first_line_says_when_16_trajectories_need_fp8_weights():
    from kevin_agent.backends.capacity import QWQ_32B, sequences_with_fp8_weights

    # On one H200 with the fp8 KV cache, bf16 weights leave room for 12 sequences of 32K (run 6);
    # fp8 weights free 31 GB more, about 7 sequences of 4.3 GB.
    fp8 = sequences_with_fp8_weights(QWQ_32B, 12, context_tokens=32768, kv_cache_dtype="fp8")
    assert fp8 == 19
    note = trajectories_note(12, 8, sequences_that_fit=12, context_tokens=32768, chosen=True,
                             room=room_flags("fp8", "none"), with_fp8_weights=fp8)
    assert note == ("the paper: 16 x 8; the KV cache holds 12 sequences of 32768 tokens: 16 trajectories at 32K "
                    "need --quantization fp8 on this GPU (about 19 fit with fp8 weights)")
    # Where fp8 weights would not reach 16, or the number was given, the note is as before.
    assert "need --quantization fp8" not in trajectories_note(6, 8, sequences_that_fit=6, context_tokens=32768,
                                                              chosen=True, with_fp8_weights=13)
    assert "need --quantization fp8" not in trajectories_note(12, 8, sequences_that_fit=12, context_tokens=32768,
                                                              chosen=False, with_fp8_weights=19)


def test_the_first_line_names_the_weights_and_kv_cache_the_engine_serves_with():
    from types import SimpleNamespace

    from kevin_agent.config import RunConfig
    from kevin_agent.run.launch import _settle_trajectories

    # kevin-opt's defaults on one H200: bf16 weights, fp8 KV cache, --tensor-parallel-size left to
    # kevin-opt (None in the config; it once reached the arithmetic as None and the launch failed).
    # The engine measured 12.21 sequences of 32K, fp8 weights 19.21 (runs 22-23).
    config, note = _settle_trajectories(RunConfig(backend="vllm"), SimpleNamespace(sequences_that_fit=12))
    assert config.trajectories == 12
    assert note == ("bf16 weights, fp8 KV cache; the paper: 16 x 8; the KV cache holds 12 sequences of 32768 tokens: "
                    "16 trajectories at 32K need --quantization fp8 on this GPU (about 19 fit with fp8 weights)")
    config, note = _settle_trajectories(RunConfig(backend="vllm", quantization="fp8"),
                                        SimpleNamespace(sequences_that_fit=19))
    assert config.trajectories == 16 and note.startswith("fp8 weights, fp8 KV cache; ")
    assert "need --quantization" not in note
    # Over two GPUs each frees half and holds half of every sequence: the same number.
    _, note = _settle_trajectories(RunConfig(backend="vllm", tensor_parallel_size=2),
                                   SimpleNamespace(sequences_that_fit=12))
    assert note.endswith("(about 19 fit with fp8 weights)")


def test_scripted_run_first_line_says_how_it_compares(tmp_path):
    proc = kevin("run", REPO / "examples" / "rmsnorm.py", "--device", "cpu", "--backend", "scripted",
                 "--responses", REPO / "examples" / "rmsnorm.cpu.jsonl", "--turns", "1", "--headless",
                 "--no-commit", "--run-dir", tmp_path / "runs", "--out", tmp_path / "k.py")
    first = proc.stderr.splitlines()[0]
    assert first.endswith("1 x 1 turn (the paper: 16 x 8; --trajectories 16 for its setting)"), proc.stderr


# --- GPUs -------------------------------------------------------------------------------------------


def test_parse_nvidia_smi_and_visible_devices():
    gpus = parse_nvidia_smi(H200_X2 + "garbage line\n")
    assert [(g.index, g.name, g.capability) for g in gpus] == [(0, "NVIDIA H200", (9, 0)), (1, "NVIDIA H200", (9, 0))]
    assert gpus[0].memory_bytes == H200_BYTES
    flipped = visible(gpus, "1,0")
    assert [(g.index, g.physical_index) for g in flipped] == [(0, 1), (1, 0)]
    assert [g.physical_index for g in visible(gpus, "GPU-77aa")] == [1]
    assert [g.physical_index for g in visible(gpus, "0,7,1")] == [0], "CUDA stops at the first unknown entry"
    assert visible(gpus, "") == [] and visible(gpus, None) == gpus


def test_one_gpu_times_kernels_between_turns():
    config = RunConfig(device="cuda")
    plan = plan_gpus(config, h200s(1))
    assert (plan.model_gpus, plan.eval_gpu, plan.overlaps) == ([0], 0, False)
    assert plan_gpus(config, h200s(1)).overlaps is False


def test_two_gpus_split_model_and_kernels_by_default():
    config = RunConfig(device="cuda")
    plan = plan_gpus(config, h200s(2))
    assert (plan.model_gpus, plan.eval_gpu, plan.overlaps) == ([0], 1, True)
    assert plan_gpus(config, h200s(2)).overlaps is True
    assert eval_worker_env(plan, visible(h200s(2), "1,0")) == {"CUDA_VISIBLE_DEVICES": "0"}
    other = plan_gpus(config, h200s(2), two_gpu_layout="tensor-parallel")
    assert (other.model_gpus, other.eval_gpu, other.overlaps) == ([0, 1], 0, False)
    # The run's first line says which layout it took, and why.
    assert plan.why == ("the model on GPU 0, the kernels on GPU 1: kernels are timed while the model generates "
                        "(the split layout, kevin-opt's default for 2 GPUs; --tensor-parallel-size and --eval-gpu "
                        "choose another)")
    assert other.why.startswith("the model on GPUs 0, 1, the kernels on GPU 0 too, timed between generations")
    assert "default" not in plan_gpus(RunConfig(device="cuda", eval_gpu=1), h200s(2)).why


def test_explicit_layouts():
    both = plan_gpus(RunConfig(device="cuda", tensor_parallel_size=2), h200s(2))
    assert (both.model_gpus, both.eval_gpu, both.overlaps) == ([0, 1], 0, False)
    named = plan_gpus(RunConfig(device="cuda", tensor_parallel_size=2, eval_gpu=1), h200s(2))
    assert (named.eval_gpu, named.overlaps) == (1, False)
    on_cpu = plan_gpus(RunConfig(device="cpu"), h200s(1))
    assert (on_cpu.eval_gpu, on_cpu.overlaps) == (None, True)
    assert eval_worker_env(on_cpu, h200s(1)) == {"CUDA_VISIBLE_DEVICES": ""}


def test_models_served_elsewhere_overlap_only_where_told():
    served = plan_gpus(RunConfig(device="cuda", backend="openai"), h200s(1))
    assert (served.model_gpus, served.eval_gpu, served.overlaps) == ([], 0, False)
    told = plan_gpus(RunConfig(device="cuda", backend="openai", eval_gpu=1), h200s(2))
    assert (told.eval_gpu, told.overlaps) == (1, True)
    assert plan_gpus(RunConfig(device="cuda", backend="scripted"), h200s(1)).overlaps is True


@pytest.mark.parametrize(("settings", "gpus", "needles"), [
    ({"eval_gpu": 1}, 1, ["--eval-gpu 1", "this process sees 1 GPU (0-0)"]),
    ({"eval_gpu": 2}, 2, ["--eval-gpu 2", "2 GPUs (0-1)"]),
    ({"eval_gpu": 0}, 0, ["--eval-gpu 0", "sees no GPU"]),
    ({"tensor_parallel_size": 4}, 2, ["--tensor-parallel-size 4", "sees 2 GPUs"]),
    ({"eval_gpu": 0, "device": "cpu"}, 1, ["--eval-gpu 0 needs --device cuda"]),
])
def test_impossible_placements_are_refused(settings, gpus, needles):
    with pytest.raises(ConfigError) as info:
        plan_gpus(RunConfig(**{"device": "cuda", **settings}), h200s(gpus))
    for needle in needles:
        assert needle in info.value.message
    assert info.value.hint and info.value.exit_code == 2


def test_fp8_weights_need_fp8_tensor_cores():
    config = RunConfig(device="cuda", quantization="fp8")
    a100 = parse_nvidia_smi(A100)
    with pytest.raises(ConfigError) as info:
        check_engine_options(config, a100, plan_gpus(config, a100))
    assert "--quantization fp8 needs a GPU with fp8 tensor cores" in info.value.message
    assert "NVIDIA A100-SXM4-80GB (8.0)" in info.value.message
    check_engine_options(config, h200s(1), plan_gpus(config, h200s(1)))
    fp8_kv = RunConfig(device="cuda", kv_cache_dtype="fp8")
    check_engine_options(fp8_kv, a100, plan_gpus(fp8_kv, a100))  # vLLM stores fp8 KV on Ampere too


@pytest.mark.parametrize(("args", "needles"), [
    (["--kv-cache-dtype", "fp16"], ["invalid choice", "fp16"]),
    (["--quantization", "int4"], ["invalid choice", "int4"]),
    (["--speculative", "eagle"], ["invalid choice", "eagle"]),
    (["--eval-gpu", "-1"], ["eval_gpu", "greater than or equal to 0"]),
])
def test_bad_option_values_exit_2(args, needles):
    proc = kevin("run", REPO / "examples" / "rmsnorm.py", *args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr


def test_eval_gpu_beyond_the_gpus_exits_2_before_anything_starts(tmp_path):
    proc = kevin("run", REPO / "examples" / "rmsnorm.py", "--device", "cuda", "--backend", "scripted",
                 "--responses", REPO / "examples" / "rmsnorm.cuda.jsonl", "--turns", "2", "--eval-gpu", "5", "--headless",
                 "--run-dir", tmp_path / "runs", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr
    assert "--eval-gpu 5, but this process sees no GPU" in proc.stderr and "Traceback" not in proc.stderr


def test_flags_reach_the_settings():
    from kevin_agent.cli import build_parser
    from kevin_agent.config import given_settings
    from kevin_agent.config import load_config
    from kevin_agent.registry import build_registry

    parser = build_parser(build_registry())
    args = parser.parse_args([
        "run", "x.py", "--kv-cache-dtype", "auto", "--quantization", "fp8", "--no-prefix-caching",
        "--no-cuda-graphs", "--speculative", "ngram", "--eval-gpu", "1", "--tensor-parallel-size", "2"])
    config = load_config(given_settings(args))
    assert (config.kv_cache_dtype, config.quantization, config.prefix_caching, config.cuda_graphs,
            config.speculative, config.eval_gpu, config.tensor_parallel_size) == ("auto", "fp8", False, False,
                                                                                   "ngram", 1, 2)
    defaults = load_config(given_settings(parser.parse_args(["run", "x.py"])))
    assert (defaults.kv_cache_dtype, defaults.quantization, defaults.prefix_caching, defaults.cuda_graphs,
            defaults.speculative, defaults.eval_gpu) == ("fp8", "none", True, True, "off", None)


# --- engine statistics --------------------------------------------------------------------------------


def test_engine_statistics_add_up_over_a_batch():
    """The sink reads the fields of vLLM's IterationStats and SchedulerStats (plain data here)."""
    sink = EngineStatsSink()
    finished = SimpleNamespace(num_generation_tokens=101, num_prompt_tokens=900, num_cached_tokens=896,
                               queued_time=0.01, prefill_time=0.2, decode_time=2.0)
    iteration = SimpleNamespace(num_preempted_reqs=1, num_prompt_tokens=900, num_generation_tokens=16,
                                time_to_first_tokens_iter=[0.3, 0.5], finished_requests=[finished])
    scheduler = SimpleNamespace(kv_cache_usage=0.7, prefix_cache_stats=SimpleNamespace(queries=1800, hits=896),
                                spec_decoding_stats=SimpleNamespace(num_drafts=4, num_draft_tokens=16,
                                                                    num_accepted_tokens=4))
    sink.record(scheduler, iteration)
    sink.record(SimpleNamespace(kv_cache_usage=0.9, prefix_cache_stats=None, spec_decoding_stats=None),
                SimpleNamespace(num_preempted_reqs=2, num_prompt_tokens=0, num_generation_tokens=16,
                                time_to_first_tokens_iter=[], finished_requests=[]))
    stats = sink.take()
    assert (stats.preemptions, stats.generation_tokens, stats.prefix_cache_hits) == (3, 32, 896)
    summary = stats.summary()
    assert summary["max_kv_cache_usage"] == 0.9 and summary["spec_acceptance"] == 0.25
    assert summary["ttft_median_s"] == 0.4 and summary["ttft_max_s"] == 0.5
    assert summary["decode_tok_s_median"] == 50.0  # 100 tokens after the first in 2 s
    assert summary["prefix_cache_hit_rate"] == 896 / 1800
    assert sink.take().preemptions == 0, "take() starts the next batch afresh"


def test_backend_refuses_fp8_weights_before_loading_anything(monkeypatch):
    """With vllm importable, the refusal comes before any of vLLM is used (nor a model loaded)."""
    from kevin_agent.backends.vllm import VLLMBackend

    # An empty stand-in module makes `import vllm` succeed (and is gone after the test); nothing
    # of it is used before the check, which is the behaviour under test.
    monkeypatch.setitem(sys.modules, "vllm", ModuleType("vllm"))
    monkeypatch.delenv("KEVIN_VLLM_ENGINE_ARGS", raising=False)
    with pytest.raises(ConfigError, match="fp8 tensor cores"):
        VLLMBackend(RunConfig(device="cuda", quantization="fp8"), gpus=parse_nvidia_smi(A100))
    with pytest.raises(ConfigError, match="--eval-gpu 3"):
        VLLMBackend(RunConfig(device="cuda", eval_gpu=3), gpus=h200s(2))


def test_a_package_vllm_imports_but_lacks_is_named(monkeypatch, tmp_path):
    """vLLM 0.22.0 imports a module it does not ship (humming, in humming-kernels) to resolve
    --quantization: the refusal names the module, its distribution and the option instead of
    blaming the model or the memory."""
    from kevin_agent.backends.vllm import VLLMBackend

    pkg = tmp_path / "vllm"
    (pkg / "v1" / "metrics").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "class EngineArgs:\n    def __init__(self, **fields):\n        self.fields = fields\n"
        "class SamplingParams: pass\n"
        "class LLMEngine:\n    @classmethod\n    def from_engine_args(cls, args, stat_loggers=()):\n"
        "        raise ModuleNotFoundError(\"No module named 'humming'\", name='humming')\n")
    (pkg / "sampling_params.py").write_text("import enum\nclass RequestOutputKind(enum.Enum):\n    DELTA = 1\n")
    (pkg / "v1" / "__init__.py").write_text("")
    (pkg / "v1" / "metrics" / "__init__.py").write_text("")
    (pkg / "v1" / "metrics" / "loggers.py").write_text("class StatLoggerBase: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delenv("KEVIN_VLLM_ENGINE_ARGS", raising=False)
    with pytest.raises(BackendError, match="its Python module 'humming' is missing") as info:
        VLLMBackend(RunConfig(device="cuda", quantization="fp8"), gpus=h200s(1))
    # The module ships under another name: the hint names the distribution to install.
    assert "pip install humming-kernels" in info.value.hint and "kevin-opt[vllm]" in info.value.hint
    assert "--quantization" in info.value.hint and info.value.exit_code == 3
