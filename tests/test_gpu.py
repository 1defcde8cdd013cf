"""The device paths on a real CUDA device: what tests/test_devices.py, test_streams.py and
the op tables check on the simulated ``sim:N``, run with ``cuda:0`` in its place.

Every test here is marked ``gpu``: without a CUDA device (CuPy and a driver) it is
reported as skipped (tests/conftest.py), and `make test-gpu` runs this part where a
device exists. docs/gpu.md records what has run on real hardware.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from gradcli import loader
from gradcli.autograd import Engine, Tensor, backward, set_multithreading_enabled
from gradcli.devices import CPU, device, device_of, to_device, to_host

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def engine():
    eng = Engine()
    yield eng
    eng.stop()


def _cuda_layouts():
    # each layout of tests/test_devices.py's multi-device MLP with cuda:0 for sim:0
    return [{"x": "cpu", "d0": "cuda:0", "d1": "sim:1", "dl": "cpu"},
            {"x": "cuda:0", "d0": "cuda:0", "d1": "sim:1", "dl": "sim:1"},
            {"x": "sim:1", "d0": "cpu", "d1": "cuda:0", "dl": "sim:1"}]


@pytest.mark.parametrize("devs", _cuda_layouts())
@pytest.mark.parametrize("multithreading", [True, False], ids=["mt", "single-thread"])
def test_multi_device_grads_match_cpu_on_cuda(engine, devs, multithreading):
    from test_devices import assert_grads_close, build_mlp, reference_grads

    loss, leaves = build_mlp(devs)
    with set_multithreading_enabled(multithreading):
        backward([loss], engine=engine)
    assert_grads_close(leaves, reference_grads())
    for name, t in leaves.items():
        assert device_of(t.grad) is device_of(t.data), name


def _run(name, device_map, multithreading=True):
    graph = loader.load(REPO / "graphs" / name, device_map=device_map)
    with set_multithreading_enabled(multithreading):
        return graph.run()


@pytest.mark.parametrize("name", ["gpu_mlp.yaml", "multi_device.yaml"])
def test_examples_on_cuda_equal_the_cpu_run(name):
    on_cuda = _run(name, None)
    on_cpu = _run(name, {"cuda": "cpu"} if name == "gpu_mlp.yaml" else None,
                  multithreading=False)
    assert set(on_cuda.grads) == set(on_cpu.grads)
    for k, g in on_cuda.grads.items():
        np.testing.assert_allclose(to_host(g), to_host(on_cpu.grads[k]), rtol=1e-12,
                                   atol=1e-12, err_msg=k)


def test_trace_shows_cuda_nodes_on_the_device_thread_and_cpu_nodes_on_the_caller(engine):
    from test_devices import build_mlp

    loss, _ = build_mlp({"x": "cpu", "d0": "cuda:0", "d1": "cuda:0", "dl": "cpu"})
    trace = []
    backward([loss], engine=engine, trace=trace)
    names = {t.ident: t.name for t in threading.enumerate()}
    for fn, ident, *_ in trace:
        if fn.device.type == "cuda":
            assert names[ident].startswith("gradcli-device-cuda:0"), fn
        elif fn.device is CPU:
            assert ident == threading.get_ident(), fn


def _aten_rows():
    from test_aten_ops import CASES

    return CASES


@pytest.mark.parametrize("op_name, inputs, args, wrt, fd", _aten_rows())
def test_every_aten_row_on_cuda_equals_the_cpu(op_name, inputs, args, wrt, fd):
    """Finds the NumPy-only calls (host-side np.where, np.add.at, SciPy) in the kernels."""
    from test_aten_ops import _ours, _upstream, _wrt

    from gradcli.autograd import grad

    wrt = _wrt(inputs, wrt)
    cpu_in, cpu_out = _ours(op_name, inputs, args, wrt)
    cuda = device("cuda:0")

    def on_cuda(x):
        return to_device(x, cuda) if isinstance(x, np.ndarray) else x

    gpu_inputs = [[on_cuda(v) for v in x] if isinstance(x, list) else on_cuda(x)
                  for x in inputs]
    gpu_in, gpu_out = _ours(op_name, gpu_inputs, args, wrt)
    for a, b in zip(gpu_out, cpu_out):
        np.testing.assert_allclose(to_host(a.data), to_host(b.data), rtol=1e-10, atol=1e-12)
    diff = [o for o in cpu_out if o.requires_grad]
    if not diff:
        return
    vs = _upstream(diff)
    cpu_g = grad(diff, [cpu_in[i] for i in wrt], vs, allow_unused=True)
    gpu_diff = [o for o in gpu_out if o.requires_grad]
    gpu_g = grad(gpu_diff, [gpu_in[i] for i in wrt], [on_cuda(v) for v in vs],
                 allow_unused=True)
    for a, b in zip(gpu_g, cpu_g):
        if b is None:
            assert a is None
            continue
        assert device_of(a) is cuda
        np.testing.assert_allclose(to_host(a), to_host(b), rtol=1e-10, atol=1e-12)


def test_gradients_crossing_streams_are_synchronised():
    """A long kernel on a side stream feeds a node on the default stream: without the
    engine's event wait, the consumer reads the buffer before the producer wrote it."""
    import cupy

    import gradcli.ops as O

    n = 2048
    x_host = np.linspace(-1, 1, n * n).reshape(n, n) / n
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        x = Tensor(cupy.asarray(x_host), requires_grad=True)
        h = x
        for _ in range(8):                          # long enough to still be running
            h = O.matmul(h, x)
    y = O.sum(O.tanh(h))                           # on the default stream
    backward(y)
    cupy.cuda.Device().synchronize()
    xc = Tensor(x_host.copy(), requires_grad=True)
    hc = xc
    for _ in range(8):
        hc = O.matmul(hc, xc)
    backward(O.sum(O.tanh(hc)))
    np.testing.assert_allclose(cupy.asnumpy(x.grad), xc.grad, rtol=1e-9, atol=1e-12)

