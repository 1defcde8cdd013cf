"""--jobs N: spawned worker processes give the serial run's verdicts, output and
exit code, in input order; Ctrl-C stops every worker; nothing extra when piped."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from gradcli import parallel

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "graphs").rglob("*.yaml")
                  if p.name != "fail.yaml") + ["graphs/linear_regression.json"]


def _verdicts(doc):
    """validate's JSON without the timings."""
    return [(f["file"], f["status"], f["error"],
             [(c["name"], c["status"], c["message"], c["max_abs_err"]) for c in f["checks"]])
            for f in doc["files"]] + [doc["exit_code"]]


def _untimed(text):
    import re

    return re.sub(r"forward [0-9.]+ ms, backward [0-9.]+ ms", "", text)


def _wrong_expectation(tmp_path):
    bad = tmp_path / "wrong.yaml"
    bad.write_text((ROOT / "graphs" / "diamond.yaml").read_text().replace(
        "x: {value: [5.0, 7.0, 9.0]}", "x: {value: [5.0, 7.5, 9.0]}"))
    return str(bad)


@pytest.mark.timeout(300)
def test_validate_jobs_gives_the_serial_verdicts(gradcli_proc, tmp_path):
    files = EXAMPLES + [_wrong_expectation(tmp_path), "tests/parallel_graphs/missing.yaml"]
    serial = gradcli_proc("validate", "--format", "json", *files)
    jobs = gradcli_proc("validate", "--jobs", "2", "--format", "json", *files)
    assert serial.returncode == jobs.returncode == 2     # a missing file is invalid input
    assert _verdicts(json.loads(jobs.stdout)) == _verdicts(json.loads(serial.stdout))
    assert jobs.stderr == serial.stderr                   # the same error lines, same order
    assert [f["file"] for f in json.loads(jobs.stdout)["files"]] == files


@pytest.mark.timeout(300)
def test_validate_jobs_table_and_junit_match_serial(gradcli_proc, tmp_path):
    import re

    files = ["graphs/diamond.yaml", _wrong_expectation(tmp_path), "graphs/mlp.yaml"]
    out = {}
    for mode, extra in (("serial", []), ("jobs", ["-j", "2"])):
        junit = tmp_path / f"{mode}.xml"
        proc = gradcli_proc("validate", *extra, "--junit", junit, *files)
        assert proc.returncode == 1, proc.stderr       # a check failed: exit 1 both ways
        xml = re.sub(r'time="[0-9.]+"', "", junit.read_text())
        out[mode] = (proc.stdout, xml)
    assert out["jobs"] == out["serial"]
    assert "grads[x]: gradient of 'x' differs from expect.grads" in out["jobs"][0]


@pytest.mark.timeout(300)
def test_run_jobs_prints_the_serial_output_and_stops_where_it_stops(gradcli_proc):
    files = ["graphs/mlp.yaml", "graphs/diamond.yaml", "graphs/gpu_mlp.yaml",
             "graphs/broadcasting.yaml"]
    serial = gradcli_proc("run", *files)
    jobs = gradcli_proc("run", "--jobs", "2", *files)
    assert serial.returncode == jobs.returncode == 2      # gpu_mlp needs a GPU: invalid
    assert _untimed(jobs.stdout) == _untimed(serial.stdout)
    assert "broadcasting" not in jobs.stdout               # after the failing file: nothing
    assert jobs.stderr == serial.stderr
    js = gradcli_proc("run", "-j", "2", "--format", "json", "graphs/diamond.yaml",
                      "graphs/mlp.yaml")
    ser = gradcli_proc("run", "--format", "json", "graphs/diamond.yaml", "graphs/mlp.yaml")
    assert js.returncode == ser.returncode == 0
    grads = lambda text: [(d["graph"], d["grads"]) for d in json.loads(text)]  # noqa: E731
    assert grads(js.stdout) == grads(ser.stdout)


@pytest.mark.timeout(300)
def test_stress_graphs_jobs(gradcli_proc):
    ok = gradcli_proc("stress", "--jobs", "2", "--threads", "2", "--iterations", "2",
                      "--duration", "5", "--format", "json", "graphs/diamond.yaml",
                      "graphs/mlp.yaml")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    [row] = doc["scenarios"]
    assert row["scenario"] == "graphs" and row["ok"] and row["iterations"] == 4
    bad = gradcli_proc("stress", "-j", "2", "--duration", "2", "graphs/diamond.yaml",
                       "graphs/gpu_mlp.yaml")
    serial = gradcli_proc("stress", "--duration", "2", "graphs/diamond.yaml",
                          "graphs/gpu_mlp.yaml")
    assert bad.returncode == serial.returncode == 2
    assert bad.stderr.splitlines()[-1] == serial.stderr.splitlines()[-1]
    assert "gpu_mlp.yaml" in bad.stderr.splitlines()[-1]


def test_jobs_and_scheduler_together_is_a_usage_error(gradcli_cli):
    res = gradcli_cli("validate", "-j", "2", "--scheduler", "tcp://127.0.0.1:1",
                      "graphs/diamond.yaml")
    assert res.exit_code == 2
    assert "--jobs and --scheduler cannot be given together" in res.stderr


def test_jobs_zero_means_one_per_core():
    assert parallel.resolve_jobs(0) == parallel.cpu_count() >= 1
    assert parallel.resolve_jobs(2) == 2


def _square(x):
    return x * x


def _fails_or_dies(x):
    if x == 1:
        raise ValueError("one is refused")
    if x == 2:
        os._exit(7)               # the worker dies mid-task
    return x


def _seen_in_worker(name):
    """What a worker sees of the parent: under spawn, nothing it set at run time."""
    import multiprocessing

    return hasattr(parallel, name), multiprocessing.current_process().name != "MainProcess"


@pytest.mark.timeout(120)
def test_map_ordered_keeps_input_order_and_reports_errors_and_lost_workers():
    done = []
    outs = parallel.map_ordered(_fails_or_dies, [(k,) for k in range(6)], 2,
                                on_done=lambda n, total: done.append((n, total)))
    assert [o.value for o in outs] == [0, None, None, 3, 4, 5]
    assert isinstance(outs[1].error, ValueError) and "one is refused" in str(outs[1].error)
    assert isinstance(outs[2].error, parallel.WorkerLost)
    assert "(2,)" in str(outs[2].error) and "exit code 7" in str(outs[2].error)
    assert done == [(k, 6) for k in range(1, 7)]
    with pytest.raises(ValueError):
        outs[1].get()
    assert [o.get() for o in parallel.map_ordered(_square, [(k,) for k in range(20)], 2)] == [
        k * k for k in range(20)]


@pytest.mark.timeout(120)
def test_workers_are_spawned_not_forked():
    """Note [Spawned workers only]: a forked worker would see what the parent set."""
    parallel._set_by_the_parent = True
    try:
        [out] = parallel.map_ordered(_seen_in_worker, [("_set_by_the_parent",)], 1)
    finally:
        del parallel._set_by_the_parent
    assert out.get() == (False, True)


def _children(pid):
    out = set()
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return out


def _alive(pid):
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(120)
@pytest.mark.skipif(not pathlib.Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_ctrl_c_stops_every_worker(tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text("version: 1\nname: slow\ntensors:\n  x: {value: [1.0], requires_grad: true}\n"
                    "ops:\n  - {op: delay, inputs: [x], output: y, args: {ms: 30000}}\n"
                    "  - {op: sum, inputs: [y], output: loss}\nbackward: {roots: [loss]}\n"
                    "expect:\n  grads:\n    x: {value: [1.0]}\n")
    proc = subprocess.Popen([sys.executable, "-m", "gradcli", "validate", "--jobs", "2",
                             str(slow), str(slow), str(slow)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        workers = set()
        while len(workers) < 2:         # bounded by the test's timeout
            assert proc.poll() is None, proc.communicate()
            workers = {c for c in _children(proc.pid)
                       if b"spawn_main" in pathlib.Path(f"/proc/{c}/cmdline").read_bytes()}
            time.sleep(0.05)
        time.sleep(1.0)                 # let them start their 30 s backwards
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "gradcli: interrupted" in err
    assert "Traceback" not in err
    assert not [w for w in workers if _alive(w)]


@pytest.mark.timeout(300)
def test_nothing_extra_on_a_pipe_and_a_bar_on_a_terminal(gradcli_proc):
    piped = gradcli_proc("validate", "-j", "2", "graphs/diamond.yaml", "graphs/mlp.yaml")
    assert piped.returncode == 0 and piped.stderr == ""
    import pty

    master, slave = pty.openpty()
    try:
        proc = gradcli_proc("validate", "-j", "2", "graphs/diamond.yaml", "graphs/mlp.yaml",
                            stdout=subprocess.PIPE, stderr=slave, env={"COLUMNS": "100"})
        os.close(slave)
        slave = None
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0
    assert b"validate" in b"".join(chunks)          # the bar's label, on the terminal only
    assert "validate" not in piped.stderr


def _on_a_terminal(monkeypatch, fn):
    """Run ``fn()`` with sys.stderr a terminal (a pty); return what it showed there."""
    import io
    import pty

    master, slave = pty.openpty()
    tty = io.TextIOWrapper(io.FileIO(slave, "w", closefd=True), write_through=True)
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setenv("COLUMNS", "100")
    try:
        fn()
    finally:
        tty.close()
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.timeout(60)
def test_a_large_graphs_load_shows_a_status_on_a_terminal_only(monkeypatch):
    from gradcli.cli import core

    monkeypatch.setattr(core, "LOAD_STATUS_BYTES", 1)       # every file counts as large
    shown = _on_a_terminal(monkeypatch, lambda: core.LoadOptions().load("graphs/diamond.yaml"))
    assert "loading graphs/diamond.yaml" in shown
    import io

    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    core.LoadOptions().load("graphs/diamond.yaml")
    assert piped.getvalue() == ""


def test_jobs_where_it_does_not_apply_is_a_usage_error(gradcli_cli):
    res = gradcli_cli("stress", "--jobs", "2", "--scenario", "errors")
    assert res.exit_code == 2
    assert "--jobs and --scheduler stress GRAPHS" in res.stderr
    res = gradcli_cli("validate", "--jobs", "2", "--against", "torch", "graphs/diamond.yaml")
    assert res.exit_code == 2
    assert "not available with --against torch" in res.stderr
    res = gradcli_cli("validate", "--jobs", "-1", "graphs/diamond.yaml")
    assert res.exit_code == 2
