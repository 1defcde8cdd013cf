"""Note [Streaming backwards]: per-node streams, cross-stream syncs, leaf-stream syncs.

CuPy streams are duck-typed by the engine (record/wait_event/device_id/context
manager), so the logic runs here with fake streams; the real-CuPy test skips
where no GPU is seen.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import Engine, Tensor, backward, streams
from gradcli.devices import device, on_device, to_device


class FakeEvent:
    def __init__(self, source):
        self.source = source


class FakeStream:
    def __init__(self, name, log, device_id=0):
        self.name, self.log, self.device_id = name, log, device_id

    def record(self):
        self.log.append(("record", self.name))
        return FakeEvent(self.name)

    def wait_event(self, event):
        self.log.append(("wait", self.name, event.source))

    def __enter__(self):
        self.log.append(("enter", self.name))
        return self

    def __exit__(self, *exc):
        return False


def test_sync_records_and_waits_only_across_streams():
    log = []
    a, b = FakeStream("a", log), FakeStream("b", log)
    streams.sync(a, a)
    streams.sync(None, b)
    streams.sync(a, None)
    assert log == []
    streams.sync(a, b)
    assert log == [("record", "a"), ("wait", "b", "a")]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("multithreading", [True, False])
def test_engine_runs_nodes_on_their_streams_and_syncs(monkeypatch, multithreading):
    from gradcli.autograd import set_multithreading_enabled

    log = []
    caller = FakeStream("caller", log)
    monkeypatch.setattr(streams, "current_stream", lambda device_id: caller)
    sim0 = device("sim:0")
    x = Tensor(on_device(to_device(np.array([0.5, 1.0, 2.0]), sim0), sim0), requires_grad=True)
    a = O.exp(x)
    b = O.mul(a, a)
    loss = O.sum(b)
    # The forward ran exp on stream A, and mul and sum on stream B; x's
    # accumulator on stream L.
    A, B, L = FakeStream("A", log), FakeStream("B", log), FakeStream("L", log)
    a.grad_fn.stream, b.grad_fn.stream, loss.grad_fn.stream = A, B, B
    x.grad_accumulator.stream = L
    engine = Engine()
    try:
        with set_multithreading_enabled(multithreading):
            backward(loss, engine=engine)
    finally:
        engine.stop()
    np.testing.assert_allclose(np.asarray(x.grad), 2 * np.exp(2 * np.array([0.5, 1.0, 2.0])))
    entered = [e[1] for e in log if e[0] == "enter"]
    assert entered == ["B", "B", "A", "L"]            # each node on its own stream, in order
    waits = [e[1:] for e in log if e[0] == "wait"]
    # B -> A for each of mul's two gradients reaching exp (a*a: one sync per
    # InputBuffer add, as PyTorch); A -> L at the leaf; at the end the caller's
    # stream waits on the leaf's. None between B and B (mul after sum).
    assert waits == [("A", "B"), ("A", "B"), ("L", "A"), ("caller", "L")]


@pytest.mark.gpu
def test_cuda_streams_on_a_real_gpu():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no GPU")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"CuPy sees no GPU: {exc}")
    side = cupy.cuda.Stream(non_blocking=True)
    x_host = np.linspace(-1, 1, 64).reshape(8, 8)
    with side:
        x = Tensor(cupy.asarray(x_host), requires_grad=True)
        y = O.sum(O.tanh(O.matmul(x, x)))
    assert y.grad_fn.stream == side
    backward(y)
    xc = Tensor(x_host.copy(), requires_grad=True)
    backward(O.sum(O.tanh(O.matmul(xc, xc))))
    np.testing.assert_allclose(cupy.asnumpy(x.grad), xc.grad, rtol=1e-10)
