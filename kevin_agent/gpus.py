"""The GPUs this process sees, and where the model and the kernels go on them.

GPUs are found with ``nvidia-smi`` (no CUDA context is made, so vLLM can still fork its engine)
and numbered as CUDA numbers them in this process: ``CUDA_VISIBLE_DEVICES`` picks and orders
them. vLLM puts a model with tensor parallelism N on the first N; kernels are checked and timed
on the evaluation GPU. When that is not one of the model's GPUs, evaluation can run while the
model generates; otherwise it waits for generation to stop.
"""

from __future__ import annotations

import os
import subprocess
from typing import Literal

from pydantic import BaseModel

from .config import RunConfig
from .errors import ConfigError

Layout = Literal["split", "tensor-parallel"]

#: With two or more GPUs and no --tensor-parallel-size or --eval-gpu given: "split" puts the
#: model on GPU 0 and the kernels on GPU 1, so evaluation overlaps generation; "tensor-parallel"
#: spreads the model over the GPUs and times kernels between turns. benchmarks/generation.py
#: (configuration kv-fp8-tp2 against kv-fp8) measures the generation side of the choice.
TWO_GPU_LAYOUT: Layout = "split"

#: Native fp8 tensor cores: Ada (8.9), Hopper (9.0) and later.
FP8_CAPABILITY = (8, 9)

_QUERY = "index,uuid,name,memory.total,compute_cap"


class Gpu(BaseModel):
    index: int
    """As CUDA numbers it in this process (after CUDA_VISIBLE_DEVICES)."""
    physical_index: int
    """As nvidia-smi numbers it: what CUDA_VISIBLE_DEVICES takes."""
    uuid: str
    name: str
    memory_bytes: int
    capability: tuple[int, int] | None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of ``nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap
    --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit() or not parts[3].replace(".", "", 1).isdigit():
            continue
        capability = None
        if len(parts) > 4 and "." in parts[4]:
            major, minor = parts[4].split(".", 1)
            if major.isdigit() and minor.isdigit():
                capability = (int(major), int(minor))
        index = int(parts[0])
        gpus.append(Gpu(index=index, physical_index=index, uuid=parts[1], name=parts[2],
                        memory_bytes=int(float(parts[3])) << 20, capability=capability))
    return gpus


def visible(gpus: list[Gpu], cuda_visible_devices: str | None) -> list[Gpu]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves, renumbered from 0 in its order (by index or
    UUID; the list ends at the first entry that matches none, as CUDA's does)."""
    if cuda_visible_devices is None:
        return gpus
    out: list[Gpu] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        match = next((g for g in gpus if entry and (
            (entry.isdigit() and g.physical_index == int(entry)) or g.uuid.startswith(entry))), None)
        if match is None or match in out:
            break
        out.append(match.model_copy(update={"index": len(out)}))
    return out


def detect_gpus() -> list[Gpu]:
    """The GPUs this process can use; empty without a driver or ``nvidia-smi``."""
    # Drivers before 510 do not know compute_cap; the rest of the query still answers.
    for query in (_QUERY, _QUERY.rsplit(",", 1)[0]):
        try:
            proc = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return []
        if proc.returncode == 0:
            return visible(parse_nvidia_smi(proc.stdout), os.environ.get("CUDA_VISIBLE_DEVICES"))
    return []


class GpuPlan(BaseModel):
    """Where the model and the kernels go."""

    model_gpus: list[int]
    """GPUs the vllm backend's model uses (empty for a model served elsewhere)."""
    eval_gpu: int | None
    """The GPU kernels are timed on; None when they run on the CPU."""
    overlaps: bool
    """Evaluation may run while the model generates."""
    why: str = ""
    """The layout in words, and why it was chosen (the run's first line says it with several GPUs)."""

    @property
    def tensor_parallel_size(self) -> int:
        return max(1, len(self.model_gpus))


def plan_gpus(config: RunConfig, gpus: list[Gpu], *, two_gpu_layout: Layout = TWO_GPU_LAYOUT) -> GpuPlan:
    """Place the model and the kernels; a placement the GPUs cannot hold is a ``ConfigError``."""
    count = len(gpus)
    tp, eval_gpu = config.tensor_parallel_size, config.eval_gpu
    if eval_gpu is not None and config.device == "cpu":
        raise ConfigError(f"--eval-gpu {eval_gpu} needs --device cuda: kernels for the cpu device run on the CPU",
                          "drop --eval-gpu, or pass --device cuda")
    if eval_gpu is not None and eval_gpu >= count:
        seen = "no GPU" if count == 0 else f"{count} GPU{'s' if count > 1 else ''} (0-{count - 1})"
        raise ConfigError(f"--eval-gpu {eval_gpu}, but this process sees {seen}",
                          "pick one of the GPUs nvidia-smi lists (after CUDA_VISIBLE_DEVICES), or drop "
                          "--eval-gpu to let kevin-opt choose")
    if config.backend != "vllm":
        # The model is served elsewhere: its GPUs are not known here, so evaluation overlaps
        # generation only when the person named the GPU for the kernels.
        on_gpu = config.device != "cpu" and count > 0
        return GpuPlan(model_gpus=[], eval_gpu=(eval_gpu or 0) if on_gpu else None,
                       overlaps=eval_gpu is not None or config.backend == "scripted")
    if tp is None:
        tp = 1
        if count >= 2 and eval_gpu is None and two_gpu_layout == "tensor-parallel":
            tp = 1 << (count.bit_length() - 1)
    if count and tp > count:
        raise ConfigError(f"--tensor-parallel-size {tp}, but this process sees {count} GPU{'s' if count > 1 else ''}",
                          f"use at most {count}, or make more GPUs visible (CUDA_VISIBLE_DEVICES)")
    model_gpus = list(range(tp))
    if config.device == "cpu":
        return GpuPlan(model_gpus=model_gpus, eval_gpu=None, overlaps=True)
    chosen = eval_gpu is None and config.tensor_parallel_size is None
    if eval_gpu is None:
        eval_gpu = tp if count > tp else 0
    overlaps = eval_gpu not in model_gpus
    on = f"GPU{'s' if tp > 1 else ''} {', '.join(map(str, model_gpus))}"
    if overlaps:
        why = f"the model on {on}, the kernels on GPU {eval_gpu}: kernels are timed while the model generates"
    else:
        why = f"the model on {on}, the kernels on GPU {eval_gpu} too, timed between generations"
    if chosen and count >= 2:
        why += (f" (the {two_gpu_layout} layout, kevin-opt's default for {count} GPUs; --tensor-parallel-size "
                f"and --eval-gpu choose another)")
    return GpuPlan(model_gpus=model_gpus, eval_gpu=eval_gpu, overlaps=overlaps, why=why)


def eval_worker_env(plan: GpuPlan, gpus: list[Gpu]) -> dict[str, str]:
    """Environment for an evaluation worker: ``CUDA_VISIBLE_DEVICES`` naming the evaluation GPU
    alone (by its physical number), so the worker's ``cuda:0`` is that GPU."""
    if plan.eval_gpu is None:
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {"CUDA_VISIBLE_DEVICES": str(gpus[plan.eval_gpu].physical_index)}


def check_engine_options(config: RunConfig, gpus: list[Gpu], plan: GpuPlan) -> None:
    """Refuse vLLM options the model's GPUs cannot run, before a 32B model is loaded."""
    if config.quantization == "fp8":
        for index in plan.model_gpus:
            gpu = gpus[index] if index < len(gpus) else None
            if gpu is not None and gpu.capability is not None and gpu.capability < FP8_CAPABILITY:
                major, minor = gpu.capability
                raise ConfigError(
                    f"--quantization fp8 needs a GPU with fp8 tensor cores (compute capability 8.9 or "
                    f"later: L4, L40, H100, H200, B200); GPU {index} is {gpu.name} ({major}.{minor})",
                    "drop --quantization fp8 (bf16 weights), or run the model on a newer GPU",
                )
