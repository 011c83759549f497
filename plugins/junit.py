"""JUnit XML of a run, for CI systems that display JUnit results (``--junit PATH``).

One test case per turn (a failure carrying the turn's feedback when it was not correct),
plus a ``best kernel`` case that is the suite's verdict: it passes when a verified kernel
exists and names it.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import pluggy

from kevin_agent.results import RunInfo, TurnRecord

hookimpl = pluggy.HookimplMarker("kevin_opt")

MAX_TEXT = 8000
"""Characters of error text kept per test case (the tail, where compilers put the cause)."""

# Characters XML 1.0 cannot hold (compiler logs carry ANSI escapes, for one).
_INVALID_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: str, limit: int = MAX_TEXT) -> str:
    value = _INVALID_XML.sub("", value)
    return value if len(value) <= limit else "[...]\n" + value[-limit:]


def _properties(parent: ET.Element, items: dict[str, object]) -> None:
    props = ET.SubElement(parent, "properties")
    for name, value in items.items():
        if value is not None:
            ET.SubElement(props, "property", name=name, value=_text(str(value), 1000))


def _seconds(rec: TurnRecord) -> float:
    return (rec.generate_s or 0.0) + (rec.eval_s or 0.0)


def _turn_case(suite: ET.Element, info: RunInfo, rec: TurnRecord) -> None:
    case = ET.SubElement(
        suite, "testcase", classname=f"kevin-opt.{info.task.name}",
        name=f"trajectory {rec.trajectory} turn {rec.turn}", time=f"{_seconds(rec):.3f}",
    )
    ev = rec.eval
    _properties(case, {
        "status": rec.status.value,
        "speedup": f"{rec.speedup:.4f}" if rec.speedup is not None else None,
        "speedup_vs_compile": f"{ev.speedup_vs_compile:.4f}" if ev and rec.correct and ev.speedup_vs_compile else None,
        "runtime_median_ms": f"{ev.runtime.median_ms:.6g}" if ev and ev.runtime else None,
        "flags": "; ".join(ev.flags) if ev and ev.flags else None,
        "kernel_path": rec.kernel_path,
    })
    if not rec.correct:
        failure = ET.SubElement(case, "failure", message=_text(rec.feedback, 1000), type=rec.status.value)
        detail = (ev.error or ev.compile_log) if ev else (rec.parse_error or (rec.check.summary() if rec.check else ""))
        failure.text = _text(detail or rec.feedback)
    if rec.summary.strip():
        ET.SubElement(case, "system-out").text = _text(rec.summary.strip())


def build_junit(info: RunInfo, records: Sequence[TurnRecord], best: TurnRecord | None) -> ET.ElementTree:
    ordered = sorted(records, key=lambda r: (r.trajectory, r.turn))
    failures = sum(not r.correct for r in ordered) + (best is None)
    total_s = sum(_seconds(r) for r in ordered)
    suites = ET.Element("testsuites", name="kevin-opt", tests=str(len(ordered) + 1),
                        failures=str(failures), errors="0", time=f"{total_s:.3f}")
    suite = ET.SubElement(
        suites, "testsuite", name=f"kevin-opt {info.task.name} ({info.task.class_name})",
        tests=str(len(ordered) + 1), failures=str(failures), errors="0", skipped="0",
        time=f"{total_s:.3f}", timestamp=info.created_at, hostname=socket.gethostname(),
    )
    best_ev = best.eval if best is not None else None
    _properties(suite, {
        "run_id": info.run_id,
        "run_status": info.status,
        "task": info.task.path,
        "backend": info.backend,
        "model": info.model,
        "device": info.device,
        "device_name": info.device_name or None,
        **{f"version.{k}": v for k, v in sorted(info.versions.items())},
        "best": f"trajectory {best.trajectory} turn {best.turn}" if best is not None else "none",
        "best_speedup": f"{best.speedup:.4f}" if best is not None and best.speedup is not None else None,
        "best_speedup_vs_compile": (
            f"{best_ev.speedup_vs_compile:.4f}" if best_ev and best_ev.speedup_vs_compile is not None else None
        ),
        "best_kernel_path": best.kernel_path if best is not None else None,
        "commit": info.commit,
    })
    for rec in ordered:
        _turn_case(suite, info, rec)

    verdict = ET.SubElement(suite, "testcase", classname=f"kevin-opt.{info.task.name}", name="best kernel", time="0")
    if best is None:
        ET.SubElement(verdict, "failure", message="no turn produced a verified kernel", type="no_kernel")
    else:
        _properties(verdict, {
            "trajectory": best.trajectory,
            "turn": best.turn,
            "speedup": f"{best.speedup:.4f}" if best.speedup is not None else None,
            "speedup_vs_compile": (
                f"{best_ev.speedup_vs_compile:.4f}" if best_ev and best_ev.speedup_vs_compile is not None else None
            ),
        })
        ET.SubElement(verdict, "system-out").text = (
            f"best kernel: trajectory {best.trajectory} turn {best.turn}, "
            f"{best.speedup:.2f}x vs eager" if best.speedup is not None else "best kernel: speedup not measured"
        )
    ET.indent(suites)
    return ET.ElementTree(suites)


class JUnitReporter:
    cli_option = "--junit"
    help = "write the run as JUnit XML to PATH (one test case per turn, the best kernel as the verdict)"

    def write(self, path: Path, info: RunInfo, records: list[TurnRecord], best: TurnRecord | None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        build_junit(info, records, best).write(path, encoding="utf-8", xml_declaration=True)


@hookimpl
def register_reporters(register):
    register("junit", JUnitReporter())
