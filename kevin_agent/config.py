"""Run configuration: CLI flags > ``KEVIN_*`` environment > ``[tool.kevin]`` in the person's
pyproject.toml > the defaults below. Defaults live here and nowhere else.

``EvalOptions`` is the part of the settings that decides how candidates are evaluated; ``RunConfig``
holds it together with everything else, and ``EvalSettings`` is the same options resolved for one
device, which is what an evaluator and each of its workers receive. The CLI's help text is the
docstring under each field, so a new option is a field here and a flag in ``cli.py``.
"""

from __future__ import annotations

import contextvars
import os
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from .errors import ConfigError

DEFAULT_MODEL = "cognition-ai/Kevin-32B"

_pyproject: contextvars.ContextVar[Path | None] = contextvars.ContextVar("kevin_pyproject", default=None)


def _default_cache_dir() -> Path:
    # Read here too, so that settings made without the environment layer agree with RunConfig.
    env = os.environ.get("KEVIN_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kevin-opt" / "builds"


def parallel_compiles_for(cores: int, available_gib: float) -> int:
    """Builds that fit at once: a cuda build compiles the bindings and the .cu file side by
    side (two cores, and one more for the start-up and link phases of them all) and nvcc
    parsing PyTorch's full headers peaks at about 3 GiB."""
    return max(1, min(cores // 2 + 1, int(available_gib // 3)))


def default_parallel_compiles() -> int:
    """``parallel_compiles_for`` the cores this process may use and the memory available now."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    available = 4.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return parallel_compiles_for(cores, available)


class EvalOptions(BaseModel):
    """How candidates are compiled, checked and timed."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    language: Literal["cuda", "triton"] = "cuda"
    """Kernel language the model writes: cuda (C++/CUDA through load_inline) or triton (@triton.jit kernels
    launched from ModelNew.forward; on the cpu device they run in Triton's interpreter)."""
    correctness_trials: int = Field(5, ge=1)
    """Correctness trials, each with a fresh seed; input distributions alternate."""
    tolerance: Literal["strict", "kernelbench"] = "strict"
    """Tolerance preset: strict (float32 atol = rtol = 1e-4) or kernelbench (1e-2, what Kevin was trained with).
    Values per dtype are in docs/evaluation.md; --atol and --rtol override either preset."""
    atol: float | None = Field(None, ge=0)
    """Absolute tolerance for every floating dtype, overriding the preset's."""
    rtol: float | None = Field(None, ge=0)
    """Relative tolerance for every floating dtype, overriding the preset's."""
    reference_tf32: bool = False
    """Let the reference use TF32 for float32 matmuls and convolutions (off: full float32 precision).
    The choice holds for the correctness checks and for timing alike."""
    warmup_runs: int | None = Field(None, ge=0)
    """Untimed runs before timing (default 10 on cuda, 3 on cpu)."""
    timed_runs: int | None = Field(None, ge=1)
    """Timed runs per measurement; the median is reported (default 100 on cuda, 20 on cpu)."""
    compare_compile: bool | None = None
    """Also time torch.compile of the reference (default on for cuda, off for cpu); the whole model's
    measurement (optimize's combination, kevin-opt e2e) then times it under torch.compile too."""
    e2e_mode: Literal["eager", "compile"] = "eager"
    """Which whole-model measurement decides what is kept: eager, or the model under torch.compile
    (then timed under it whatever --compare-compile says)."""
    compile_timeout_s: float = Field(600.0, gt=0)
    """Wall-clock limit for building one candidate, in seconds."""
    run_timeout_s: float = Field(300.0, gt=0)
    """Wall-clock limit for checking and timing one candidate (and for probing the task), in seconds;
    also the cap of every stage's own limit."""
    load_timeout_s: float = Field(120.0, gt=0)
    """Time limit of a candidate's load stage (importing it, load_inline finding its build, making
    the models), in seconds: no kernel runs there, so it is not derived from the reference's time,
    and a machine busy with builds must not turn a slow import into the candidate's timeout."""
    stage_floor_s: float = Field(10.0, gt=0)
    """Shortest time limit of a candidate's correctness and timing stages, in seconds: covers the
    harness's own work and a first kernel call that loads its module."""
    stage_time_factor: float = Field(50.0, gt=0)
    """On top of the floor, a stage may take this many times what the reference's own calls in that
    stage take, so a kernel that hangs costs seconds, not run_timeout_s."""
    parallel_compiles: int = Field(default_factory=default_parallel_compiles, ge=1)
    """Candidates built at once (default: as many as the cores and memory allow)."""
    fast_build: bool = True
    """Build with a precompiled bindings header and light CUDA headers, and plainly whenever
    that fails (see docs/evaluation.md)."""
    eval_workers: int | None = Field(None, ge=1)
    """Worker processes started ahead of need (torch imported, task and reference data loaded), each
    used for one candidate only (default: half the CPU cores, at most 8, and on cuda by free GPU memory)."""
    eval_memory_gib: float | None = Field(None, gt=0)
    """Device memory the evaluation may use, in GiB (default: what is free when the run starts, less the
    model's share). A task whose inputs, outputs and reference do not fit it is refused before any turn."""
    cache_dir: Path = Field(default_factory=_default_cache_dir)
    """Build cache: one folder per candidate source and toolchain (KEVIN_CACHE_DIR)."""
    cpu_threads: int | None = Field(1, ge=1)
    """cpu device: intra-op threads for the candidate and the reference alike. One thread keeps
    timings stable on shared machines and compares like with like; None leaves it to torch."""
    op_audit: bool = True
    """Run the candidate once under a dispatch mode and reject it if it calls a PyTorch compute
    operator, from Python or from its C++ code: the run-time side of the no-torch-compute rule."""
    seed: int = 0
    """Base seed: correctness trial i uses seed + i; models are built under seed."""
    confirm_top: int = Field(3, ge=1)
    """Distinct verified kernels confirmed when the run ends: verified again on fresh seeds and timed
    head to head with the reference; the winner and every published number come from that."""
    confirm_rounds: int | None = Field(None, ge=5)
    """Most rounds of the head-to-head timing in each confirmation worker (default 1000 on cuda, 100 on
    cpu); a worker stops sooner once each kernel's 95% interval is within 1% of its median."""
    confirm_workers: int | None = Field(None, ge=1, le=16)
    """Worker processes that each verify the kernels again and time them head to head when the run ends,
    their rounds pooled into the confirmed speedup (default 4 on cuda, 1 on cpu): where one process's
    kernels lie moves a microsecond speedup by about 1%, which one worker's rounds cannot average out."""
    bandwidth_gb_s: float | None = Field(None, gt=0)
    """The device's memory bandwidth in GB/s for the physical floor (default: measured by the worker).
    A kernel faster than its inputs and outputs can move at this bandwidth is flagged as implausible."""


class EvalSettings(EvalOptions):
    """``EvalOptions`` resolved for one device: what an evaluator and its workers get."""

    device: Literal["cpu", "cuda"]
    visible_devices: str | None = None
    """CUDA_VISIBLE_DEVICES for the workers: the GPU the kernels run on, alone (None: as inherited)."""
    model_memory_fraction: float = Field(0.0, ge=0, lt=1)
    """Share of the evaluation GPU's memory the model takes (vLLM on the same GPU, which may start
    after the probe): not the evaluation's to use."""
    profile_dir: Path | None = None
    """Where each worker writes a profile of its job (cProfile: ``<mode>-<pid>.prof`` and the top of
    it as text), for finding where an evaluation's time goes (the benchmarks set it; None: no profile)."""
    profile_memory: bool = False
    """With ``profile_dir`` on cuda: each worker also records its allocator's history
    (``<mode>-<pid>.memory.pickle``, read by ``benchmarks/stages.py``); it slows every allocation,
    so the stage times of such a run are not the evaluation's own."""
    warmup_runs: int = Field(None, ge=0, validate_default=False)  # type: ignore[assignment]
    timed_runs: int = Field(None, ge=1, validate_default=False)  # type: ignore[assignment]
    compare_compile: bool = Field(None, validate_default=False)  # type: ignore[assignment]
    confirm_rounds: int = Field(None, ge=5, validate_default=False)  # type: ignore[assignment]
    confirm_workers: int = Field(None, ge=1, validate_default=False)  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _device_defaults(cls, data: Any) -> Any:
        """The defaults that depend on the device, filled in where the options left them unset."""
        if not isinstance(data, dict):
            return data
        cuda = data.get("device") == "cuda"
        device_defaults = {"warmup_runs": 10 if cuda else 3, "timed_runs": 100 if cuda else 20,
                           "compare_compile": cuda, "confirm_rounds": 1000 if cuda else 100,
                           "confirm_workers": 4 if cuda else 1}
        return {**data, **{k: v for k, v in device_defaults.items() if data.get(k) is None}}


class RunConfig(EvalOptions, BaseSettings):
    """Everything that shapes one run. Each field's docstring is its `--help` text."""

    model_config = SettingsConfigDict(env_prefix="KEVIN_", extra="forbid", validate_default=True,
                                      use_attribute_docstrings=True)

    # --- the loop -------------------------------------------------------------------------
    turns: int = Field(8, ge=1, le=64)
    """Serial refinement turns per trajectory (the paper evaluated 8)."""
    trajectories: int | None = Field(None, ge=1, le=64)
    """Trajectories refined in parallel (default: as many as the KV cache holds at full context, up to 16).
    One turn of all of them is one batch. Without --trajectories the vllm backend runs as many as
    its KV cache holds at the full context without preemption, up to the paper's 16; other
    backends run 1."""
    target_speedup: float | None = Field(None, gt=0)
    """Stop early once a verified kernel reaches this speedup."""
    stop_at_roofline: float | None = Field(None, gt=0)
    """Stop early once a confirmed kernel reaches this share of its roofline (e.g. 0.9): the least
    time its bytes (and FLOPs) allow on this device, measured; little is left to win above it."""
    min_speedup: float = Field(1.0, ge=0)
    """Speedup a verified kernel must reach for the run to succeed (exit 0) and be committed."""
    search: str = "independent"
    """How trajectories share the turns: independent chains, or a beam that continues the best ones
    (a registered search: independent, beam, or one a plugin registers)."""
    beam_width: int | None = Field(None, ge=1)
    """Beam search: trajectories kept after each turn (default a quarter of --trajectories, at least 1)."""

    # --- the model ------------------------------------------------------------------------
    backend: str = "vllm"
    """Where responses come from: vLLM in this process, an OpenAI-compatible server, a JSONL script, or a plugin's backend."""
    model: str = DEFAULT_MODEL
    """Model name (Hugging Face id for vllm, served name for openai)."""
    base_url: str | None = None
    """Base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1."""
    api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("api_key", "KEVIN_API_KEY", "OPENAI_API_KEY")
    )
    """API key for the openai backend (KEVIN_API_KEY or OPENAI_API_KEY)."""
    responses: Path | None = None
    """JSONL of responses for the scripted backend, one {"text": ...} per line; or a folder of them, one per
    task: <task file stem>.jsonl (for a model's module group, a member's module path or its class name)."""
    temperature: float = Field(0.9, ge=0)
    """Sampling temperature (Kevin was trained and evaluated at 0.9)."""
    max_tokens: int = Field(16384, ge=16)
    """Longest response in tokens, reasoning included."""
    context_tokens: int = Field(32768, ge=1024)
    """Model context length; the earliest attempts are dropped from the prompt to fit."""
    request_timeout_s: float = Field(900.0, gt=0)
    """Timeout for one request to an OpenAI-compatible server, in seconds."""
    retries: int = Field(4, ge=0)
    """Retries (with backoff) on connection errors, 429 and 5xx."""
    tensor_parallel_size: int | None = Field(None, ge=1)
    """vLLM: GPUs to shard the model over (default 1; on two GPUs the kernels get the other one)."""
    gpu_memory_utilization: float = Field(0.80, gt=0, lt=1)
    """vLLM: share of GPU memory for the model; the rest is left for kernel evaluation."""
    kv_cache_dtype: Literal["auto", "fp8"] = "fp8"
    """vLLM: KV cache precision; fp8 holds twice the tokens of auto (the model's bf16).
    It also halves what each decode step reads of the cache. Kevin's quality with it is unmeasured."""
    quantization: Literal["none", "fp8"] = "none"
    """vLLM: fp8 weights, quantized at load (needs compute capability 8.9+; quality unmeasured).
    Half the memory of bf16 and faster steps; opt-in because Kevin's quality with it is unmeasured."""
    prefix_caching: bool = True
    """vLLM: reuse the KV cache of the task prompt that a turn's trajectories share (default on)."""
    cuda_graphs: bool = True
    """vLLM: torch.compile and CUDA graphs, vLLM's default (off: faster start, slower generation)."""
    speculative: Literal["off", "ngram"] = "off"
    """vLLM: speculative decoding; ngram drafts the tokens that followed the last few generated ones in the prompt.
    Prompt lookup pays when an answer repeats earlier code; its acceptance on Kevin is unmeasured."""
    eval_gpu: int | None = Field(None, ge=0)
    """GPU for checking and timing kernels (default: one the model does not use, else the model's).
    Numbered as CUDA numbers them after CUDA_VISIBLE_DEVICES; on the model's GPU, timing waits
    for generation to stop."""

    # --- evaluation (the fields of EvalOptions) and where kernels run -------------------------
    device: str | None = None
    """Where kernels run (default cuda when a GPU is present, else cpu)."""

    # --- output ---------------------------------------------------------------------------
    class_name: str = "Model"
    """The reference class in the task file."""
    run_dir: Path | None = None
    """Where runs are stored (default: .kevin/runs at the top of the git repository that holds the task,
    else beside the task)."""
    commit: bool = True
    """Commit the best verified kernel and its report (--no-commit writes them only)."""
    e2e: bool = True
    """On a task kevin-opt extract wrote: before committing, run the whole model with and without the
    kernel (outputs compared, speedup measured); --no-e2e skips it."""
    accept_slower: bool = False
    """Commit the kernel even when the whole model runs slower with it."""
    branch: str | None = None
    """Commit on this new branch; the checkout stays where it is."""
    out: Path | None = None
    """Path of the kernel module (default <task>_kevin.py next to the task); the report goes beside it."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _PyprojectSource(settings_cls))

    def eval_settings(self, device: str | None = None) -> EvalSettings:
        """The evaluation options resolved for ``device`` (default: this config's device)."""
        options = self.model_dump(include=set(EvalOptions.model_fields))
        return EvalSettings(device=device or self.device, **options)

    def public_dict(self) -> dict[str, Any]:
        """The config as recorded in run.json: no secrets."""
        data = self.model_dump(mode="json", exclude={"api_key"})
        data["api_key_set"] = self.api_key is not None
        return data


def first_sentence(text: str) -> str:
    """The first sentence of a docstring, however many lines it spans: up to the first full stop
    outside parentheses that ends a word (not one inside "e.g." or a version number)."""
    flat = " ".join(text.split())
    depth = 0
    for i, char in enumerate(flat):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "." and depth == 0 and (i + 1 == len(flat) or flat[i + 1] == " "):
            word = flat[:i + 1].rsplit(" ", 1)[-1]
            if word.lower() not in ("e.g.", "i.e.", "etc."):
                return flat[:i + 1]
    return flat


def given_settings(args) -> dict[str, Any]:
    """Every run setting a command line gave (None: not given); its flags carry the setting's name as dest."""
    return {name: getattr(args, name) for name in RunConfig.model_fields if getattr(args, name, None) is not None}


def field_help(name: str) -> str:
    """A setting's docstring with its default, for `--help`: its whole first sentence."""
    info = RunConfig.model_fields[name]
    text = first_sentence(info.description or "").rstrip(".")
    default = info.get_default(call_default_factory=True)
    if not (default is None or isinstance(default, bool) or default == "") and "default" not in text:
        text += f" (default {default})"
    return text


class _PyprojectSource(PydanticBaseSettingsSource):
    """``[tool.kevin]`` of the person's pyproject.toml (found from the task's folder up)."""

    def get_field_value(self, field, field_name):  # pragma: no cover - unused by __call__
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = _pyproject.get()
        if path is None or not path.is_file():
            return {}
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read [tool.kevin] ({exc})", "fix the TOML syntax") from None
        section = data.get("tool", {}).get("kevin", {})
        return {k.replace("-", "_"): v for k, v in section.items()}


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
        if (folder / ".git").exists():
            break
    return None


def load_config(overrides: dict[str, Any], *, project_dir: Path | None = None) -> RunConfig:
    """Build the config; ``overrides`` are the CLI flags that were given (None means unset)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    token = _pyproject.set(find_pyproject(project_dir) if project_dir else None)
    try:
        return RunConfig(**given)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(
            f"invalid configuration: {problems}",
            "check the flags, KEVIN_* environment variables and [tool.kevin] in pyproject.toml",
        ) from None
    finally:
        _pyproject.reset(token)
