"""The `gradcli` command line (click's CliRunner on gradcli.cli.main)."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from gradcli import loader
from gradcli.cli import main
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
    result = cli("run", GRAPHS / "gpu_mlp.yaml")
    if result.exit_code != 0:  # no GPU / CuPy here
        assert_one_line_error(result, 2, "gpu_mlp.yaml", "cuda=sim")


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
    assert result.exit_code == 0


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
