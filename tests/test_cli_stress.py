"""`gradcli stress` as a command: option ranges, exit codes, iterations, JUnit.
(The scenarios themselves are tested in test_reentrant.py.)"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest


def one_error_line(text):
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradcli: error: "), text
    return lines[0]


@pytest.mark.parametrize("args, fragment", [
    (["--timeout", "1e300"], "'1e300' must be <= 604800"),
    (["--timeout", "nan"], "'nan' is not a finite number"),
    (["--duration", "nan"], "'nan' is not a finite number"),
    (["--duration", "inf"], "'inf' is not a finite number"),
    (["--duration", "-1"], "'-1' must be >= 0.1"),
    (["--duration", "1e300"], "must be <= 604800"),
])
def test_out_of_range_times_are_usage_errors(gradcli_cli, args, fragment):
    result = gradcli_cli("stress", "--scenario", "errors", *args)
    assert result.exit_code == 2
    assert fragment in one_error_line(result.stderr)
    assert result.stdout == ""


def test_scenario_names_match_the_stress_module():
    """The CLI keeps its own list (so that --help needs no NumPy): it must agree."""
    from gradcli import stress
    from gradcli.cli.cmd_stress import SCENARIOS

    assert SCENARIOS == stress.SCENARIOS


FORWARD_FAILS = """\
version: 1
tensors:
  x: {shape: [2, 3], init: normal}
  W: {shape: [3, 3], init: normal, requires_grad: true}
  y: {value: [0, 7], dtype: int64}
ops:
  - {op: matmul, inputs: [x, W], output: logits}
  - {op: cross_entropy, inputs: [logits, y], output: loss}
backward:
  roots: [loss]
"""


@pytest.mark.timeout(60)
def test_a_graph_whose_forward_fails_is_invalid_input(gradcli_cli, tmp_path):
    """Exit 2 (invalid input), not 1 (a failed check)."""
    import gradcli

    path = tmp_path / "ce.yaml"
    path.write_text(FORWARD_FAILS)
    gradcli.load(path)                      # it loads: the data only fails when run
    result = gradcli_cli("stress", path, "--iterations", "1", "--threads", "2")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    line = one_error_line(result.stderr)
    assert str(path) in line and "target class out of range" in line


SLOW = """\
version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
ops:
  - {op: delay, inputs: [x], output: d, args: {ms: 1500}}
  - {op: sum, inputs: [d], output: loss}
backward:
  roots: [loss]
"""


@pytest.mark.timeout(120)
def test_a_graph_slower_than_duration_still_runs_one_iteration(gradcli_cli, tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW)
    result = gradcli_cli("stress", path, "--threads", "1", "--iterations", "5",
                         "--duration", "0.1", "--format", "json")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    doc = json.loads(result.stdout)
    (scenario,) = doc["scenarios"]
    assert scenario["iterations"] == 1 and scenario["ok"]
    assert doc["seconds"] > doc["duration"] == 0.1
    assert scenario["p50_s"] >= 1.5          # the delay ran: a real, measured iteration
    # The table says so too.
    result = gradcli_cli("stress", path, "--threads", "1", "--duration", "0.1")
    assert result.exit_code == 0, result.stderr
    assert "over --duration 0.1s" in result.stdout
    row = next(ln for ln in result.stdout.splitlines() if ln.startswith("│ graphs"))
    assert row.split("│")[2].strip() == "1"


@pytest.mark.timeout(120)
def test_junit_report_and_unwritable_junit(gradcli_cli, tmp_path, repo_root):
    junit = tmp_path / "stress.xml"
    mlp = repo_root / "graphs" / "mlp.yaml"
    result = gradcli_cli("stress", mlp, "--iterations", "1", "--threads", "2", "--junit", junit)
    assert result.exit_code == 0, result.stderr
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "1" and root.get("failures") == "0"
    (case,) = root.iter("testcase")
    assert case.get("name") == "graphs" and case.find("failure") is None
    missing = tmp_path / "no-such-dir" / "stress.xml"
    result = gradcli_cli("stress", mlp, "--iterations", "1", "--threads", "2", "--junit", missing)
    assert result.exit_code == 2
    assert one_error_line(result.stderr).startswith(f"gradcli: error: --junit {missing}: ")


def test_junit_writer_counts_and_escapes():
    """The one JUnit writer (validate's and stress's reports both use it)."""
    from gradcli.cli import core

    suites = [core.JUnitSuite("s\x1b1", [
        core.JUnitCase("c", "ok", 0.5, system_out="pass: fine"),
        core.JUnitCase("c", "bad", 0.25, failure="first line\nsecond", failure_type="grads"),
        core.JUnitCase("c", "broken", error="GraphError: \x07bad", error_type="GraphError"),
        core.JUnitCase("c", "later", skipped="skipped: the backward failed"),
    ], file="f.yaml")]
    root = ET.fromstring(core.junit_xml("gradcli test", suites))
    assert root.get("name") == "gradcli test"
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "4", "failures": "1", "errors": "1", "skipped": "1"}
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "s\\x1b1" and suite.get("file") == "f.yaml"
    assert suite.get("time") == "0.750000"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["bad"].find("failure").get("message") == "first line"
    assert cases["bad"].find("failure").text == "first line\nsecond"
    assert cases["broken"].find("error").get("message") == "GraphError: \\x07bad"
    assert cases["later"].find("skipped") is not None
    assert cases["ok"].find("system-out").text == "pass: fine"
