"""The `gradcli` command line (click's CliRunner on gradcli.cli.main)."""
from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradcli import loader
from gradcli.cli import core, main
from gradcli.devices import to_host as _host

ROOT = pathlib.Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "graphs"
MLP = str(GRAPHS / "mlp.yaml")
MULTI_DEVICE = str(GRAPHS / "multi_device.yaml")


def cli(*args):
    # click >= 8.2: stdout in result.output/stdout, stderr apart in result.stderr.
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def run_json(*args):
    result = cli("run", *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def assert_one_line_error(result, code, *fragments):
    assert result.exit_code == code, (result.stdout, result.stderr)
    err = result.stderr
    assert "Traceback" not in err and "Traceback" not in result.stdout
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gradcli: error:"), err
    for f in fragments:
        assert f in lines[0], (f, err)
    return lines[0]


# -- run --------------------------------------------------------------------------------
def test_run_table_lists_each_gradient():
    result = cli("run", MLP)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "mlp" in out and "gradients" in out
    for name, shape in (("W1", "[4, 16]"), ("b1", "[16]"), ("W2", "[16, 3]"), ("b2", "[3]")):
        line = next((ln for ln in out.splitlines() if f" {name} " in ln), None)
        assert line is not None, (name, out)
        assert shape in line and "float64" in line and "cpu" in line
    assert "10 nodes ran" in out


def test_run_json_matches_the_results_spec_and_the_api():
    doc = run_json(MLP)
    assert set(doc) == {"graph", "grads", "order", "timing"}
    assert doc["graph"] == "mlp"
    assert set(doc["timing"]) == {"forward_s", "backward_s"}
    assert all(isinstance(v, float) and v >= 0 for v in doc["timing"].values())
    api = loader.load(MLP).run()
    assert list(doc["grads"]) == list(api.grads)
    for name, entry in doc["grads"].items():
        assert set(entry) == {"shape", "dtype", "device", "data"}
        want = _host(api.grads[name])
        assert entry["shape"] == list(want.shape)
        assert entry["dtype"] == "float64" and entry["device"] == "cpu"
        np.testing.assert_array_equal(np.array(entry["data"]), want)
    assert doc["order"] == [r.node for r in api.order]
    assert doc["order"] == loader.load(MLP).expect.order


def test_run_json_scalar_gradient_is_a_number():
    doc = run_json(GRAPHS / "broadcasting.yaml")
    assert doc["grads"]["s"]["shape"] == []
    assert doc["grads"]["s"]["data"] == pytest.approx(14.7)


def test_run_several_graphs_json_is_a_list():
    docs = run_json(GRAPHS / "diamond.yaml", GRAPHS / "retain_graph.yaml")
    assert [d["graph"] for d in docs] == ["diamond", "retain_graph"]


def test_out_npz(tmp_path):
    out = tmp_path / "g.npz"
    result = cli("run", MLP, "--out", out)
    assert result.exit_code == 0, result.stderr
    api = loader.load(MLP).run()
    with np.load(out) as npz:
        assert sorted(npz.files) == sorted(api.grads)
        for k in api.grads:
            np.testing.assert_array_equal(npz[k], _host(api.grads[k]))


def test_out_json(tmp_path):
    out = tmp_path / "g.json"
    result = cli("run", GRAPHS / "linear_regression.json", "--out", out, "--format", "json")
    assert result.exit_code == 0, result.stderr
    written = json.loads(out.read_text())
    printed = json.loads(result.stdout)
    assert written["grads"] == printed["grads"]
    assert written["order"] == printed["order"]
    np.testing.assert_allclose(written["grads"]["w"]["data"], [[-4.4], [-5.2]], rtol=1e-12)


def test_out_with_a_bad_extension_is_a_usage_error(tmp_path):
    result = cli("run", MLP, "--out", tmp_path / "g.txt")
    assert_one_line_error(result, 2, ".npz or .json")


def test_inputs_override():
    doc = run_json(MLP, "--inputs", "W2,b1")
    assert list(doc["grads"]) == ["W2", "b1"]
    full = loader.load(MLP).run()
    np.testing.assert_array_equal(np.array(doc["grads"]["W2"]["data"]), _host(full.grads["W2"]))
    # partial_inputs.yaml lists [u]; the option widens it to both branches.
    doc = run_json(GRAPHS / "partial_inputs.yaml", "--inputs", "u,v")
    assert doc["grads"]["v"]["data"] == [4.0, 5.0, 6.0]
    assert doc["grads"]["u"]["data"] == [1.0, 2.0, 3.0]


def test_retain_graph_repeat_doubles_the_gradient():
    once = run_json(GRAPHS / "retain_graph.yaml")
    twice = run_json(GRAPHS / "retain_graph.yaml", "--retain-graph", "--repeat", "2")
    np.testing.assert_allclose(twice["grads"]["x"]["data"],
                               2 * np.array(once["grads"]["x"]["data"]))
    assert twice["grads"]["x"]["data"] == [4.0, 8.0, 12.0]
    # The same on the MLP: one forward, two backwards.
    once = run_json(MLP)
    twice = run_json(MLP, "--retain-graph", "--repeat", "2")
    for k in once["grads"]:
        np.testing.assert_allclose(twice["grads"][k]["data"],
                                   2 * np.array(once["grads"][k]["data"]), rtol=1e-12)
    # Without --retain-graph, --repeat re-runs forward too: no accumulation.
    again = run_json(GRAPHS / "retain_graph.yaml", "--repeat", "2")
    assert again["grads"]["x"]["data"] == [2.0, 4.0, 6.0]


@pytest.mark.timeout(60)
def test_no_multithreading_same_gradients():
    threaded = run_json(MULTI_DEVICE)
    single = run_json(MULTI_DEVICE, "--no-multithreading")
    assert threaded["grads"].keys() == single["grads"].keys()
    for k in threaded["grads"]:
        assert single["grads"][k]["device"] == threaded["grads"][k]["device"]
        np.testing.assert_allclose(single["grads"][k]["data"], threaded["grads"][k]["data"],
                                   rtol=1e-12)
    assert threaded["grads"]["Wa"]["device"] == "sim:0"
    assert threaded["grads"]["Wb"]["device"] == "sim:1"


@pytest.mark.timeout(60)
def test_device_map_runs_the_gpu_graph_on_sim():
    doc = run_json(GRAPHS / "gpu_mlp.yaml", "--device-map", "cuda=sim")
    assert doc["grads"]["W1"]["device"] == "sim:0"
    mlp = run_json(MLP)
    for k in mlp["grads"]:
        np.testing.assert_allclose(doc["grads"][k]["data"], mlp["grads"][k]["data"], rtol=1e-12)


@pytest.mark.timeout(60)
def test_trace_has_one_lane_per_thread(tmp_path):
    trace = tmp_path / "t.json"
    result = cli("run", MULTI_DEVICE, "--trace", trace)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    runs = [e for e in events if e["ph"] == "X"]
    lanes = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(runs) == 15
    assert sorted(e["tid"] for e in lanes) == sorted({e["tid"] for e in runs})
    names = {e["args"]["name"] for e in lanes}
    assert names == {"MainThread", "gradcli-device-sim:0", "gradcli-device-sim:1"}
    lane_of = {e["tid"]: e["args"]["name"] for e in lanes}
    ops = {e["args"]["op"]: lane_of[e["tid"]] for e in runs}
    assert ops["a_delay"] == "gradcli-device-sim:0"
    assert ops["b_delay"] == "gradcli-device-sim:1"
    assert ops["join"] == "MainThread"
    for e in runs:
        assert e["dur"] >= 0 and e["ts"] >= 0


def test_trace_single_threaded_has_one_lane(tmp_path):
    trace = tmp_path / "t.json"
    result = cli("run", MLP, "--trace", trace)
    assert result.exit_code == 0, result.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    lanes = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert [e["args"]["name"] for e in lanes] == ["MainThread"]


UNUSED = """\
version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
  z: {value: [1.0, 2.0], requires_grad: true}
ops:
  - {op: sum, inputs: [x], output: loss}
backward:
  roots: [loss]
  inputs: [x, z]
  allow_unused: true
"""


def test_allow_unused_table_shows_none(tmp_path):
    path = tmp_path / "unused.yaml"
    path.write_text(UNUSED)
    result = cli("run", path)
    assert result.exit_code == 0, result.stderr
    z_row = next(ln for ln in result.stdout.splitlines() if " z " in ln)
    assert "none" in z_row


def test_allow_unused_json(tmp_path):
    path = tmp_path / "unused.yaml"
    path.write_text(UNUSED)
    result = CliRunner().invoke(main, ["run", str(path), "--format", "json"])
    assert result.exit_code == 0, result.exception
    doc = json.loads(result.stdout)
    assert doc["grads"]["x"]["data"] == [1.0, 1.0]
    assert doc["grads"]["z"] is None           # reported, as null


def test_allow_unused_npz_loads_without_pickle(tmp_path):
    path = tmp_path / "unused.yaml"
    path.write_text(UNUSED)
    out = tmp_path / "g.npz"
    result = cli("run", path, "--out", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out, allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["x"], [1.0, 1.0])
        assert "z" not in npz.files            # no gradient, no array


# -- exit codes -------------------------------------------------------------------------
def test_missing_file_exits_2(tmp_path):
    missing = tmp_path / "nope.yaml"
    assert_one_line_error(cli("run", missing), 2, str(missing))


def test_invalid_graph_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ntensors: {}\nops: []\nbackward: {roots: [q]}\n")
    line = assert_one_line_error(cli("run", bad), 2, str(bad), "'q'")
    assert ":4:" in line  # the line of `backward`


def test_unsupported_version_exits_2(tmp_path):
    bad = tmp_path / "v2.yaml"
    bad.write_text("version: 2\n")
    assert_one_line_error(cli("run", bad), 2, str(bad), "version")


def test_cuda_without_device_map_exits_2_or_runs():
    from gradcli.devices import cupy_module

    result = cli("run", GRAPHS / "gpu_mlp.yaml", "--format", "json")
    if cupy_module() is None:  # no GPU / CuPy here
        assert_one_line_error(result, 2, "gpu_mlp.yaml", "cuda=sim")
        return
    # With a GPU the graph runs there, and gives the CPU graph's gradients.
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    mlp = run_json(MLP)
    assert set(doc["grads"]) == set(mlp["grads"])
    for k in mlp["grads"]:
        assert doc["grads"][k]["device"].startswith("cuda:")
        np.testing.assert_allclose(doc["grads"][k]["data"], mlp["grads"][k]["data"], rtol=1e-10)


def test_unknown_option_exits_2():
    result = cli("run", MLP, "--bogus")
    assert result.exit_code == 2
    assert "--bogus" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_failing_backward_exits_3():
    line = assert_one_line_error(cli("run", GRAPHS / "fail.yaml"), 3, "fail.yaml",
                                 "FailBackward0", "boom", "this op always fails in backward")
    assert "node created by op ops[1] 'boom'" in line
    assert "fail.yaml:18:" in line  # the line of the `fail` op


def test_failing_backward_in_order_exits_3():
    assert_one_line_error(cli("order", GRAPHS / "fail.yaml"), 3, "FailBackward0", "boom")


def test_nan_with_detect_anomaly_exits_3():
    assert_one_line_error(cli("run", GRAPHS / "nan.yaml", "--detect-anomaly"), 3, "nan.yaml",
                          "NanBackward0", "make_nan", "returned nan values")
    result = cli("run", GRAPHS / "nan.yaml", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["grads"]["x"]["data"] == ["nan", "nan", "nan"]


# -- order ------------------------------------------------------------------------------
def test_order_table():
    result = cli("order", MLP)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "execution order" in out
    want = loader.load(MLP).expect.order
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert len(rows) == len(want)
    for row, node in zip(rows, want):
        assert node in row and "MainThread" in row
    assert "fc1_bias" in out


def test_order_json_records():
    result = cli("order", MLP, "--format", "json")
    assert result.exit_code == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["node"] for r in records] == loader.load(MLP).expect.order
    for r in records:
        assert set(r) == {"node", "op", "sequence_nr", "topological_nr", "device"}
        assert r["device"] == "cpu"
    assert records[0] == {"node": "CrossEntropyBackward0", "op": "ops[5]",
                          "sequence_nr": records[0]["sequence_nr"], "topological_nr": 6,
                          "device": "cpu"}
    acc = [r for r in records if r["node"] == "AccumulateGrad"]
    assert [r["op"] for r in acc] == ["b2", "W2", "b1", "W1"]
    assert all(r["sequence_nr"] == 2**64 - 1 and r["topological_nr"] == 0 for r in acc)
    seqs = [r["sequence_nr"] for r in records if r["node"] != "AccumulateGrad"]
    assert seqs == sorted(seqs, reverse=True)


def test_order_predicted_equals_single_threaded_run():
    predicted = json.loads(cli("order", MLP, "--predicted", "--format", "json").stdout)
    ran = json.loads(cli("order", MLP, "--no-multithreading", "--format", "json").stdout)
    strip = [{k: v for k, v in r.items() if k != "sequence_nr"} for r in predicted]
    assert strip == [{k: v for k, v in r.items() if k != "sequence_nr"} for r in ran]


def test_order_predicted_table_respects_backward_inputs():
    result = cli("order", GRAPHS / "partial_inputs.yaml", "--predicted")
    assert result.exit_code == 0, result.stderr
    assert "branch_u" in result.stdout and "branch_v" not in result.stdout


def test_order_predicted_diamond():
    # Regression: x's AccumulateGrad waits for both branches (dependency count 2).
    path = GRAPHS / "diamond.yaml"
    predicted = json.loads(cli("order", path, "--predicted", "--format", "json").stdout)
    assert [r["node"] for r in predicted] == loader.load(path).expect.order


def test_order_dot():
    result = cli("order", GRAPHS / "diamond.yaml", "--format", "dot")
    assert result.exit_code == 0, result.stderr
    out = result.stdout.strip()
    assert out.startswith('digraph "diamond" {') and out.endswith("}")
    nodes = [ln for ln in out.splitlines() if "[label=" in ln]
    edges = [ln for ln in out.splitlines() if "->" in ln]
    assert len(nodes) == 5 and len(edges) == 5
    assert any("#5 AccumulateGrad" in ln for ln in nodes)
    assert any("#1 SumBackward0" in ln for ln in nodes)


def test_order_missing_file_exits_2(tmp_path):
    assert_one_line_error(cli("order", tmp_path / "x.yaml"), 2, "x.yaml")


# -- the real console entry point ------------------------------------------------------
def test_python_m_gradcli_subprocess():
    proc = subprocess.run([sys.executable, "-m", "gradcli", "run", "graphs/mlp.yaml",
                           "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["graph"] == "mlp" and set(doc["grads"]) == {"W1", "b1", "W2", "b2"}


# -- the CLI core: start-up, the guard, output hygiene ----------------------------------------

COMMANDS = ("run", "order", "validate", "stress")
CONTROL = ("\x1b", "\x07", "\r", "\x9b")


def one_error_line(text, prefix="gradcli: error: "):
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), text
    return lines[0]


@pytest.mark.parametrize("args", [["--help"], *[[c, "--help"] for c in COMMANDS]])
def test_help_imports_no_numpy(args):
    """`gradcli --help` (and each command's) stays light: no NumPy, no engine."""
    code = ("import sys\nfrom gradcli.cli import main\n"
            f"try:\n    main({args!r}, prog_name='gradcli')\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "print('IMPORTED', sorted(m for m in ('numpy', 'yaml', 'rich', 'gradcli.autograd.engine', "
            "'gradcli.loader') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: gradcli" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "IMPORTED []", proc.stdout


def test_internal_error_is_one_line_with_exit_3(monkeypatch):
    def broken(self, path):
        raise ZeroDivisionError("a bug in gradcli")

    monkeypatch.setattr(core.LoadOptions, "load", broken)
    result = cli("run", MLP)
    assert result.exit_code == 3
    assert "Traceback" not in result.stderr + result.stdout
    line = one_error_line(result.stderr, "gradcli: internal error: ")
    assert "ZeroDivisionError: a bug in gradcli" in line and "--debug" in line
    # --debug adds the traceback, and still ends with the one line.
    result = cli("--debug", "run", MLP)
    assert result.exit_code == 3
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert "in broken" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "gradcli: internal error: ZeroDivisionError: a bug in gradcli")


@pytest.mark.parametrize("args, fragment", [
    (["run", MLP, "--bogus"], "No such option '--bogus'"),
    (["run"], "Missing argument 'GRAPHS...'"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
    (["run", MLP, "--format", "xml"], "'xml' is not one of"),
    (["run", MLP, "--repeat", "0"], "--repeat"),
    (["validate", MLP, "--eps", "nan"], "not a finite number"),
    (["run", MLP, "--trace", str(GRAPHS)], "is a directory"),
])
def test_usage_errors_are_one_line_with_exit_2(args, fragment):
    result = cli(*args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    line = one_error_line(result.stderr)
    assert fragment in line
    command = "gradcli" if args[0] not in COMMANDS else f"gradcli {args[0]}"
    assert line.endswith(f"(see '{command} --help')"), line
    assert result.stdout == ""


@pytest.mark.parametrize("args", [
    ["run", MLP, "--trace", "{missing}/t.json"],
    ["run", MLP, "--out", "{missing}/g.npz"],
    ["run", MLP, "--out", "{missing}/g.json"],
    ["validate", MLP, "--junit", "{missing}/r.xml"],
])
def test_unwritable_output_paths_are_one_line_with_exit_2(tmp_path, args):
    missing = tmp_path / "no-such-dir"
    args = [str(a).format(missing=missing) for a in args]
    result = cli(*args)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    option = next(a for a in args if a.startswith("--"))
    assert line.startswith(f"gradcli: error: {option} {missing}") and "No such file" in line


@pytest.mark.skipif(not pathlib.Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["run", MLP], ["run", MLP, "--format", "json"],
                                  ["order", MLP, "--format", "dot"], ["validate", MLP], ["--help"]])
def test_stdout_to_dev_full_is_one_line(gradcli_proc, args):
    with open("/dev/full", "w") as full:
        proc = gradcli_proc(*args, stdout=full, stderr=subprocess.PIPE)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == (
        "gradcli: error: cannot write to standard output: No space left on device")


def test_closed_stdout_is_one_line(gradcli_proc):
    proc = gradcli_proc("run", MLP, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == "gradcli: error: standard output is closed"


def test_closed_pipe_is_quiet(tmp_path):
    """`gradcli run --format json big.yaml | head -c 10`: no error, no traceback."""
    path = tmp_path / "big.yaml"
    path.write_text("version: 1\ntensors:\n  x: {shape: [300000], init: zeros, requires_grad: true}\n"
                    "ops:\n  - {op: sum, inputs: [x], output: loss}\nbackward: {roots: [loss]}\n")
    proc = subprocess.Popen([sys.executable, "-m", "gradcli", "run", str(path), "--format", "json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    # 128 + SIGPIPE as a shell reports it, or 0 where CPython's buffered writer
    # drops a write that the closed pipe cut short (then no error ever surfaces).
    assert proc.wait(timeout=60) in (0, 141)
    assert head == b'{"graph": '
    assert err == ""


@pytest.mark.timeout(60)
def test_interrupt_is_one_line_with_exit_130(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text("version: 1\ntensors:\n  x: {value: [1.0, 2.0], requires_grad: true}\n"
                    "ops:\n  - {op: delay, inputs: [x], output: d, args: {ms: 60000}}\n"
                    "  - {op: sum, inputs: [d], output: loss}\nbackward: {roots: [loss]}\n")
    proc = subprocess.Popen([sys.executable, "-m", "gradcli", "run", str(path),
                             "--no-multithreading"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # Wait until NumPy is loaded (the CLI is past start-up), then a little more.
        maps = pathlib.Path(f"/proc/{proc.pid}/maps")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and maps.exists() and "_multiarray_umath" not in maps.read_text():
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err == "gradcli: interrupted\n" and out == ""


HOSTILE = """\
version: 1
name: "[/bold]evil\\e]0;pwned\\a\\rX"
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
ops:
  - {op: exp, inputs: [x], output: e, id: "[/]\\e[31mred"}
  - {op: sum, inputs: [e], output: loss, id: "[bold]"}
backward: {roots: [loss]}
"""


@pytest.mark.parametrize("args", [["run"], ["order"], ["order", "--format", "dot"],
                                  ["order", "--predicted"], ["validate"]])
def test_markup_and_control_characters_are_shown_escaped(tmp_path, args):
    path = tmp_path / "hostile.yaml"
    path.write_text(HOSTILE)
    result = cli(args[0], path, *args[1:])
    assert result.exit_code == 0, result.stderr
    out = result.stdout + result.stderr
    for ch in CONTROL:
        assert ch not in out, (ch, out)
    assert "[/bold]evil\\x1b]0;pwned\\x07\\x0dX" in out.replace("\\\\", "\\")
    if args[0] == "order":
        assert "[/]\\x1b[31mred" in out.replace("\\\\", "\\") and "[bold]" in out


def test_fail_message_with_control_characters_is_escaped(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(GRAPHS.joinpath("fail.yaml").read_text().replace(
        '"this op always fails in backward"', '"\\e]0;owned\\a\\e[2Jboom\\rdone"'))
    result = cli("run", path)
    line = one_error_line(result.stderr)
    assert result.exit_code == 3
    # ESC and BEL are escaped; a carriage return is a line break, which
    # BackwardError folds into the one line as a space (errors._one_line).
    assert "\\x1b]0;owned\\x07\\x1b[2Jboom done" in line and "\r" not in line
    assert not any(ch in result.stderr for ch in CONTROL)


def test_long_messages_are_capped(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(GRAPHS.joinpath("fail.yaml").read_text().replace(
        '"this op always fails in backward"', '"' + "x" * 50_000 + '"'))
    result = cli("run", path)
    assert result.exit_code == 3
    line = one_error_line(result.stderr)
    assert len(line) < core.MAX_MESSAGE_CHARS + 100
    assert re.search(r"\.\.\. \(\d+ more characters\)$", line)


def test_clean_and_short_list():
    assert core.clean("a\x1b[31mb\x07\r\n\x9b\u202e\ud800ok") == (
        "a\\x1b[31mb\\x07\\x0d\\x0a\\x9b\\u202e\\ud800ok")
    assert core.clean("naïve [/bold] ✓") == "naïve [/bold] ✓"
    assert core.short_list(range(3)) == "0, 1, 2"
    assert core.short_list(range(25)) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... and 15 more"


def test_out_npz_with_names_that_are_savez_keywords(tmp_path):
    path = tmp_path / "clash.yaml"
    path.write_text("version: 1\ntensors:\n"
                    "  file: {value: [1.0, 2.0], requires_grad: true}\n"
                    "  allow_pickle: {value: [3.0], requires_grad: true}\n"
                    "  a/b: {value: 2.0, requires_grad: true}\n"
                    "ops:\n  - {op: sum, inputs: [file], output: s1}\n"
                    "  - {op: sum, inputs: [allow_pickle], output: s2}\n"
                    "  - {op: add, inputs: [s1, s2], output: s3}\n"
                    "  - {op: mul, inputs: [s3, a/b], output: loss}\n"
                    "backward: {roots: [loss]}\n")
    out = tmp_path / "g.npz"
    result = cli("run", path, "--out", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out, allow_pickle=False) as npz:
        assert sorted(npz.files) == ["a/b", "allow_pickle", "file"]
        np.testing.assert_array_equal(npz["file"], [2.0, 2.0])
        np.testing.assert_array_equal(npz["allow_pickle"], [2.0])
        assert npz["a/b"].shape == () and float(npz["a/b"]) == 6.0


def _strict_json(text):
    def refuse(token):
        raise AssertionError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_writes_non_finite_floats_as_strings(tmp_path):
    out = tmp_path / "g.json"
    result = cli("run", GRAPHS / "nan.yaml", "--format", "json", "--out", out)
    assert result.exit_code == 0, result.stderr
    for doc in (_strict_json(result.stdout), _strict_json(out.read_text())):
        assert doc["grads"]["x"]["data"] == ["nan", "nan", "nan"]
    assert core.json_safe({"a": [float("inf"), -float("inf"), 1.5, None]}) == {
        "a": ["inf", "-inf", 1.5, None]}
    with pytest.raises(ValueError):
        json.dumps(float("nan"), allow_nan=False)   # what core.dumps relies on


def test_numpy_runtime_warnings_do_not_leak(gradcli_proc, tmp_path):
    path = tmp_path / "overflow.yaml"
    path.write_text("version: 1\ntensors:\n  x: {value: [1000.0, 1.0], requires_grad: true}\n"
                    "ops:\n  - {op: exp, inputs: [x], output: e}\n"
                    "  - {op: sum, inputs: [e], output: loss}\nbackward: {roots: [loss]}\n")
    import warnings

    with warnings.catch_warnings(record=True) as caught:     # the graph does warn in NumPy
        warnings.simplefilter("always")
        loader.load(path).run(multithreading=False)
    assert any(issubclass(w.category, RuntimeWarning) for w in caught)
    proc = gradcli_proc("run", path, "--format", "json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert _strict_json(proc.stdout)["grads"]["x"]["data"] == ["inf", pytest.approx(np.e)]


def test_large_tables_print_plain_rows_with_every_row(tmp_path):
    n = core.RICH_TABLE_MAX_ROWS + 200
    ops = "".join(f"  - {{op: exp, inputs: [v{i}], output: v{i + 1}}}\n" for i in range(n))
    path = tmp_path / "chain.yaml"
    path.write_text(f"version: 1\ntensors:\n  v0: {{value: 0.0, requires_grad: true}}\nops:\n{ops}"
                    f"  - {{op: sum, inputs: [v{n}], output: loss}}\nbackward: {{roots: [loss]}}\n")
    result = cli("order", path, "--no-multithreading")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    rows = [ln for ln in lines if ln.startswith("│")]
    assert len(rows) == n + 2                          # the exps, the sum, the AccumulateGrad
    assert lines[1].startswith("┏") and lines[-1].startswith("└")
    assert len({len(ln) for ln in lines[1:]}) == 1     # columns line up
    assert rows[0].split("│")[2].strip() == "SumBackward0"
    assert rows[-1].split("│")[2].strip() == "AccumulateGrad"
    # The plain renderer draws what rich draws, for a small table.
    import io

    from rich.console import Console
    from rich.table import Table

    columns = [core.Column("name"), core.Column("value", "right")]
    rows = [["x", "1"], ["yy", "22.5"], ["naïve ✓", "-"]]
    table = Table(title="t", title_justify="left")
    for c in columns:
        table.add_column(c.name, justify=c.justify)
    for row in rows:
        table.add_row(*row)
    buf = io.StringIO()
    Console(file=buf, width=160, markup=False).print(table)
    drawn = [ln.rstrip() for ln in buf.getvalue().splitlines()]
    assert core._plain_table("t", columns, rows).splitlines() == drawn


# -- every command on the bad-input corpus ----------------------------------------------------
CORPUS = ROOT / "tests" / "bad_inputs"


def _corpus():
    import yaml

    expected = yaml.safe_load((CORPUS / "expected.yaml").read_text())
    return expected


CORPUS_EXPECTED = _corpus()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [["run"], ["order"], ["order", "--predicted"], ["validate"],
                                     ["stress", "--iterations", "1", "--threads", "2"]])
def test_every_command_on_the_bad_input_corpus(command):
    """No command prints a traceback (or a raw control character) on any bad
    file: each is one line and exit 2."""
    from gradcli.devices import cupy_module

    failures = []
    for name, entry in sorted(CORPUS_EXPECTED.items()):
        if entry.get("requires_no_cuda") and cupy_module() is not None:
            continue
        opts = []
        for key, value in entry.get("options", {}).items():
            flag = "--" + key.replace("_", "-")
            opts += [flag] if value is True else [flag, str(value)]
        result = cli(*command, CORPUS / name, *opts)
        out = result.stdout + result.stderr
        if ("Traceback" in out or result.exit_code != 2 or len(result.stderr.splitlines()) != 1
                or UNSAFE.search(out.replace("\n", ""))):
            failures.append((name, result.exit_code, result.stderr[:300]))
    assert not failures, failures


# -- property: whatever text a graph carries, what the CLI prints is inert -------------------

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
HOSTILE_TEXT = st.lists(st.sampled_from(
    ["\x1b", "\x07", "\r", "\n", "\t", "\x00", "\x9b", "\u202e", "\ud800", "[", "]", "/", "bold",
     "red", "]0;", "[/]", "\\", '"', "a", "é", "✓", " "]), min_size=1, max_size=8).map(
    lambda parts: "".join(parts) if "".join(parts).strip() else "".join(parts) + "x")


@given(HOSTILE_TEXT)
def test_clean_leaves_nothing_unsafe(text):
    out = core.clean(text)
    assert not UNSAFE.search(out)
    assert out.encode("utf-8")            # never a lone surrogate
    if not UNSAFE.search(text):
        assert out == text


@pytest.mark.timeout(300)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(name=HOSTILE_TEXT, op_id=HOSTILE_TEXT, message=HOSTILE_TEXT)
def test_graph_text_never_reaches_the_terminal_raw(tmp_path, name, op_id, message):
    doc = {"version": 1, "name": name,
           "tensors": {"x": {"value": [1.0, 2.0], "requires_grad": True}},
           "ops": [{"op": "exp", "inputs": ["x"], "output": "e", "id": op_id},
                   {"op": "fail", "inputs": ["e"], "output": "f", "id": op_id + "2",
                    "args": {"message": message}},
                   {"op": "sum", "inputs": ["f"], "output": "loss"}],
           "backward": {"roots": ["loss"]}}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))          # ensure_ascii: any string survives the file
    for args in (["order", path, "--predicted"], ["order", path, "--predicted", "--format", "dot"],
                 ["run", path], ["validate", path]):
        result = cli(*args)
        out = result.stdout + result.stderr
        assert "Traceback" not in out
        assert not UNSAFE.search(out.replace("\n", "")), (args, out)
        assert result.exit_code in (0, 1, 2, 3), (args, result.exit_code)
        if args[0] == "run" and result.exit_code != 2:    # the fail op's message, escaped
            assert result.exit_code == 3
            text = message.strip()
            if text and "\n" not in text and "\r" not in text:
                assert core.clean(text) in result.stderr


def test_max_document_bytes_bounds_the_document_and_can_be_raised():
    """The document's memory budget (spec "Size") is a flag: a small budget
    refuses the file before it is parsed, naming the flag; the default reads it."""
    result = cli("run", "graphs/mlp.yaml", "--max-document-bytes", "1000")
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "mlp.yaml" in line and "--max-document-bytes" in line
    assert cli("run", "graphs/mlp.yaml", "--max-document-bytes", str(2**30)).exit_code == 0


@pytest.mark.parametrize("inputs, problem", [
    ("[x]", "input 'x' does not require grad"),
    ("[w]", "input 'w' is not used to compute any root"),
])
def test_order_predicted_checks_backward_inputs_as_run_does(tmp_path, gradcli_cli, inputs, problem):
    # Found by scripts/fuzz_cli.py: `order --predicted` with backward.inputs naming a
    # tensor that does not require grad was "gradcli: internal error: TypeError" (exit 3)
    path = tmp_path / "g.yaml"
    path.write_text("version: 1\ntensors:\n  x: {value: [1.0, 2.0]}\n"
                    "  u: {value: [0.5, 0.5], requires_grad: true}\n"
                    "  w: {value: [0.5, 0.5], requires_grad: true}\nops:\n"
                    "  - {op: mul, inputs: [x, u], output: xu}\n"
                    "  - {op: sum, inputs: [xu], output: loss}\n"
                    f"backward: {{roots: [loss], inputs: {inputs}}}\n")
    for args in (["order", "--predicted"], ["order"], ["run"]):
        result = gradcli_cli(*args, path)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, (args, result.stderr)
        assert lines[0].startswith(f"gradcli: error: {path}:9: backward: {problem}"), (args, lines)
    path.write_text(path.read_text().replace(f"inputs: {inputs}", "inputs: [u]"))
    result = gradcli_cli("order", "--predicted", path)
    assert result.exit_code == 0 and "MulBackward0" in result.stdout


@pytest.mark.timeout(60)
def test_json_of_an_empty_gradient_with_huge_leading_dims_is_refused(tmp_path, gradcli_cli):
    # Found by scripts/fuzz_cli.py: a [4, 2**31, 6, 0] leaf takes no memory, but its JSON
    # data nests 6e10 empty lists: MemoryError, "gradcli: internal error" (exit 3)
    path = tmp_path / "g.yaml"
    path.write_text("version: 1\ntensors:\n  t0: {shape: [4, 2147483648, 6, 0], init: normal, "
                    "requires_grad: true}\nops:\n  - {op: log, inputs: [t0], output: o0}\n"
                    "  - {op: sum, inputs: [o0], output: loss}\nbackward: {roots: [loss]}\n")
    result = gradcli_cli("run", "--format", "json", path)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"gradcli: error: {path}: gradient 't0': the gradient of shape [4, 2147483648, 6, 0] has "
        "no element, but its JSON data would nest 60129542148 empty lists (over 1000000): use "
        "--format table or --out FILE.npz"]
    assert gradcli_cli("run", path).exit_code == 0
    # an empty gradient with few lists, and a full one with many, are written
    path.write_text(path.read_text().replace("[4, 2147483648, 6, 0]", "[3, 0]"))
    assert json.loads(gradcli_cli("run", "--format", "json", path).stdout)["grads"]["t0"]["data"] \
        == [[], [], []]
    path.write_text(path.read_text().replace("[3, 0]", "[1100000, 1]"))
    data = json.loads(gradcli_cli("run", "--format", "json", path).stdout)["grads"]["t0"]["data"]
    assert len(data) == 1100000
