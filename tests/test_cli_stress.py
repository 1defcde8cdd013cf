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


# -- Ctrl-C (Note [Interrupting stress]) ----------------------------
def _start_stress(repo_root, *args):
    """`gradcli stress ...` in a child whose SIGINT is Python's default handler
    (a shell starts background jobs with SIGINT ignored, and children inherit it)."""
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(repo_root))
    return subprocess.Popen(
        [sys.executable, "-m", "gradcli", "stress", *map(str, args)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _threads_of(pid):
    from pathlib import Path

    try:
        return len(list(Path(f"/proc/{pid}/task").iterdir()))
    except OSError:
        return 0


def _interrupt_when_workers_run(proc, workers, limit=90):
    """Send SIGINT (by pid) once the stress workers run, past the reference run."""
    import signal
    import time

    deadline = time.monotonic() + limit
    while _threads_of(proc.pid) < workers + 1 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert _threads_of(proc.pid) >= workers + 1, "the stress workers never started"
    time.sleep(0.5)                        # the workers are inside their backwards
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return time.monotonic() - t0, out, err


SLOW_20S = SLOW.replace("ms: 1500", "ms: 20000")

needs_proc = pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"),
                                reason="counts the child's threads in /proc")


@needs_proc
@pytest.mark.timeout(180)
def test_ctrl_c_cancels_the_workers_backwards(tmp_path, repo_root):
    """The workers sleep in a 20 s `delay`: Ctrl-C cancels their graph tasks,
    stops the engine and exits 130 with one line (it used to wait the delay out)."""
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW_20S)
    proc = _start_stress(repo_root, path, "--threads", "4", "--duration", "30")
    elapsed, out, err = _interrupt_when_workers_run(proc, workers=4)
    assert proc.returncode == 130, (out, err)
    assert err.splitlines() == ["gradcli: interrupted"] and out == ""
    assert elapsed < 10, f"exited {elapsed:.1f}s after SIGINT (the delay is 20 s)"


HUNG = """
    import threading
    import time

    class Hang:
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            # Off the main thread (the stress workers), hang where no
            # cancellation reaches: a plain sleep.
            if threading.current_thread() is not threading.main_thread():
                time.sleep(60)
            return g
"""


@needs_proc
@pytest.mark.timeout(120)
def test_ctrl_c_is_not_held_up_by_a_hung_worker(tmp_path, repo_root):
    """A worker stuck in a node that cannot be cancelled never makes the
    process unkillable by Ctrl-C: the workers are daemons, the engine is left."""
    import textwrap

    (tmp_path / "hangmod.py").write_text(textwrap.dedent(HUNG))
    path = tmp_path / "hung.yaml"
    path.write_text("version: 1\ntensors:\n  x: {value: [1.0, 2.0], requires_grad: true}\n"
                    "ops:\n  - {op: custom, function: 'hangmod:Hang', inputs: [x], outputs: [y]}\n"
                    "  - {op: sum, inputs: [y], output: loss}\nbackward:\n  roots: [loss]\n")
    proc = _start_stress(repo_root, path, "--allow-code", "--threads", "3", "--duration", "30")
    elapsed, out, err = _interrupt_when_workers_run(proc, workers=3)
    assert proc.returncode == 130, (out, err)
    assert err.splitlines() == ["gradcli: interrupted"] and out == ""
    assert elapsed < 10, f"exited {elapsed:.1f}s after SIGINT (the hang is 60 s)"


BUDGETED = """\
version: 1
tensors:
  x: {shape: [1000], init: normal, requires_grad: true}
ops:
  - {op: exp, inputs: [x], output: e}
  - {op: sum, inputs: [e], output: loss}
backward:
  roots: [loss]
"""


@pytest.mark.timeout(120)
def test_concurrent_forwards_count_against_the_graph_budget(gradcli_cli, tmp_path):
    """Note [Concurrent forwards and the memory budget]: N threads run N forwards
    beside a reference run, so a graph that fits --max-graph-bytes once is refused
    (exit 2, one line) when N + 1 of it do not fit, and runs when they do."""
    import gradcli

    path = tmp_path / "budgeted.yaml"
    path.write_text(BUDGETED)
    forward = gradcli.load(path).forward_bytes
    assert forward == 8000 + 8000 + 8          # x, exp(x), the sum
    budget = str(3 * forward)
    result = gradcli_cli("stress", path, "--threads", "3", "--iterations", "1",
                         "--max-graph-bytes", budget)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    line = one_error_line(result.stderr)
    assert str(path) in line and "stress: stress runs 3 forwards" in line
    assert f"4 x {forward} = {4 * forward} bytes, over the memory budget of {budget}" in line
    assert result.stdout == ""
    ok = gradcli_cli("stress", path, "--threads", "2", "--iterations", "1",
                     "--max-graph-bytes", budget, "--format", "json")
    assert ok.exit_code == 0, (ok.stdout, ok.stderr)
    assert json.loads(ok.stdout)["ok"]
