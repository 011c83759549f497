"""Nsight Compute around one kernel, from the parent's side: find ``ncu``, run the target
(``worker.ncu_target``) under it with an evaluation's isolation (a scrubbed environment, a session
of its own, a time limit), keep the full report, and read a short record out of it.

Two steps: ``ncu --export REPORT ... python -m ...ncu_target JOB`` profiles (the GPU's clocks left
as they run, ``--clock-control none``, so the numbers are the ones the timing saw; only the
candidate's own kernels, by NVTX range and by name, ``-k regex:``, at most ``LAUNCHES``), then
``ncu --import REPORT --csv --page raw --print-units base`` prints every metric collected, one
row per kernel launch, which ``parse_raw_csv`` reads.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ...config import EvalSettings
from ...errors import EnvironmentUnavailable
from ...results.ncu import NcuKernel, Stall
from ..toolchain import cache
from ..ncu import RANGE, NcuJob
from ...workers import scrubbed_env

LAUNCHES = 16
"""Kernel launches profiled at most: a candidate's call is a few kernels."""
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats")
METRICS = ("gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
           "launch__registers_per_thread", "launch__shared_mem_per_block_static",
           "launch__shared_mem_per_block_dynamic", "launch__block_size", "launch__grid_size")
PERMISSION = "ERR_NVGPUCTRPERM"
TOP_STALLS = 3

_STALL = (re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
          re.compile(r"smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio|\.sum|\.avg)?$"),
          re.compile(r"smsp__pcsamp_warps_issue_stalled_(\w+)$"))
"""The stall-reason metrics as the WarpStateStats section and PC sampling name them."""
_NOT_STALLS = {"selected"}
"""A warp issuing its instruction is counted beside the stalls: it is no stall."""


def find_ncu() -> str | None:
    """``ncu`` on the PATH, else in the CUDA toolkit's ``bin``."""
    found = shutil.which("ncu")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), cache.toolchain_env("cuda").get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (candidate := Path(root) / "bin" / "ncu").is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def kernel_names(source: str) -> list[str]:
    """The ``__global__`` functions a candidate defines (what ``-k regex:`` picks out)."""
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", source)
    names = re.findall(r"__global__[^(;{}]*?\b([A-Za-z_]\w*)\s*(?:<[^<>(]*>\s*)?\(", text)
    return list(dict.fromkeys(n for n in names if n not in ("void", "static", "inline")))


def profile_command(ncu: str, report: Path, job: Path, names: list[str]) -> list[str]:
    """The command that profiles the target into ``report`` (``.ncu-rep`` added by ncu)."""
    command = [ncu, "--export", str(report), "--force-overwrite", "--clock-control", "none",
               "--nvtx", "--nvtx-include", f"{RANGE}/", "--launch-count", str(LAUNCHES)]
    if names:
        command += ["-k", "regex:^(" + "|".join(re.escape(n) for n in names) + r")\b"]
    for section in SECTIONS:
        command += ["--section", section]
    command += ["--metrics", ",".join(METRICS)]
    return command + [sys.executable, "-m", "kevin_agent.evaluate.worker.ncu_target", str(job)]


def import_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def run_ncu(command: list[str], *, env: dict[str, str], timeout_s: float, cwd: Path) -> tuple[int, str]:
    """(exit status, its output), the whole process group killed at ``timeout_s``."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise EnvironmentUnavailable(f"Nsight Compute did not finish within {timeout_s:g} s (run_timeout_s); it was killed",
                         hint="profile a smaller input, or raise run_timeout_s in [tool.kevin]") from None
    return proc.returncode, out


def refusal(output: str) -> EnvironmentUnavailable | None:
    """The error for an ncu run the machine did not allow, read from its output; None otherwise."""
    if PERMISSION in output:
        return EnvironmentUnavailable(
            "Nsight Compute may not read this GPU's performance counters here (ERR_NVGPUCTRPERM): the driver "
            "lets only administrators profile",
            hint="run as root, or let every user profile (the nvidia module option "
                 "NVreg_RestrictProfilingToAdminUsers=0; https://developer.nvidia.com/ERR_NVGPUCTRPERM)")
    return None


def ncu_env(build_folder: Path, visible_devices: str | None) -> dict[str, str]:
    """The target's environment: an evaluation worker's (scrubbed), its build folder, the C locale
    (ncu's numbers without a locale's separators)."""
    extra = {"TORCH_EXTENSIONS_DIR": str(build_folder), "LC_ALL": "C", **cache.toolchain_env("cuda")}
    if visible_devices is not None:
        extra["CUDA_VISIBLE_DEVICES"] = visible_devices
    return scrubbed_env(extra)


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _rows(text: str) -> tuple[list[str], list[list[str]]]:
    """The CSV's header and rows, from the first line that starts it (``"ID",...``); anything ncu
    printed before it (``==PROF==`` lines) is skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return [], []
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return table[0], [row for row in table[1:] if len(row) == len(table[0])]


def _launches(header: list[str], rows: list[list[str]]) -> list[tuple[str, dict[str, str]]]:
    """(kernel name, metric -> value) per profiled launch, in order. Reads both of ncu's layouts:
    ``--page raw`` (a column per metric, a row of units first) and the details page (a row per
    metric: ``Metric Name``, ``Metric Value``)."""
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col or "ID" not in col:
        return []
    launches: dict[str, tuple[str, dict[str, str]]] = {}
    long = "Metric Name" in col and "Metric Value" in col
    for row in rows:
        launch = row[col["ID"]]
        if not launch.strip():
            continue  # the units row
        name, metrics = launches.setdefault(launch, (row[col["Kernel Name"]], {}))
        if long:
            metrics.setdefault("Block Size", row[col["Block Size"]] if "Block Size" in col else "")
            metrics.setdefault("Grid Size", row[col["Grid Size"]] if "Grid Size" in col else "")
            metrics[row[col["Metric Name"]]] = row[col["Metric Value"]]
        else:
            metrics.update({h: row[i] for h, i in col.items()})
    return list(launches.values())


def _stalls(metrics: dict[str, str]) -> list[Stall]:
    for pattern in _STALL:
        found = [Stall(reason=m.group(1), value=value) for name, text in metrics.items()
                 if (m := pattern.match(name)) and m.group(1) not in _NOT_STALLS and not m.group(1).endswith("_not_issued")
                 and (value := _number(text)) is not None and value > 0]
        if found:
            return sorted(found, key=lambda s: -s.value)[:TOP_STALLS]
    return []


def _size(m: dict[str, str], metric: str, column: str) -> str:
    """A launch's block or grid size: the metric's count, else the column's ``(x, y, z)``."""
    value = _number(m.get(metric, ""))
    return str(int(value)) if value is not None else m.get(column, "").strip()


def _kernel(name: str, m: dict[str, str], launches: int) -> NcuKernel:
    def num(*keys: str) -> float | None:
        return next((v for k in keys if (v := _number(m.get(k, ""))) is not None), None)

    def whole(key: str) -> int | None:
        value = num(key)
        return int(value) if value is not None else None

    duration_ns = num("gpu__time_duration.sum")
    return NcuKernel(
        name=name, launches=launches, duration_us=duration_ns / 1e3 if duration_ns is not None else None,
        dram_pct=num("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                     "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        sm_pct=num("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        occupancy_pct=num("sm__warps_active.avg.pct_of_peak_sustained_active"),
        registers_per_thread=whole("launch__registers_per_thread"),
        shared_static_bytes=whole("launch__shared_mem_per_block_static"),
        shared_dynamic_bytes=whole("launch__shared_mem_per_block_dynamic"),
        block_size=_size(m, "launch__block_size", "Block Size"), grid_size=_size(m, "launch__grid_size", "Grid Size"),
        stalls=_stalls(m))


def parse_raw_csv(text: str) -> list[NcuKernel]:
    """Each kernel ncu profiled, by name in the order first seen: its first launch's metrics and
    how many launches of it there were."""
    header, rows = _rows(text)
    by_name: dict[str, list[dict[str, str]]] = {}
    for name, metrics in _launches(header, rows):
        by_name.setdefault(name, []).append(metrics)
    return [_kernel(name, launches[0], len(launches)) for name, launches in by_name.items()]


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def profile_kernel(code: str, *, task_path: Path, class_name: str, settings: EvalSettings, report: Path,
                   timeout_s: float | None = None) -> list[NcuKernel]:
    """``code``, a verified candidate of the task, profiled by Nsight Compute on the task's inputs:
    built (or found) in the build cache, run under ``ncu`` with an evaluation's isolation; the full
    report is left at ``report`` + ``.ncu-rep``. Raises ``EnvironmentUnavailable`` where this machine
    cannot profile it (no NVIDIA GPU, no ``ncu``, counters not permitted) and where ncu failed or
    found nothing of it, with ncu's own last lines."""
    from .builds import compile_in
    from .machine import device_facts

    if device_facts(settings.visible_devices) is None:
        raise EnvironmentUnavailable("no NVIDIA GPU is visible here: Nsight Compute profiles CUDA kernels on one",
                                     hint="run `kevin-opt show ... --ncu` on the machine with the GPU")
    ncu = find_ncu()
    if ncu is None:
        raise EnvironmentUnavailable("Nsight Compute's command line (ncu) is not installed here (not on the PATH, "
                                     "nor in the CUDA toolkit's bin)",
                                     hint="install Nsight Compute (it ships with the CUDA toolkit, or on its own "
                                          "from developer.nvidia.com/nsight-compute) and put ncu on the PATH")
    folder = settings.cache_dir / cache.build_key(code, "cuda", settings.fast_build)
    env = ncu_env(folder, settings.visible_devices)
    build = compile_in(folder, code, settings=settings, env=env, job={"settings": settings})
    if not build.ok:
        raise EnvironmentUnavailable(f"the kernel did not build here: {build.error.strip()[:600]}",
                         hint="it built when the run evaluated it: check the CUDA toolkit (CUDA_HOME)")
    report.parent.mkdir(parents=True, exist_ok=True)
    job = report.parent / f"{report.name}.job.json"
    job.write_text(NcuJob(settings=settings, task_path=str(task_path), class_name=class_name,
                          candidate_path=str(build.candidate)).model_dump_json(), encoding="utf-8")
    limit = timeout_s or settings.run_timeout_s
    try:
        status, out = run_ncu(profile_command(ncu, report, job, kernel_names(code)), env=env, timeout_s=limit,
                              cwd=report.parent)
    finally:
        job.unlink(missing_ok=True)
    if (refused := refusal(out)) is not None:
        raise refused
    saved = Path(f"{report}.ncu-rep")
    if status != 0 or not saved.is_file():
        nothing = "No kernels were profiled" in out
        raise EnvironmentUnavailable(("Nsight Compute profiled no kernel of this turn" if nothing else
                          f"Nsight Compute failed (exit status {status})") + f":\n{_tail(out)}",
                         hint="the lines above are ncu's and the target's own output")
    status, text = run_ncu(import_command(ncu, saved), env=env, timeout_s=limit, cwd=report.parent)
    kernels = parse_raw_csv(text) if status == 0 else []
    if not kernels:
        raise EnvironmentUnavailable(f"Nsight Compute's report {saved} holds no kernel it could read:\n{_tail(text)}",
                         hint=f"open it with ncu-ui, or `{' '.join(import_command('ncu', saved))}`")
    return kernels
