"""The JUnit reporter plugin: registered through the hooks, writes parseable JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pluggy

from kevin_agent.registry import hookspecs
from kevin_agent.plugins import junit
from kevin_agent.results import best_record
from kevin_agent.results import Status

from ..run_records import failed, run_info, sample_records, write_task


def _props(element) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in element.findall("properties/property")}


def _write(tmp_path, records):
    task = write_task(tmp_path)
    path = tmp_path / "reports" / "kevin.xml"
    junit.JUnitReporter().write(path, run_info(task), records, best_record(records))
    return ET.parse(path).getroot()


def test_registered_through_the_plugin_hooks():
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(junit)
    found = {}
    pm.hook.register_reporters(register=lambda name, reporter: found.__setitem__(name, reporter))
    reporter = found["junit"]
    assert reporter.cli_option == "--junit" and reporter.help


def test_one_case_per_turn_and_the_best_as_verdict(tmp_path):
    root = _write(tmp_path, sample_records())
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    names = [c.get("name") for c in cases]
    assert names == [
        "trajectory 0 turn 1", "trajectory 0 turn 2", "trajectory 0 turn 3",
        "trajectory 1 turn 1", "trajectory 1 turn 2", "trajectory 1 turn 3", "best kernel",
    ]
    assert suite.get("tests") == "7" and suite.get("failures") == "3" and root.get("failures") == "3"
    by_name = {c.get("name"): c for c in cases}

    compile_error = by_name["trajectory 0 turn 1"].find("failure")
    assert compile_error.get("type") == "compile_error"
    assert compile_error.get("message") == "Your kernel failed: error: 'blockDim' was not declared in this scope"
    assert "'blockDim' was not declared" in compile_error.text
    check = by_name["trajectory 1 turn 3"].find("failure")
    assert check.get("type") == "check_failed" and "[no-try-except] try/except is not allowed" in check.text

    good = by_name["trajectory 0 turn 2"]
    assert good.find("failure") is None
    assert _props(good)["speedup"] == "1.4000" and _props(good)["status"] == "correct"
    assert float(good.get("time")) == 52.0
    assert _props(by_name["trajectory 0 turn 3"])["flags"] == "speedup above 10x of memory bandwidth bound"

    verdict = by_name["best kernel"]
    assert verdict.find("failure") is None
    assert _props(verdict) == {"trajectory": "0", "turn": "3", "speedup": "1.8300", "speedup_vs_compile": "1.2100"}
    suite_props = _props(suite)
    assert suite_props["best"] == "trajectory 0 turn 3" and suite_props["best_speedup"] == "1.8300"
    assert suite_props["run_id"] == "20250101-120000-my-relu-ab12"
    assert suite_props["version.torch"] == "2.13.0+cpu"
    assert suite_props["best_kernel_path"] == "kernels/t0_turn3.py"


def test_no_verified_kernel_fails_the_suite(tmp_path):
    records = [failed(0, 1, Status.RUNTIME_ERROR, "illegal memory access"), failed(0, 2, Status.TIMEOUT, "timed out")]
    root = _write(tmp_path, records)
    suite = root.find("testsuite")
    verdict = suite.findall("testcase")[-1]
    assert verdict.get("name") == "best kernel"
    assert verdict.find("failure").get("message") == "no turn produced a verified kernel"
    assert suite.get("failures") == "3" and _props(suite)["best"] == "none"


def test_control_characters_in_logs_stay_valid_xml(tmp_path):
    rec = failed(0, 1, Status.COMPILE_ERROR, "x" * 20000 + "\x1b[31merror\x1b[0m: bad \x00 byte")
    root = _write(tmp_path, [rec])  # ET.parse raises on invalid XML
    failure = root.find("testsuite/testcase/failure")
    assert failure.text.endswith("x[31merror[0m: bad  byte")  # the tail, where the cause is
    assert len(failure.text) < 9000 and failure.text.startswith("[...]")
    assert failure.get("message").endswith("[31merror[0m: bad  byte")


def test_found_by_the_registry():
    from kevin_agent.registry import build_registry

    registry = build_registry()
    assert isinstance(registry.reporters["junit"], junit.JUnitReporter)
    assert not [e for e in registry.load_errors if "junit" in e]
