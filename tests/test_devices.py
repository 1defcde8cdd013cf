"""Multi-device backwards: cpu, simulated accelerators ``sim:N`` and (if present) ``cuda:N``.

What is checked, following ``torch/csrc/autograd/engine.cpp``:

* a graph spread over cpu, sim:0 and sim:1 (``to`` ops) gives the gradients of
  the same computation on the CPU alone, with and without multithreading;
* every gradient lands on its leaf's device (a sim:1 leaf gets a SimArray tagged
  sim:1);
* each node runs on the thread of its device (sim:N nodes on the thread named
  ``gradcli-device-sim:N``, CPU nodes on the calling thread), or all on the
  calling thread with multithreading disabled;
* ``validate_outputs``' device rule: a gradient on the wrong device fails, a
  0-dim one is moved;
* a device thread that completes a graph task wakes its owner;
* the Chrome trace has one lane per thread that ran nodes.

Every test that runs a backward uses its own ``Engine()`` and stops it after.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from time import perf_counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradcli
import gradcli.ops  # noqa: F401 - registers the ops and the Tensor operators
from gradcli.autograd import Engine, Node, Tensor, backward, grad, set_multithreading_enabled
from gradcli.autograd.node import InputMetadata
from gradcli.devices import (CPU, SimArray, cupy_module, device, device_of, reduce_mean, reduce_sum,
                             sim_device_count, to_device)
from gradcli.ops import OPS

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(sim_device_count() < 2, reason="needs GRADCLI_SIM_DEVICES >= 2")


# -- helpers -----------------------------------------------------------------------------
@pytest.fixture
def engine():
    eng = Engine()
    yield eng
    eng.stop()


def thread_names():
    return {t.ident: t.name for t in threading.enumerate()}


def expected_thread_name(index):
    cp = cupy_module()
    if cp is not None and index < cp.cuda.runtime.getDeviceCount():
        return f"gradcli-device-cuda:{index}+sim:{index}"
    return f"gradcli-device-sim:{index}"


def host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def place(array, dev):
    """``array`` (NumPy) copied onto device string ``dev``."""
    return to_device(array, device(dev))


def build_mlp(devs, seed=0):
    """A small net spread over devices; ``devs`` maps each stage to a device string.

    x (devs['x']) -> to(d0) -> @ W0 (d0) -> tanh -> to(d1) -> @ W1 (d1) -> + b1 (d1)
      -> to(dl) -> square -> sum        and a skip branch  x -> to(d1) -> sum  added
    on dl, so the CPU leaf x receives gradients from two devices.
    Returns (loss, {name: leaf Tensor}).
    """
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((3, 4))
    w0 = rng.standard_normal((4, 5))
    w1 = rng.standard_normal((5, 2))
    b1 = rng.standard_normal((2,))
    leaves = {
        "x": Tensor(place(xs, devs["x"]), requires_grad=True, name="x"),
        "W0": Tensor(place(w0, devs["d0"]), requires_grad=True, name="W0"),
        "W1": Tensor(place(w1, devs["d1"]), requires_grad=True, name="W1"),
        "b1": Tensor(place(b1, devs["d1"]), requires_grad=True, name="b1"),
    }
    to = OPS["to"]
    h = to(leaves["x"], device=devs["d0"])
    h = OPS["tanh"](OPS["matmul"](h, leaves["W0"]))
    h = to(h, device=devs["d1"])
    h = OPS["add"](OPS["matmul"](h, leaves["W1"]), leaves["b1"])
    h = to(h, device=devs["dl"])
    main = OPS["sum"](OPS["square"](h))
    skip = to(OPS["sum"](OPS["mul"](to(leaves["x"], device=devs["d1"]),
                                    to(leaves["x"], device=devs["d1"]))), device=devs["dl"])
    loss = OPS["add"](main, skip)
    return loss, leaves


MULTI = {"x": "cpu", "d0": "sim:0", "d1": "sim:1", "dl": "cpu"}
ALL_CPU = {"x": "cpu", "d0": "cpu", "d1": "cpu", "dl": "cpu"}


def reference_grads(seed=0):
    loss, leaves = build_mlp(ALL_CPU, seed)
    eng = Engine()
    try:
        backward([loss], engine=eng)
    finally:
        eng.stop()
    assert eng.device_threads == []
    return {k: v.grad for k, v in leaves.items()}


def assert_grads_close(leaves, ref):
    for name, t in leaves.items():
        assert t.grad is not None, name
        np.testing.assert_allclose(host(t.grad), ref[name], rtol=1e-12, atol=1e-12, err_msg=name)


def assert_on_leaf_devices(leaves):
    for name, t in leaves.items():
        dev = device_of(t.data)
        assert device_of(t.grad) is dev, f"{name}: grad on {device_of(t.grad)}, leaf on {dev}"
        if dev.type == "sim":
            assert type(t.grad) is SimArray and t.grad.gradcli_device is dev, name
        elif dev is CPU:
            assert type(t.grad) is np.ndarray, f"{name}: {type(t.grad)}"


# -- gradients and where they land ---------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize("devs", [
    MULTI,
    {"x": "sim:0", "d0": "sim:0", "d1": "sim:1", "dl": "sim:1"},
    {"x": "sim:1", "d0": "cpu", "d1": "sim:0", "dl": "sim:1"},
], ids=["cpu-sim0-sim1-cpu", "sim0-sim1-sim1", "sim1-cpu-sim0-sim1"])
@pytest.mark.parametrize("multithreading", [True, False], ids=["mt", "single-thread"])
def test_multi_device_grads_match_cpu(engine, devs, multithreading):
    ref = reference_grads()
    loss, leaves = build_mlp(devs)
    assert device_of(loss.data) is device(devs["dl"])
    with set_multithreading_enabled(multithreading):
        backward([loss], engine=engine)
    assert_grads_close(leaves, ref)
    assert_on_leaf_devices(leaves)
    if multithreading:
        assert len(engine.device_threads) == sim_device_count()
    else:
        assert engine.device_threads == [], "multithreading disabled must start no device thread"


@pytest.mark.timeout(30)
def test_grad_api_returns_grads_on_input_devices(engine):
    ref = reference_grads()
    loss, leaves = build_mlp(MULTI)
    names = ["x", "W0", "W1", "b1"]
    result = grad([loss], [leaves[n] for n in names], engine=engine)
    for name, g in zip(names, result):
        assert device_of(g) is device_of(leaves[name].data), name
        np.testing.assert_allclose(host(g), ref[name], rtol=1e-12, atol=1e-12, err_msg=name)
    assert all(t.grad is None for t in leaves.values()), "grad() must not accumulate"


@pytest.mark.timeout(30)
def test_repeated_backward_accumulates_on_device(engine):
    ref = reference_grads()
    loss, leaves = build_mlp(MULTI)
    backward([loss], retain_graph=True, engine=engine)
    backward([loss], engine=engine)
    for name, t in leaves.items():
        np.testing.assert_allclose(host(t.grad), 2 * ref[name], rtol=1e-12, err_msg=name)
    assert_on_leaf_devices(leaves)


@pytest.mark.timeout(30)
def test_multiple_roots_on_different_devices(engine):
    rng = np.random.default_rng(3)
    a_np, b_np = rng.standard_normal(4), rng.standard_normal(4)

    def run(dev_a, dev_b, eng):
        a = Tensor(place(a_np, dev_a), requires_grad=True)
        b = Tensor(place(b_np, dev_b), requires_grad=True)
        ra = OPS["sum"](OPS["sin"](a))
        rb = OPS["sum"](OPS["mul"](b, b))
        backward([ra, rb], engine=eng)
        return a, b

    ca, cb = run("cpu", "cpu", engine)
    sa, sb = run("sim:0", "sim:1", engine)
    np.testing.assert_allclose(host(sa.grad), ca.grad, rtol=1e-12)
    np.testing.assert_allclose(host(sb.grad), cb.grad, rtol=1e-12)
    assert device_of(sa.grad) is device("sim:0")
    assert device_of(sb.grad) is device("sim:1")


@pytest.mark.timeout(30)
def test_root_grad_follows_root_device(engine):
    x = Tensor(place(np.arange(3.0), "sim:1"), requires_grad=True)
    y = OPS["mul"](x, x)
    backward([y], [place(np.ones(3), "sim:1")], engine=engine)
    np.testing.assert_allclose(host(x.grad), 2 * np.arange(3.0))
    assert device_of(x.grad) is device("sim:1")


# -- which thread ran each node ------------------------------------------------------------
@pytest.mark.timeout(30)
def test_nodes_run_on_their_device_threads(engine):
    loss, _ = build_mlp(MULTI)
    trace = []
    caller = threading.get_ident()
    backward([loss], engine=engine, trace=trace)
    names = thread_names()
    assert {rec[0].device for rec in trace} >= {CPU, device("sim:0"), device("sim:1")}
    seen = set()
    for fn, ident, t0, t1, graph_task, depth in trace:
        assert t1 is not None and t1 >= t0
        assert depth == 0
        if fn.device is CPU:
            assert ident == caller, f"{fn.name} on cpu ran on {names.get(ident)}"
        else:
            assert names.get(ident) == expected_thread_name(fn.device.index), (
                f"{fn.name} on {fn.device} ran on {names.get(ident)}")
            seen.add(names[ident])
    assert seen == {expected_thread_name(0), expected_thread_name(1)}
    assert len({rec[4] for rec in trace}) == 1, "one graph task"


@pytest.mark.timeout(30)
def test_multithreading_disabled_runs_everything_on_caller(engine):
    loss, leaves = build_mlp(MULTI)
    trace = []
    with set_multithreading_enabled(False):
        backward([loss], engine=engine, trace=trace)
    assert trace and {rec[1] for rec in trace} == {threading.get_ident()}
    assert engine.device_threads == []
    assert_on_leaf_devices(leaves)


@pytest.mark.timeout(30)
def test_backward_from_non_main_thread_runs_cpu_nodes_on_that_thread(engine):
    loss, leaves = build_mlp(MULTI)
    trace, errors, idents = [], [], []

    def work():
        idents.append(threading.get_ident())
        try:
            backward([loss], engine=engine, trace=trace)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    th = threading.Thread(target=work, name="caller")
    th.start()
    th.join(20)
    assert not th.is_alive() and not errors
    cpu_threads = {rec[1] for rec in trace if rec[0].device is CPU}
    assert cpu_threads == {idents[0]}
    assert_grads_close(leaves, reference_grads())


# -- validate_outputs: the device rule -------------------------------------------------------
class ConstBackward(Node):
    """A hand-made node that returns a fixed gradient for its one input."""

    def __init__(self, next_edge, out_meta, grad_out):
        super().__init__("ConstBackward", [next_edge], [out_meta])
        self.grad_out = grad_out

    def apply(self, grads):
        return [self.grad_out]


def custom_output(leaf_tensor, out_data, grad_out):
    """A Tensor ``out_data`` whose grad_fn sends ``grad_out`` to ``leaf_tensor``."""
    node = ConstBackward(leaf_tensor.gradient_edge(), InputMetadata.of(out_data), grad_out)
    out = Tensor(out_data, requires_grad=True)
    out.grad_fn = node
    out.output_nr = 0
    return out


@pytest.mark.timeout(30)
@pytest.mark.parametrize("multithreading", [True, False], ids=["mt", "single-thread"])
@pytest.mark.parametrize("leaf_dev,grad_dev", [("sim:0", "cpu"), ("cpu", "sim:0"),
                                               ("sim:0", "sim:1")])
def test_wrong_device_gradient_is_rejected(engine, leaf_dev, grad_dev, multithreading):
    leaf_t = Tensor(place(np.zeros(3), leaf_dev), requires_grad=True)
    out = custom_output(leaf_t, place(np.zeros(3), "sim:0"), place(np.ones(3), grad_dev))
    msg = (f"Function ConstBackward returned an invalid gradient at index 0 - "
           f"expected device {leaf_dev} but got {grad_dev}")
    with set_multithreading_enabled(multithreading):
        with pytest.raises(RuntimeError) as info:
            backward([out], [place(np.ones(3), "sim:0")], engine=engine)
    assert str(info.value) == msg
    assert leaf_t.grad is None


@pytest.mark.timeout(30)
@pytest.mark.parametrize("leaf_dev,grad_dev", [("sim:0", "cpu"), ("cpu", "sim:1"),
                                               ("sim:1", "sim:0")])
def test_zero_dim_gradient_is_moved(engine, leaf_dev, grad_dev):
    leaf_t = Tensor(place(np.array(1.5), leaf_dev), requires_grad=True)
    out = custom_output(leaf_t, place(np.array(0.0), "sim:1"), place(np.array(2.5), grad_dev))
    backward([out], engine=engine)
    assert device_of(leaf_t.grad) is device(leaf_dev)
    assert host(leaf_t.grad) == 2.5
    if leaf_dev == "cpu":
        assert type(leaf_t.grad) is np.ndarray


@pytest.mark.timeout(30)
def test_root_gradient_on_wrong_device_is_rejected(engine):
    x = Tensor(place(np.arange(3.0), "sim:0"), requires_grad=True)
    y = OPS["mul"](x, x)
    with pytest.raises(RuntimeError,
                       match=r"^invalid gradient at index 0 - expected device sim:0 but got cpu$"):
        backward([y], [np.ones(3)], engine=engine)
    # A 0-dim root gradient is moved onto the root's device.
    s = OPS["sum"](y)
    backward([s], [np.array(1.0)], engine=engine)
    assert device_of(x.grad) is device("sim:0")
    np.testing.assert_allclose(host(x.grad), 2 * np.arange(3.0))


@pytest.mark.timeout(30)
def test_error_on_device_thread_reaches_caller_and_engine_keeps_working(engine):
    x = Tensor(place(np.ones(3), "sim:0"), requires_grad=True)
    y = OPS["sum"](OPS["fail"](OPS["mul"](x, x), message="boom on sim"))
    with pytest.raises(Exception, match="boom on sim"):
        backward([y], engine=engine)
    y2 = OPS["sum"](OPS["mul"](x, x))
    backward([y2], engine=engine)
    np.testing.assert_allclose(host(x.grad), 2 * np.ones(3))


# -- wake-up of the owner ---------------------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize("root_dev", ["cpu", "sim:0"])
def test_device_thread_completing_graph_task_wakes_owner(engine, root_dev):
    """The last node (the sim leaf's AccumulateGrad) runs on sim:1: its thread completes the
    graph task and must wake the caller asleep on its CPU queue."""
    for i in range(20):
        w = Tensor(place(np.full(4, float(i)), "sim:1"), requires_grad=True)
        h = OPS["mul"](w, w)
        h = OPS["to"](OPS["sum"](h), device=root_dev)
        trace = []
        done = threading.Event()
        errors = []

        def work():
            try:
                backward([h], engine=engine, trace=trace)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
            done.set()

        th = threading.Thread(target=work, daemon=True)
        th.start()
        assert done.wait(10), "owner was not woken after a device thread completed its graph task"
        assert not errors
        np.testing.assert_allclose(host(w.grad), 2 * np.full(4, float(i)))
        last = max(trace, key=lambda r: r[3])
        assert last[0].device is device("sim:1")


@pytest.mark.timeout(30)
def test_all_sim_graph_completes_and_grads_stay_on_device(engine):
    for k in range(3):
        w = Tensor(place(np.arange(4.0) + k, "sim:0"), requires_grad=True)
        loss = OPS["sum"](OPS["delay"](OPS["mul"](w, w), ms=5))
        backward([loss], engine=engine)
        assert device_of(w.grad) is device("sim:0")
        np.testing.assert_allclose(host(w.grad), 2 * (np.arange(4.0) + k))


# -- graph files and the Chrome trace ---------------------------------------------------------
MULTI_YAML = """
version: 1
name: multi
seed: 1
tensors:
  x:  {shape: [3, 4], init: normal, requires_grad: true}
  W0: {shape: [4, 5], init: normal, requires_grad: true, device: cuda:0}
  W1: {shape: [5, 2], init: normal, requires_grad: true, device: cuda:1}
ops:
  - {op: to, inputs: [x], output: x0, device: cuda:0}
  - {op: matmul, inputs: [x0, W0], output: h0}
  - {op: tanh, inputs: [h0], output: a0}
  - {op: to, inputs: [a0], output: a1, device: cuda:1}
  - {op: matmul, inputs: [a1, W1], output: h1}
  - {op: to, inputs: [h1], output: hc, device: cpu}
  - {op: square, inputs: [hc], output: sq}
  - {op: sum, inputs: [sq], output: loss}
backward:
  roots: [loss]
"""


def load_multi(device_map):
    return gradcli.loads(MULTI_YAML, device_map=device_map)


@pytest.mark.timeout(30)
def test_graph_file_device_map_cuda_to_sim(engine):
    cpu = load_multi({"cuda": "cpu"}).run(engine=engine)
    sim = load_multi({"cuda": "sim"}).run(engine=engine)
    single = load_multi({"cuda": "sim"}).run(engine=engine, multithreading=False)
    for name in ("x", "W0", "W1"):
        np.testing.assert_allclose(host(sim.grads[name]), cpu.grads[name], rtol=1e-12)
        np.testing.assert_allclose(host(single.grads[name]), cpu.grads[name], rtol=1e-12)
    assert device_of(sim.grads["W0"]) is device("sim:0")
    assert device_of(sim.grads["W1"]) is device("sim:1")
    assert device_of(sim.grads["x"]) is CPU
    threads = {r.device: r.thread for r in sim.order}
    assert threads["sim:0"] == expected_thread_name(0)
    assert threads["sim:1"] == expected_thread_name(1)
    assert threads["cpu"] == threading.current_thread().name
    assert {r.thread for r in single.order} == {threading.current_thread().name}


def check_chrome_trace(doc, expect_threads):
    json.loads(json.dumps(doc))            # serializable
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    xs = [e for e in events if e["ph"] == "X"]
    assert xs
    lanes = {e["tid"]: e["args"]["name"] for e in meta}
    assert len(lanes) == len(meta), "one thread_name event per lane"
    assert sorted(lanes.values()) == sorted(set(lanes.values())), "one lane per thread"
    assert {e["tid"] for e in xs} == set(lanes), "every lane ran nodes, every node has a lane"
    assert set(lanes.values()) == set(expect_threads)
    for e in xs:
        assert {"op", "graph_task", "reentrant_depth"} <= set(e["args"])
        assert e["dur"] >= 0 and e["ts"] >= 0
        if e["args"].get("device", "").startswith("sim:"):
            idx = int(e["args"]["device"].split(":")[1])
            assert lanes[e["tid"]] == expected_thread_name(idx)
    return lanes, xs


@pytest.mark.timeout(30)
def test_chrome_trace_of_multi_device_run(engine):
    from gradcli.trace import chrome_trace

    result = load_multi({"cuda": "sim"}).run(engine=engine)
    lanes, xs = check_chrome_trace(chrome_trace(result), {r.thread for r in result.order})
    assert set(lanes.values()) == {threading.current_thread().name, expected_thread_name(0),
                                   expected_thread_name(1)}
    assert len(xs) == len(result.order)
    assert {e["args"]["op"] for e in xs} >= {"W0", "W1"}   # AccumulateGrad's op id: the leaf


@pytest.mark.timeout(30)
def test_chrome_trace_with_reentrant_pool_thread(engine):
    from gradcli.trace import chrome_trace

    # The loader does not take `reenter` yet: build the graph with the API and make the
    # Result from the engine's trace records.
    from gradcli.graph import NodeRun, Result

    x = Tensor(place(np.arange(3.0), "sim:0"), requires_grad=True, name="x")
    loss = OPS["sum"](OPS["reenter"](x, depth=3))
    trace = []
    t0 = perf_counter()
    backward([loss], engine=engine, trace=trace)
    names = thread_names()
    order = [NodeRun(node=fn.name, op=fn.metadata.get("op_id"), sequence_nr=fn.sequence_nr,
                     topological_nr=fn.topological_nr, device=str(fn.device),
                     thread=names.get(tid, str(tid)), graph_task=gt, depth=depth,
                     start_s=start - t0, end_s=end - t0)
             for fn, tid, start, end, gt, depth in trace]
    result = Result("reent", {"x": x.grad}, order, 0.0, perf_counter() - t0)
    lanes, xs = check_chrome_trace(chrome_trace(result), {r.thread for r in result.order})
    assert max(e["args"]["reentrant_depth"] for e in xs) == 3
    assert len({e["args"]["graph_task"] for e in xs}) == 4
    np.testing.assert_allclose(host(result.grads["x"]), np.ones(3))


@pytest.mark.timeout(30)
def test_cli_trace_of_multi_device_yaml(tmp_path):
    path = REPO / "graphs" / "multi_device.yaml"
    out = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "gradcli", "run", str(path), "--device-map",
                           "cuda=sim", "--trace", str(out)], capture_output=True, text=True,
                          timeout=25, cwd=REPO, env={**os.environ, "GRADCLI_SIM_DEVICES": "4"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    xs = [e for e in events if e["ph"] == "X"]
    lanes = {e["tid"]: e["args"]["name"] for e in meta}
    assert len(lanes) == len(meta) == len(set(lanes.values()))
    assert {e["tid"] for e in xs} == set(lanes)
    assert {expected_thread_name(0), expected_thread_name(1), "MainThread"} <= set(lanes.values()), lanes
    for e in xs:
        assert {"op", "graph_task", "reentrant_depth"} <= set(e["args"])


# -- CUDA through CuPy ----------------------------------------------------------------------
@pytest.fixture
def cuda():
    pytest.importorskip("cupy")
    cp = cupy_module()
    if cp is None:
        pytest.skip("CuPy is installed but sees no CUDA GPU")
    return cp


@pytest.mark.gpu
@pytest.mark.timeout(30)
@pytest.mark.parametrize("multithreading", [True, False], ids=["mt", "single-thread"])
def test_cuda_graph_matches_cpu(engine, cuda, multithreading):
    ref = reference_grads()
    loss, leaves = build_mlp({"x": "cpu", "d0": "cuda:0", "d1": "cuda:0", "dl": "cpu"})
    trace = []
    with set_multithreading_enabled(multithreading):
        backward([loss], engine=engine, trace=trace)
    assert_grads_close(leaves, ref)
    for name, t in leaves.items():
        assert device_of(t.grad) is device_of(t.data), name
    assert type(leaves["W0"].grad).__module__.startswith("cupy")
    names = thread_names()
    for fn, ident, *_ in trace:
        if fn.device.type == "cuda" and multithreading:
            assert names[ident] == expected_thread_name(fn.device.index)
        elif fn.device is CPU or not multithreading:
            assert ident == threading.get_ident()


@pytest.mark.gpu
@pytest.mark.timeout(30)
def test_cuda_and_sim_share_device_thread(engine, cuda):
    loss, leaves = build_mlp({"x": "sim:0", "d0": "cuda:0", "d1": "sim:0", "dl": "cpu"})
    trace = []
    backward([loss], engine=engine, trace=trace)
    assert_grads_close(leaves, reference_grads())
    names = thread_names()
    on_index0 = {names[ident] for fn, ident, *_ in trace if fn.device is not CPU}
    assert on_index0 == {expected_thread_name(0)}


# -- a device index past GRADCLI_SIM_DEVICES ---------------------------------------------------
@pytest.mark.timeout(30)
def test_device_index_out_of_range_fails_at_the_copy(engine):
    """A copy to a sim device that does not exist fails in the forward, with a
    DeviceError naming it, not mid-backward; the engine stays usable."""
    from gradcli.devices import DeviceError

    n = sim_device_count()
    w = Tensor(np.arange(3.0), requires_grad=True)
    with pytest.raises(DeviceError, match=f"sim:{n + 2} is not available"):
        OPS["to"](w, device=f"sim:{n + 2}")
    # The engine stays usable.
    x = Tensor(place(np.ones(2), "sim:0"), requires_grad=True)
    backward([OPS["sum"](x)], engine=engine)
    np.testing.assert_allclose(host(x.grad), np.ones(2))


@pytest.mark.timeout(30)
def test_device_index_out_of_range_error_names_the_device(engine):
    n = sim_device_count()
    w = Tensor(np.arange(3.0), requires_grad=True)
    try:
        h = OPS["to"](w, device=f"sim:{n + 2}")
        loss = OPS["sum"](OPS["to"](OPS["mul"](h, h), device="cpu"))
        backward([loss], engine=engine)
    except Exception as exc:  # noqa: BLE001
        assert f"sim:{n + 2}" in str(exc), f"{type(exc).__name__}: {exc}"
    else:
        pytest.fail("no error for a nonexistent device")


# -- device types as a registry ------------------------------------------------------------
def test_device_types_registry_answers_for_every_kind():
    from gradcli.devices import DEVICE_TYPES, accelerator_types, kind_of

    assert set(DEVICE_TYPES) >= {"cpu", "cuda", "sim"}
    assert [k.name for k in accelerator_types()] == ["cuda", "sim"]
    sim = DEVICE_TYPES["sim"]
    a = to_device(np.arange(3.0), device("sim:2"))
    assert sim.owns(a) and not DEVICE_TYPES["cpu"].owns(a) and not DEVICE_TYPES["cuda"].owns(a)
    assert kind_of(a) is sim and device_of(a) is device("sim:2")
    assert sim.count() == sim_device_count()
    assert sim.array_module() is np and sim.current_stream(0) is None


@pytest.mark.parametrize("value", [np.float64(2.0), np.int64(3), np.array(1.5), 2.0, 3])
def test_host_values_are_cpu_by_a_positive_test(value):
    """A NumPy scalar (what elementwise backward formulas return for 0-d
    arrays) is a host value: never taken for a CuPy array by elimination."""
    from gradcli.devices import DEVICE_TYPES, kind_of, to_host, xp_of_array

    assert kind_of(value) is DEVICE_TYPES["cpu"]
    assert device_of(value) is CPU
    assert xp_of_array(value) is np
    assert not DEVICE_TYPES["cuda"].owns(value)
    np.testing.assert_array_equal(to_host(value), np.asarray(value))


@pytest.mark.parametrize("spec", ["sim:0\n", "sim:\u0661", "cpu:0", "tpu:0", "sim:" + "9" * 5000])
def test_device_strings_are_exact(spec):
    from gradcli.devices import DeviceError

    with pytest.raises(DeviceError) as info:
        device(spec)
    assert len(str(info.value)) < 200


@pytest.mark.timeout(60)
def test_reentrant_pool_thread_runs_on_its_owners_device():
    """reentrant_thread_init: a pool thread that takes over a graph task owned by
    the device thread of sim:1 makes sim:1 its current device, as the owner."""
    from gradcli.devices import DEVICE_TYPES

    sim = DEVICE_TYPES["sim"]
    seen = []

    class Probe(Node):
        """Records the thread's current sim device, then nests a reentrant backward."""

        def __init__(self, edges, metas, depth):
            super().__init__("ProbeBackward", edges, metas)
            self.depth = depth

        def apply(self, grads):
            seen.append((threading.current_thread().name, sim.current_index()))
            if self.depth:
                inner = Tensor(grads[0].copy(), requires_grad=True)
                out = Tensor(inner.data, requires_grad=True)
                out.grad_fn = Probe([inner.gradient_edge()], [InputMetadata.of(inner.data)],
                                    self.depth - 1)
                backward([out], [grads[0]])
            return [grads[0]]

    engine = Engine(max_recursion_depth=1)     # the second level goes to the pool
    try:
        x = Tensor(to_device(np.ones(2), device("sim:1")), requires_grad=True)
        y = Tensor(x.data.copy(), requires_grad=True)
        y.grad_fn = Probe([x.gradient_edge()], [InputMetadata.of(x.data)], 3)
        sim.set_current(0)                     # the caller's own current device
        backward([y], [to_device(np.ones(2), device("sim:1"))], engine=engine)
        assert sim.current_index() == 0        # the caller's is untouched
    finally:
        engine.stop()
    pool = [idx for name, idx in seen if name.startswith("gradcli-reentrant")]
    assert pool, seen
    assert set(pool) == {1}, seen
    assert {idx for name, idx in seen if name.startswith("gradcli-device")} == {1}


# -- one Graph from many threads ---------------------------------------
@pytest.mark.timeout(120)
def test_one_graph_run_from_8_threads_gives_every_run_its_own_result():
    """Note [Concurrent runs]: Graph.run() runs its own forward, so runs of one
    Graph from 8 threads never see each other's tensors (formerly: None grads)."""
    from gradcli.loader import load

    graph = load(str(Path(__file__).parent.parent / "graphs" / "multi_device.yaml"))
    ref = graph.run(multithreading=False)
    ref_grads = {k: np.asarray(to_host_(v)) for k, v in ref.grads.items()}
    assert ref_grads and all(v is not None for v in ref_grads.values())
    results, errors = [], []

    def worker():
        try:
            for _ in range(15):
                results.append(graph.run())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not errors, errors
    assert len(results) == 120
    for r in results:
        assert set(r.grads) == set(ref_grads)
        for k, v in r.grads.items():
            assert v is not None, k
            np.testing.assert_allclose(to_host_(v), ref_grads[k], rtol=1e-12)


def to_host_(a):
    from gradcli.devices import to_host

    return to_host(a)


# -- NumPy scalars are host values -----------------------------------------
SLICE_GRAPHS = {
    "stack_of_two_slices": ("""version: 1
tensors:
  x: {value: [1.0, 2.0, 3.0], requires_grad: true}
ops:
  - {op: slice, inputs: [x], output: a, args: {index: '0'}}
  - {op: slice, inputs: [x], output: b, args: {index: '2'}}
  - {op: stack, inputs: [a, b], output: s}
  - {op: sum, inputs: [s], output: loss}
backward:
  roots: [loss]
""", lambda torch, x: torch.stack([x[0], x[2]]).sum()),
    "slice_then_exp": ("""version: 1
tensors:
  x: {value: [1.0, 2.0, 3.0], requires_grad: true}
ops:
  - {op: slice, inputs: [x], output: a, args: {index: '1'}}
  - {op: exp, inputs: [a], output: loss}
backward:
  roots: [loss]
""", lambda torch, x: torch.exp(x[1])),
}


@pytest.mark.parametrize("name", sorted(SLICE_GRAPHS))
@pytest.mark.parametrize("dev", ["cpu", "sim:1"])
def test_zero_dim_slices_get_pytorchs_gradient(name, dev):
    """A 0-d slice whose gradient an elementwise backward turned into a NumPy
    scalar: the device check asks positively, so it is a host value, not a
    CuPy array (formerly: exit 3 with "No module named 'cupy'")."""
    from gradcli.loader import loads

    text, torch_fn = SLICE_GRAPHS[name]
    if dev != "cpu":
        text = text.replace("requires_grad: true}", f"requires_grad: true, device: '{dev}'}}")
    result = loads(text, name=name).run()
    torch = pytest.importorskip("torch")
    xt = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    torch_fn(torch, xt).backward()
    from gradcli.devices import to_host

    np.testing.assert_allclose(to_host(result.grads["x"]), xt.grad.numpy())
    assert device_of(result.grads["x"]) is device(dev)


def test_expand_of_a_sim_array_stays_on_its_device():
    # Found by scripts/fuzz_cli.py: logsumexp on sim:1 under create_graph failed in
    # backward (exit 3, "Expected all tensors to be on the same device, ... cpu and
    # sim:1"): expand (np.broadcast_to) turned the incoming SimArray gradient into a
    # host array, which then met the sim:1 tensors of the recorded formula
    import numpy as np

    from gradcli.devices import device, device_of, to_device
    from gradcli.loader import loads
    from gradcli.ops import library as L

    g = to_device(np.ones(()), device("sim:1"))
    assert str(device_of(L.expand(g, shape=(2, 3)))) == "sim:1"
    text = ("version: 1\ntensors:\n  t0: {shape: [2, 3], init: uniform, requires_grad: true, "
            "device: 'sim:1'}\nops:\n  - {op: logsumexp, inputs: [t0], output: o0}\n"
            "  - {op: sum, inputs: [o0], output: loss}\nbackward: {roots: [loss], create_graph: true}\n")
    on_sim = loads(text).run().grads["t0"]
    on_cpu = loads(text.replace(", device: 'sim:1'", "")).run().grads["t0"]
    assert str(device_of(on_sim)) == "sim:1"
    np.testing.assert_allclose(np.asarray(on_sim), on_cpu, rtol=1e-12)



def test_not_differentiable_gradient_stays_on_its_device():
    # Found by scripts/fuzz_cli.py: hardsigmoid on sim:0 inside a grad op failed with
    # "Expected all tensors to be on the same device, ... cpu and sim:0": its formula's
    # np.where gave a host array to the NotImplemented node. On sim:0 as on the CPU,
    # the first derivative is computed and differentiating it again raises PyTorch's error
    import numpy as np

    from gradcli.devices import device_of
    from gradcli.errors import BackwardError
    from gradcli.loader import loads

    text = ("version: 1\ntensors:\n  x: {value: [-4.0, 0.0, 0.5, 1.0, 4.0], requires_grad: true, "
            "device: 'sim:0'}\nops:\n  - {op: sin, inputs: [x], output: s}\n"
            "  - {op: aten.hardsigmoid.default, inputs: [x], output: e}\n"
            "  - {op: mul, inputs: [s, e], output: fx}\n  - {op: sum, inputs: [fx], output: f}\n"
            "  - {op: grad, inputs: [f, x], outputs: [df]}\n"
            "  - {op: sum, inputs: [df], output: loss}\nbackward: {roots: [loss]}\n")
    cpu_text = text.replace(", device: 'sim:0'", "")
    sim, cpu = loads(text), loads(cpu_text)
    df = sim.forward()["df"]
    assert str(device_of(df.data)) == "sim:0"
    np.testing.assert_allclose(np.asarray(df.data), np.asarray(cpu.forward()["df"].data))
    errors = []
    for graph in (loads(text), loads(cpu_text)):
        with pytest.raises(BackwardError) as info:
            graph.run()
        errors.append(str(info.value))
    assert "derivative for aten::hardsigmoid_backward is not implemented" in errors[0]
    assert errors[0] == errors[1]


# -- arrays told apart by type, shared device copies of leaves ---------------------------
class _FakeCupyArray:
    """Looks like CuPy's ndarray to CudaType.owns (module cupy, a ``device``), holds no
    data; weakly referable like CuPy's, with CuPy's ``base`` for a view."""

    __module__ = "cupy._fake"

    class _Dev:
        id = 3

    device = _Dev()

    def __init__(self, base=None):
        self.base = base


def test_a_kind_owned_by_type_is_remembered_by_type_and_its_devices_interned():
    import gradcli.devices as D

    a = _FakeCupyArray()
    assert D.kind_of(a) is D.DEVICE_TYPES["cuda"]
    assert D._KIND_BY_TYPE[_FakeCupyArray] is D.DEVICE_TYPES["cuda"]
    assert device_of(a) is device("cuda:3") and device_of(_FakeCupyArray()) is device("cuda:3")
    # a NumPy subclass never enters: a SimArray's device belongs to the instance
    s = to_device(np.zeros(2), device("sim:0"))
    assert D.kind_of(s) is D.DEVICE_TYPES["sim"] and SimArray not in D._KIND_BY_TYPE
    assert D.kind_of(s.view(np.ndarray)) is D.DEVICE_TYPES["cpu"]


def test_shared_device_arrays_and_their_views_are_not_writeable():
    from gradcli.devices import share, writeable

    a, other = _FakeCupyArray(), _FakeCupyArray()
    view = _FakeCupyArray(base=a)
    assert writeable(a) and writeable(view)
    assert share(a)
    assert not writeable(a) and not writeable(view) and writeable(other)
    h = np.ones(3)
    assert share(h) and not h.flags.writeable and not writeable(h[1:])

    class NoWeakRefs:       # a device array type without weak references is not shared
        __slots__ = ()
    assert share(NoWeakRefs()) is False


def test_leaves_on_a_device_are_copied_there_once_and_runs_cannot_alter_them():
    """The train-mode batch norm writes its running statistics: each run writes into a
    copy, so the shared device arrays and the second run's gradients stay the first's."""
    from gradcli import loader
    from gradcli.devices import writeable

    graph = loader.load(Path(__file__).resolve().parents[1] / "graphs/models/cnn_batchnorm/graph.yaml",
                        device_map={"cpu": "sim"})
    first = graph.run()
    leaves = graph.leaves
    arrays = {name: leaf.array() for name, leaf in leaves.items()}
    stats = {name: a.copy() for name, a in arrays.items()}
    second = graph.run()
    for name, leaf in leaves.items():
        assert leaf.array() is arrays[name], name          # copied to sim:0 once
        assert device_of(arrays[name]) is device("sim:0") and not writeable(arrays[name])
        np.testing.assert_array_equal(arrays[name], stats[name], err_msg=name)
    for name, g in first.grads.items():
        np.testing.assert_array_equal(np.asarray(g), np.asarray(second.grads[name]), err_msg=name)


# -- reductions without NumPy's Python wrappers ------------------------------------------


def _bitwise(ours, numpys):
    assert type(ours) is type(numpys)
    ours, numpys = np.asarray(ours), np.asarray(numpys)
    assert (ours.dtype, ours.shape) == (numpys.dtype, numpys.shape)
    assert ours.tobytes() == numpys.tobytes()


@st.composite
def _array_and_axis(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.bool_]))
    x = draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=4, max_side=9),
                        elements={"allow_nan": False} if dtype in (np.float32, np.float64, np.float16) else None))
    axis = draw(st.none() | st.integers(-x.ndim, x.ndim - 1)
                | st.lists(st.integers(0, x.ndim - 1), unique=True).map(tuple))
    return x, axis


@settings(max_examples=300, deadline=None)
@given(_array_and_axis(), st.booleans())
def test_reductions_are_numpys_bit_for_bit(case, keepdims):
    """Note [Reductions without NumPy's wrappers]: the same values, dtypes, shapes and types
    (array or NumPy scalar) as np.sum and np.mean, for every dtype (the others take NumPy's path)."""
    x, axis = case
    with np.errstate(all="ignore"):         # (float16 sums may overflow: alike on both sides)
        _check_reductions(x, axis, keepdims)


def _check_reductions(x, axis, keepdims):
    _bitwise(reduce_sum(x, axis=axis, keepdims=keepdims), np.sum(x, axis=axis, keepdims=keepdims))
    if x.dtype.kind == "f":
        _bitwise(reduce_mean(x, axis=axis, keepdims=keepdims), np.mean(x, axis=axis, keepdims=keepdims))
