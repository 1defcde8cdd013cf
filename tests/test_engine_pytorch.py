"""Engine tests mirrored from PyTorch's ``test/test_autograd.py``.

Each test's docstring names the PyTorch test it mirrors. ``torch.autograd.Function``
is emulated with a tiny custom ``Node`` subclass (see ``function_apply``), wired to
its output Tensor the way ``gradcli/ops/core.py`` wires ``OpBackward`` nodes.
Where gradcli deliberately differs from PyTorch, the test says so and checks
gradcli's behaviour.
"""
from __future__ import annotations

import sys
import threading
import traceback

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import (Engine, Node, Tensor, backward, enable_grad,
                              get_current_graph_task_execution_order, grad, is_grad_enabled,
                              no_grad,
                              predicted_execution_order, queue_callback,
                              set_multithreading_enabled)
from gradcli.autograd import engine as engine_mod
from gradcli.autograd.node import ERR_BACKWARD_TWICE, UINT64_MAX, InputMetadata
from gradcli.autograd.ready_queue import ReadyQueue, node_task, shutdown_task, wakeup_task
from gradcli.devices import NO_DEVICE

RNG = np.random.default_rng(0)


# -- helpers ---------------------------------------------------------------------------
def leaf(value, requires_grad=True):
    return Tensor(np.array(value, dtype=np.float64), requires_grad=requires_grad)


def rand(*shape):
    return Tensor(RNG.standard_normal(shape), requires_grad=True)


class Ctx:
    """What ``ctx`` is in a ``torch.autograd.Function``."""


class FunctionBackward(Node):
    """The backward node of ``function_apply``: calls ``backward_fn(ctx, *grads)``."""

    def __init__(self, name, next_edges, input_metadata, backward_fn, ctx):
        super().__init__(name, next_edges, input_metadata)
        self.backward_fn = backward_fn
        self.ctx = ctx

    def apply(self, grads):
        out = self.backward_fn(self.ctx, *grads)
        if not isinstance(out, (tuple, list)):
            out = (out,)
        return list(out)


def function_apply(name, backward_fn, *inputs, forward=None):
    """Emulate ``MyFunction.apply(*inputs)`` for a one-output Function.

    ``forward(ctx, *arrays) -> array`` runs with grad mode off (default: a copy of
    the first input); ``backward_fn(ctx, *grads)`` returns the input grads.
    """
    ctx = Ctx()
    datas = [x.data if isinstance(x, Tensor) else x for x in inputs]
    prev = is_grad_enabled()
    with no_grad():
        out = forward(ctx, *datas) if forward is not None else np.array(datas[0], copy=True)
    needs = prev and any(isinstance(x, Tensor) and x.requires_grad for x in inputs)
    t = Tensor(out, requires_grad=needs)
    if needs:
        edges = [x.gradient_edge() if isinstance(x, Tensor) and x.requires_grad else None
                 for x in inputs]
        node = FunctionBackward(name, edges, [InputMetadata.of(out)], backward_fn, ctx)
        t.grad_fn = node
        t.output_nr = 0
    return t


def identity_backward(ctx, g):
    return g


def must_not_run(ctx, g):
    pytest.fail("This node should not be executed!")


def grad_fns(*tensors):
    """The node each tensor's gradient flows into (grad_fn or grad accumulator)."""
    return [t.grad_accumulator if t.grad_fn is None else t.grad_fn for t in tensors]


def names(nodes):
    return ", ".join(n.name.split(" ")[-1] for n in nodes)


def run_threads(fn, args=(), num_threads=10, pass_idx=False, timeout=20):
    """TestMultithreadAutograd._run_py_multithread_fn: start, join, re-raise."""
    errors = [None] * num_threads
    barrier = threading.Barrier(num_threads)

    def target(i):
        try:
            barrier.wait(timeout)
            fn(*((i, *args) if pass_idx else args))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors[i] = exc

    threads = [threading.Thread(target=target, args=(i,), daemon=True)
               for i in range(num_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a backward thread hung"
    for exc in errors:
        if exc is not None:
            raise exc


# -- execution order -------------------------------------------------------------------
class _OrderRecorder:
    def __init__(self):
        self.predicted = None
        self.actual = []

    def hook(self, _):
        self.predicted = get_current_graph_task_execution_order()

    def log(self, *tensors):
        for t in tensors:
            t.register_hook(lambda g, t=t: self.actual.append(t))


def test_current_graph_task_execution_order():
    """Mirrors test_autograd.py::TestAutograd::test_current_graph_task_execution_order
    (all cases but the AccumulateGrad-with-two-inputs one, tested on its own below)."""
    # Basic example: single path
    rec = _OrderRecorder()
    t = O.exp(O.sin(O.clone(leaf(1.0))))
    t.register_hook(rec.hook)
    with set_multithreading_enabled(False):
        t.backward()
    assert names(rec.predicted) == "ExpBackward0, SinBackward0, CloneBackward0, AccumulateGrad"

    # We don't exactly follow sequence_nr order
    rec = _OrderRecorder()
    a, b = leaf(1.0), leaf(2.0)
    c = O.sin(b)
    d = O.cos(a)
    out = c * d
    rec.log(a, b, c, d, out)
    out.register_hook(rec.hook)
    with set_multithreading_enabled(False):
        out.backward()
    assert rec.predicted == grad_fns(*rec.actual)
    # Mul, Cos(d), AccumulateGrad(a) (ready, max priority) before Sin(c), AccumulateGrad(b)
    assert rec.actual == [out, d, a, c, b]

    # Multiple roots are also OK
    rec = _OrderRecorder()
    a = leaf(1.0)
    b = a * 2
    out = O.sin(b)
    out2 = O.cos(b)
    out3 = O.cos(b)
    out3.register_hook(rec.hook)
    with set_multithreading_enabled(False):
        grad((out, out3, out2), inputs=(a,))
    assert names(rec.predicted) == ("CosBackward0, CosBackward0, SinBackward0, MulBackward0, "
                                    "AccumulateGrad")
    assert rec.predicted[:2] == [out3.grad_fn, out2.grad_fn]

    # Case where next node is nullptr (the constant 2 has no edge)
    rec = _OrderRecorder()
    a = leaf(1.0)
    b = a * 2
    assert b.grad_fn.next_edges[1] is None
    out = O.sin(b)
    rec.log(a, b, out)
    out.register_hook(rec.hook)
    with set_multithreading_enabled(False):
        out.backward()
    assert rec.predicted == grad_fns(*rec.actual)

    # Case where two `inputs` on the same path
    rec = _OrderRecorder()
    a = leaf(1.0)
    b = a * 2
    out = O.sin(b)
    out.register_hook(rec.hook)
    with set_multithreading_enabled(False):
        grad((out,), inputs=(a, b))
    assert names(rec.predicted) == "SinBackward0, MulBackward0, AccumulateGrad"

    # Case where `inputs` specifies a subgraph
    rec = _OrderRecorder()
    a, b = leaf(1.0), leaf(1.0)
    c = a * b
    out = O.sin(c)
    out.register_hook(rec.hook)
    with set_multithreading_enabled(False):
        grad((out,), inputs=(a,))
    assert names(rec.predicted) == "SinBackward0, MulBackward0, AccumulateGrad"
    assert rec.predicted[-1] is a.grad_accumulator

    # Errors when multithreading is not disabled
    rec = _OrderRecorder()
    t = O.exp(O.sin(O.clone(leaf(1.0))))
    t.register_hook(rec.hook)
    with pytest.raises(RuntimeError,
                       match="expects the current backward to be executed with multithreading "
                             "disabled"):
        t.backward()


def test_current_graph_task_execution_order_accumulate_grad_two_inputs():
    """Mirrors test_autograd.py::TestAutograd::test_current_graph_task_execution_order
    (case "Accumulate grad node has more than one input")."""
    rec = _OrderRecorder()
    a = leaf(1.0)
    b = O.sin(a)
    c = O.cos(a)
    out = b * c
    rec.log(a, b, c, out)
    out.register_hook(rec.hook)
    with set_multithreading_enabled(False):
        out.backward()
    assert grad_fns(*rec.actual) == [out.grad_fn, c.grad_fn, b.grad_fn, a.grad_accumulator]
    assert rec.predicted == grad_fns(*rec.actual)


def test_current_graph_task_execution_order_outside_backward_raises():
    """Mirrors test_autograd.py::TestAutograd::test_current_graph_task_execution_order
    (case "Errors when not called in a backward")."""
    with pytest.raises(RuntimeError, match="should only be called during the backward pass"):
        get_current_graph_task_execution_order()


def test_diamond_run_order_matches_prediction():
    """Ready-queue order (CompareNodeTaskTime: higher sequence_nr first) on a diamond.

    Mirrors the ordering rules checked by test_autograd.py::TestAutograd::
    test_current_graph_task_execution_order and test_backward_hook_relative_ordering.
    """
    x = leaf([1.0, 2.0])
    h = O.exp(x)          # seq s
    left = O.sin(h)       # seq s+1
    right = O.cos(h)      # seq s+2
    out = O.sum(left * right)
    ran = []
    nodes = [out.grad_fn, out.grad_fn.next_edges[0][0], left.grad_fn, right.grad_fn, h.grad_fn,
             x.grad_accumulator]
    for n in nodes:
        n.register_prehook(lambda g, n=n: ran.append(n))
    assert left.grad_fn.sequence_nr < right.grad_fn.sequence_nr
    with set_multithreading_enabled(False):
        out.backward()
    # PyTorch: Sum, Mul, Cos (higher seq), Sin, Exp (ready after both), AccumulateGrad
    assert names(ran) == ("SumBackward0, MulBackward0, CosBackward0, SinBackward0, "
                          "ExpBackward0, AccumulateGrad")
    assert ran == predicted_execution_order([out.grad_fn])
    np.testing.assert_allclose(x.grad, np.exp(x.data) * (np.cos(np.exp(x.data)) ** 2
                                                         - np.sin(np.exp(x.data)) ** 2))


def test_ready_queue_compare_node_task_time():
    """ReadyQueue pop order = engine.h CompareNodeTaskTime: shutdown, then wake-up tasks,
    then deeper reentrant depth, then higher sequence_nr (AccumulateGrad's UINT64_MAX first)."""

    class FakeTask:
        def __init__(self, depth):
            self.reentrant_depth = depth

    class FakeNode:
        def __init__(self, seq):
            self.sequence_nr = seq

    q = ReadyQueue()
    shallow, deep = FakeTask(0), FakeTask(2)
    tasks = {
        "seq3": node_task(shallow, FakeNode(3), None),
        "seq7": node_task(shallow, FakeNode(7), None),
        "acc": node_task(shallow, FakeNode(UINT64_MAX), None),
        "deep_seq1": node_task(deep, FakeNode(1), None),
        "wakeup": wakeup_task(shallow),
        "shutdown": shutdown_task(),
    }
    for key in ["seq3", "wakeup", "deep_seq1", "acc", "shutdown", "seq7"]:
        q.push(tasks[key])
    popped = [q.pop() for _ in range(len(tasks))]
    order = [next(k for k, v in tasks.items() if v is p) for p in popped]
    assert order == ["shutdown", "wakeup", "deep_seq1", "acc", "seq7", "seq3"]
    assert q.empty()


# -- hooks -----------------------------------------------------------------------------
def test_prehook_ordering():
    """Mirrors test_autograd.py::TestAutograd::test_prehook_ordering
    (the final ``b.grad == 3`` check is a test of its own below)."""
    log = []

    def hook1(g):
        log.append(1)
        return g * 3

    def hook2(gs):
        log.append(2)
        return tuple(g * 2 for g in gs)

    a = leaf(1.0)
    b = O.clone(a)

    b.grad_fn.register_prehook(hook2)
    b.register_hook(hook1)
    b.grad_fn.register_prehook(hook2)

    acc = b.grad_fn.next_functions()[0][0]
    assert acc is a.grad_accumulator
    a.register_hook(hook1)
    acc.register_prehook(hook2)
    a.register_hook(hook1)

    b.sum().backward(retain_graph=True)
    assert log == [1, 2, 2, 1, 1, 2]
    assert float(a.grad) == 3 * 2 * 2 * 3 * 3 * 2

    # grad also runs hooks on accumulate grad nodes, even though
    # the accumulate grad nodes are not actually executed
    log = []
    (ga,) = grad(b.sum(), inputs=(a,), retain_graph=True)
    assert log == [1, 2, 2, 1, 1]
    assert float(ga) == 3 * 2 * 2 * 3 * 3

    log = []
    b.sum().backward(inputs=(b,))
    assert log == [1, 2, 2]


def test_prehook_ordering_backward_inputs_retains_grad():
    """Mirrors test_autograd.py::TestAutograd::test_prehook_ordering (last assertion:
    ``b.sum().backward(inputs=(b,))`` sets ``b.grad`` to the tensor-pre-hooked value 3)."""
    a = leaf(1.0)
    b = O.clone(a)
    b.grad_fn.register_prehook(lambda gs: tuple(g * 2 for g in gs))
    b.register_hook(lambda g: g * 3)
    b.sum().backward(inputs=(b,))
    assert b.grad is not None and float(b.grad) == 3
    assert a.grad is None


def test_hook_edge_case_when_called_with_grad():
    """Mirrors test_autograd.py::TestAutograd::test_hook_edge_case_when_called_with_grad."""
    a = leaf(1.0)
    b = a * 2
    c = b * 2
    counts = {"tensor": 0, "pre": 0, "post": 0}

    def tensor_prehook(g):
        counts["tensor"] += 1

    def prehook(g):
        counts["pre"] += 1

    def posthook(gI, gO):
        counts["post"] += 1

    def take():
        out = (counts["tensor"], counts["pre"], counts["post"])
        counts.update(tensor=0, pre=0, post=0)
        return out

    a.register_hook(tensor_prehook)
    b.register_hook(tensor_prehook)
    acc = b.grad_fn.next_edges[0][0]
    acc.register_hook(posthook)
    acc.register_prehook(prehook)
    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_prehook(prehook)

    grad(c, inputs=(b,), retain_graph=True)
    assert take() == (1, 0, 0)

    grad(c, inputs=(a, b), retain_graph=True)
    assert take() == (2, 1, 1)

    c.backward(retain_graph=True)
    assert take() == (2, 2, 2)

    c.backward(inputs=(a, b), retain_graph=True)
    assert take() == (2, 2, 2)


def test_accumulate_grad_posthooks_can_observe_tensor_prehook():
    """Mirrors test_autograd.py::TestAutograd::
    test_accumulate_grad_posthooks_can_observe_tensor_prehook."""
    a = leaf(1.0)
    seen = []

    def posthook(outputs, inputs):
        seen.append("post")
        assert len(outputs) == 0
        assert np.allclose(inputs[0], a.data * 2)

    def prehook(gI):
        seen.append("pre")
        assert len(gI) == 1
        assert np.allclose(gI[0], a.data * 2)

    b = O.clone(a)
    acc = b.grad_fn.next_functions()[0][0]
    acc.register_hook(posthook)
    acc.register_prehook(prehook)
    a.register_hook(lambda g: g * 2)
    b.backward()
    assert seen == ["pre", "post"]
    assert float(a.grad) == 2


def test_accumulate_grad_posthooks_should_not_execute():
    """Mirrors test_autograd.py::TestAutograd::test_accumulate_grad_posthooks_should_not_execute."""
    def boom(*_):
        raise RuntimeError("must not run")

    a = leaf(1.0)
    a.register_hook(boom)
    b = leaf(1.0)
    c = O.clone(a)
    c.grad_fn.next_functions()[0][0].register_hook(boom)
    out = a + b + c
    out.sum().backward(inputs=[b])
    assert float(b.grad) == 1
    assert a.grad is None


def test_retain_grad():
    """Mirrors test_autograd.py::TestAutograd::test_retain_grad."""
    inp = Tensor(RNG.random((1, 3)), requires_grad=True)
    h1 = inp * 3
    out = (h1 * h1).sum()

    # It should be possible to call retain_grad() multiple times
    h1.retain_grad()
    h1.retain_grad()

    # Gradient should be accumulated
    out.backward(retain_graph=True)
    np.testing.assert_allclose(h1.grad, h1.data * 2)
    out.backward(retain_graph=True)
    np.testing.assert_allclose(h1.grad, h1.data * 4)

    inp.grad = np.zeros_like(inp.data)
    # It should be a no-op for leaves
    inp.retain_grad()
    inp.retain_grad()
    out.backward()
    np.testing.assert_allclose(inp.grad, inp.data * 18)


def test_retains_grad_can_always_observe_tensor_prehook():
    """Mirrors test_autograd.py::TestAutograd::test_retains_grad_can_always_observe_tensor_prehook."""
    def tensor_prehook(g):
        return g * 2

    a = leaf(1.0)
    b = O.clone(a)
    b.register_hook(tensor_prehook)
    b.retain_grad()
    b.register_hook(tensor_prehook)
    O.clone(b).backward()
    assert float(b.grad) == 4

    a = leaf(1.0)
    b = O.clone(a)
    b.retain_grad()
    b.register_hook(tensor_prehook)
    O.clone(b).backward()
    assert float(b.grad) == 2


def test_reentrant_with_non_leaf_variable_hook():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_with_non_leaf_variable_hook."""
    handle = None
    param = Tensor(RNG.random(10), requires_grad=True)

    def manual_increase_gradient(g):
        handle.remove()
        with enable_grad():
            gt = Tensor(g.copy(), requires_grad=True)
            out = ((gt * 2) + 5).sum()
            out.backward()
        return gt.grad + g

    tmp = param * param
    handle = tmp.register_hook(manual_increase_gradient)
    tmp.sum().backward()
    np.testing.assert_allclose(param.grad, 6 * param.data)


# -- callbacks -------------------------------------------------------------------------
def test_callback_adds_callback():
    """Mirrors test_autograd.py::TestAutograd::test_callback_adds_callback."""
    called = [0]

    def callback_final():
        called[0] += 1

    def callback_adds_callback():
        called[0] += 1
        queue_callback(callback_final)

    def bw(ctx, g):
        queue_callback(callback_adds_callback)
        return g

    a = Tensor(RNG.random((3, 3)), requires_grad=True)
    b = function_apply("MyFuncBackward", bw, a)
    b.sum().backward()
    assert called[0] == 2


def test_queue_callback_outside_backward_raises():
    """Engine::queue_callback's check (used by test_callback_adds_callback's API)."""
    with pytest.raises(RuntimeError,
                       match="^Final callbacks can only be installed during backward pass.$"):
        queue_callback(lambda: None)


def test_callback_propagates_errors():
    """Mirrors test_autograd.py::TestAutograd::test_callback_propagates_errors_from_device_thread
    (on the CPU): an error raised by a final callback reaches the caller of backward()."""
    def callback():
        raise RuntimeError("blah")

    t = leaf([1.0, 2.0])
    handle = t.register_hook(lambda g: queue_callback(callback))
    with pytest.raises(RuntimeError, match="blah"):
        (t ** 2).sum().backward()
    assert t.grad is not None        # the nodes ran; only the callback failed
    t.grad = None
    handle.remove()
    # and the engine still works afterwards
    (t ** 2).sum().backward()
    np.testing.assert_allclose(t.grad, [2.0, 4.0])


# -- validate_outputs ------------------------------------------------------------------
def test_invalid_gradients():
    """Mirrors test_autograd.py::TestAutograd::test_invalid_gradients (and the other branches
    of engine.cpp validate_outputs: count, expandable shape, dtype)."""
    inp = Tensor(RNG.standard_normal((5, 5)), requires_grad=True)

    # wrong shape, not expandable
    out = function_apply("MyFunctionBackward", lambda ctx, g: RNG.standard_normal(10), inp)
    with pytest.raises(RuntimeError) as info:
        out.sum().backward()
    assert str(info.value) == ("Function MyFunctionBackward returned an invalid gradient at "
                               "index 0 - got [10] but expected shape compatible with [5, 5]")
    assert "expected shape" in str(info.value)

    out = function_apply("MyFunctionBackward", lambda ctx, g: np.ones((1, 5)), inp)
    with pytest.raises(RuntimeError, match=r"got \[1, 5\] but expected shape compatible with "
                                           r"\[5, 5\]"):
        out.sum().backward()

    # wrong number of gradients
    out = function_apply("MyFunctionBackward", lambda ctx, g: (g, g), inp)
    with pytest.raises(RuntimeError) as info:
        out.sum().backward()
    assert str(info.value) == ("Function MyFunctionBackward returned an invalid number of "
                               "gradients - expected 1, but got 2")

    # expandable shape: summed back (sum_to)
    inp.grad = None
    out = function_apply("MyFunctionBackward", lambda ctx, g: np.ones((3, 5, 5)), inp)
    out.sum().backward()
    assert inp.grad.shape == (5, 5)
    np.testing.assert_array_equal(inp.grad, np.full((5, 5), 3.0))

    row = Tensor(np.ones((1, 5)), requires_grad=True)
    out = function_apply("MyFunctionBackward", lambda ctx, g: np.ones((4, 5)), row)
    out.sum().backward()
    np.testing.assert_array_equal(row.grad, np.full((1, 5), 4.0))

    # dtype is cast to the input's dtype
    inp.grad = None
    out = function_apply("MyFunctionBackward", lambda ctx, g: g.astype(np.float32), inp)
    out.sum().backward()
    assert inp.grad.dtype == np.float64


# -- grad() / unreachable --------------------------------------------------------------
def test_grad_unreachable():
    """Mirrors test_autograd.py::TestAutograd::test_grad_unreachable."""
    x = leaf([1.0])
    y = leaf([1.0])
    # Make sure x and y have grad accumulators allocated
    x * 2
    y * 2

    grad_x, grad_y = grad(x * 2, [x, y], allow_unused=True)
    np.testing.assert_array_equal(grad_x, x.data * 2)
    assert grad_y is None

    # z doesn't even have a grad accumulator allocated
    z = leaf([1.0])
    grad_x, grad_z = grad(x * 2, [x, z], allow_unused=True)
    np.testing.assert_array_equal(grad_x, x.data * 2)
    assert grad_z is None

    # allow_unused=False, but grads contains None inside, should throw
    with pytest.raises(RuntimeError) as info:
        grad(x * 2, [x, y], allow_unused=False)
    assert str(info.value) == ("One of the differentiated Tensors appears to not have been "
                               "used in the graph. Set allow_unused=True if this is the "
                               "desired behavior.")


def test_grad_unreachable_discovery():
    """Mirrors test_autograd.py::TestAutograd::test_grad_unreachable_discovery."""
    x = function_apply("MyFuncBackward", must_not_run, leaf(RNG.standard_normal(1)) * 2)
    y = leaf(RNG.standard_normal(1))
    (gY,) = grad(x, (y,), allow_unused=True)
    assert gY is None

    x = function_apply("MyFuncBackward", must_not_run, leaf(RNG.standard_normal(1)) * 2)
    y = leaf(RNG.standard_normal(1))
    z = leaf(RNG.standard_normal(1))
    gY, gZ = grad(x + z, (y, z), allow_unused=True)
    assert gY is None
    assert gZ is not None

    x = function_apply("MyFuncBackward", must_not_run, leaf(RNG.standard_normal(1)) * 2)
    y = leaf(RNG.standard_normal(1))
    backward(x, inputs=(y,))  # allow_unused is implicitly True!
    assert y.grad is None


def test_grad_with_inputs_prunes_nodes_off_the_path():
    """grad()/backward(inputs=) run only nodes on a path to an input (init_to_execute and
    the min_topo_nr pruning of compute_dependencies), as relied on by
    test_autograd.py::TestAutograd::test_grad_unreachable_discovery."""
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    boom = function_apply("BoomBackward", must_not_run, x * 2)
    out = (boom + y * 3).sum()
    (gy,) = grad(out, y, retain_graph=True)
    np.testing.assert_array_equal(gy, [3.0, 3.0])
    backward(out, inputs=[y])
    np.testing.assert_array_equal(y.grad, [3.0, 3.0])
    assert x.grad is None

    # a branch whose topological_nr is below every input's is not even traversed
    z = leaf([1.0, 1.0])
    h = O.exp(O.exp(z))
    low = function_apply("LowBackward", must_not_run, leaf([1.0, 1.0]))
    assert low.grad_fn.topological_nr < h.grad_fn.topological_nr
    out = (h * low).sum()
    (gh,) = grad(out, h)
    np.testing.assert_array_equal(gh, low.data)

    # the fail op's backward raises, but it is off the path
    w = leaf([1.0])
    out = (O.fail(w * 2) + y.sum()).sum()
    (gy,) = grad(out, y)
    np.testing.assert_array_equal(gy, [1.0, 1.0])


def test_no_could_not_compute_gradients_for_normal_graphs():
    """GraphTask::exec_post_processing raises "could not compute gradients for some
    functions" only if a node was left not ready; it never should be for valid graphs."""
    x = leaf([1.0, 2.0])
    b = x * 2
    out = (b * b + b + O.exp(b)).sum()
    gb, gx = grad(out, (b, x), retain_graph=True)
    np.testing.assert_allclose(gb, 2 * b.data + 1 + np.exp(b.data))
    np.testing.assert_allclose(gx, 2 * gb)
    (gb,) = grad(out, b, retain_graph=True)
    np.testing.assert_allclose(gb, 2 * b.data + 1 + np.exp(b.data))
    backward(out, inputs=[x], retain_graph=True)
    np.testing.assert_allclose(x.grad, 2 * gb)
    # a node that returns None for one of its edges
    x2, y2 = leaf([1.0]), leaf([2.0])
    out = function_apply("HalfBackward", lambda ctx, g: (g, None), x2, y2,
                         forward=lambda ctx, a, b: a + b)
    (out * y2).sum().backward()
    np.testing.assert_array_equal(x2.grad, [2.0])
    np.testing.assert_array_equal(y2.grad, [3.0])


def test_grad_badcalls():
    """Mirrors test_autograd.py::TestAutograd::test_grad_badcalls, test_backward_badcalls,
    test_multi_backward_no_grad, test_backward_no_grad and test_grad_empty_inputs."""
    x = Tensor(np.ones(1))
    with pytest.raises(RuntimeError) as info:
        x.backward()
    assert str(info.value) == ("element 0 of tensors does not require grad and does not have "
                               "a grad_fn")

    y = x ** 2
    with pytest.raises(RuntimeError, match="does not require grad"):
        grad(x, y)
    with pytest.raises(RuntimeError, match="does not require grad"):
        grad(y, x)
    x = leaf([1.0])
    (gx,) = grad(x ** 2, x)
    np.testing.assert_array_equal(gx, [2.0])

    # the index is the root's position
    xx = Tensor(np.ones((5, 5)), requires_grad=True)
    yy = Tensor(np.ones((5, 5)))
    with pytest.raises(RuntimeError, match="^element 1 of tensors does not require grad and "
                                           "does not have a grad_fn$"):
        backward([xx + yy, yy * 2], [np.ones((5, 5)), np.ones((5, 5))])

    # implicit gradients: only for single-element outputs
    b = xx + 2
    with pytest.raises(RuntimeError, match="^grad can be implicitly created only for scalar "
                                           "outputs$"):
        backward([b], [None])
    with pytest.raises(RuntimeError, match="^grad can be implicitly created only for scalar "
                                           "outputs$"):
        b.backward()
    one = leaf([[3.0]])
    (one * 2).backward()  # numel 1, not 0-dim: allowed
    np.testing.assert_array_equal(one.grad, [[2.0]])

    with pytest.raises(ValueError, match="^grad requires non-empty inputs.$"):
        grad(2 * x, [], grad_outputs=np.array([1.0]))


def test_backward_with_empty_inputs_raises():
    """Mirrors test_autograd.py::TestAutograd::test_backward_with_inputs (empty inputs)."""
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="'inputs' argument to backward\\(\\) cannot be "
                                           "empty."):
        backward((2 * x).sum(), inputs=[])


def test_duplicate_backward_root():
    """Mirrors test_autograd.py::TestAutograd::test_duplicate_backward_root."""
    a = rand(5, 5)
    b = rand(5, 5)
    x = a * b
    grad_output = RNG.standard_normal((5, 5))
    backward([x, x], [grad_output, grad_output])
    np.testing.assert_allclose(a.grad, b.data * grad_output * 2)
    np.testing.assert_allclose(b.grad, a.data * grad_output * 2)


# -- accumulation, retain_graph, backward twice ----------------------------------------
def test_accumulate_grad():
    """Mirrors test_autograd.py::TestAutograd::test_accumulate_grad (values; the in-place
    reference semantics are a test of their own below)."""
    grad_output = np.ones((5, 5))
    x = rand(5, 5)
    y = x + 2
    y.backward(grad_output, retain_graph=True)
    x_grad_clone = x.grad.copy()
    y.backward(grad_output)
    np.testing.assert_array_equal(x.grad, x_grad_clone * 2)
    # grad_output itself was not modified by accumulation
    np.testing.assert_array_equal(grad_output, np.ones((5, 5)))


def test_accumulate_grad_in_place_when_not_create_graph():
    """Mirrors test_autograd.py::TestAutograd::test_accumulate_grad (first assertion) and
    test_accumulate_grad_tensor_reference (dense + dense, create_graph=False)."""
    grad_output = np.ones((5, 5))
    x = rand(5, 5)
    y = x + 2
    y.backward(grad_output, retain_graph=True)
    x_grad = x.grad
    x_grad_clone = x.grad.copy()
    y.backward(grad_output)
    np.testing.assert_array_equal(x_grad, x_grad_clone * 2)
    assert x.grad is x_grad


def test_accumulate_grad_does_not_alias_incoming_gradient():
    """The steal-or-clone rule of accumulate_grad.h behind
    test_autograd.py::TestAutograd::test_accumulate_grad_tensor_reference."""
    p, q = leaf([1.0, 1.0]), leaf([1.0, 1.0])
    (p + q).sum().backward()
    assert not np.shares_memory(p.grad, q.grad)
    x = leaf([1.0, 1.0])
    g = np.ones(2)
    (x + 2).backward(g)
    assert not np.shares_memory(x.grad, g)


def test_backward_twice_with_saved_values():
    """Mirrors test_autograd.py::TestAutograd::test_backward_twice_with_saved_values."""
    b = rand(3)
    c = b * b
    c.backward(np.ones(3))
    with pytest.raises(RuntimeError) as info:
        c.backward(np.ones(3))
    assert str(info.value) == ERR_BACKWARD_TWICE
    assert str(info.value) == (
        "Trying to backward through the graph a second time (or directly access saved tensors "
        "after they have already been freed). Saved intermediate values of the graph are freed "
        "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
        "backward through the graph a second time or if you need to access saved tensors after "
        "calling backward.")
    # grad() frees the graph too
    e = O.exp(b).sum()
    grad(e, b)
    with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
        grad(e, b)


def test_backward_twice_without_saved_values():
    """Mirrors test_autograd.py::TestAutograd::test_backward_twice_without_saved_values."""
    b = rand(3)
    c = b + 1
    assert c.grad_fn.name == "AddBackward0"
    c.backward(np.ones(3))
    c.backward(np.ones(3))
    np.testing.assert_array_equal(b.grad, np.full(3, 2.0))


def test_backward_twice_retained_graph():
    """Mirrors test_autograd.py::TestAutograd::test_backward_twice_retained_graph_with_saved_values
    and test_accumulate_grad: retain_graph twice gives 2x, then a free, then the error."""
    x = rand(4)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad, 2 * x.data)
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad, 4 * x.data)
    y.backward()
    np.testing.assert_allclose(x.grad, 6 * x.data)
    with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
        y.backward()


# -- sequence_nr / topological_nr ------------------------------------------------------
def test_a_leaf_holds_its_accumulator_weakly():
    """As PyTorch's AutogradMeta (a weak_ptr to the AccumulateGrad): an accumulator nothing
    holds is freed with the hooks registered on the node, and the next is a new node;
    a tensor hook stays with the leaf. (torch 2.14: a prehook on
    ``y.view_as(y).grad_fn.next_functions[0][0]`` dropped at once never runs.)"""
    import weakref

    y = leaf([1.0, 2.0])
    seen = []
    acc = y.grad_accumulator
    assert y.grad_accumulator is acc              # alive while something holds it
    acc.register_prehook(lambda grads: seen.append("dropped"))
    gone = weakref.ref(acc)
    del acc
    assert gone() is None                         # freed by reference counting alone
    (y * 2.0).sum().backward()
    assert seen == []
    np.testing.assert_array_equal(y.grad, [2.0, 2.0])
    out = y * 3.0                                 # the graph's edge holds the node
    assert out.grad_fn.next_edges[0][0] is y.grad_accumulator

    z = leaf([1.0, 2.0])
    z.register_hook(lambda g: seen.append("tensor hook"))
    (z * 2.0).sum().backward()
    (z * 2.0).sum().backward()
    assert seen == ["tensor hook", "tensor hook"]


def test_sequence_and_topological_numbers():
    """NOTE [ Sequence Number ] and NOTE [ Topological Number ] (function.h) and
    AccumulateGrad's UINT64_MAX sequence_nr (accumulate_grad.cpp)."""
    a, b = leaf([1.0]), leaf([2.0])
    acc = a.grad_accumulator
    assert acc.name == "AccumulateGrad"
    assert acc.sequence_nr == 2 ** 64 - 1 == UINT64_MAX
    assert acc.topological_nr == 0
    assert b.grad_accumulator.sequence_nr == UINT64_MAX

    c = O.exp(a)
    d = O.sin(c)
    e = d * b
    f = O.exp(O.exp(O.exp(e))) + c
    nodes = [c.grad_fn, d.grad_fn, e.grad_fn, f.grad_fn]
    seqs = [n.sequence_nr for n in nodes]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4   # later ops, higher numbers

    # every node: topo = 1 + max(topo of its next nodes); 0 with no valid edge
    seen, stack = set(), [f.grad_fn]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        nxt = [e[0] for e in n.next_edges if e is not None]
        assert n.topological_nr == (1 + max(m.topological_nr for m in nxt) if nxt else 0)
        stack.extend(nxt)
    assert c.grad_fn.topological_nr == 1
    assert d.grad_fn.topological_nr == 2
    assert e.grad_fn.topological_nr == 3
    assert f.grad_fn.topological_nr == 7

    # a node with only invalid edges has topo 0; a constant operand gives an invalid edge
    lone = Node("LoneBackward", [None, None], [InputMetadata((1,), np.float64, acc.device)])
    assert lone.topological_nr == 0
    assert (a * 2).grad_fn.next_edges[1] is None

    # sequence numbers are thread-local: they start from zero on a new thread
    got = []

    def make():
        x = leaf([1.0])
        got.append([O.exp(x).grad_fn.sequence_nr, O.sin(x).grad_fn.sequence_nr])

    t = threading.Thread(target=make)
    t.start()
    t.join(10)
    assert got == [[0, 1]]


# -- errors ----------------------------------------------------------------------------
def test_error_in_node_reaches_caller():
    """Mirrors test_autograd.py::TestAutograd::test_preserve_backtrace and
    test_custom_function_exception: the original exception (type and traceback) reaches the
    caller; ``exc.gradcli_node`` names the node; the engine stays usable afterwards."""
    class MyError(ValueError):
        pass

    def bw(ctx, g):
        raise MyError("something")

    t = Tensor(RNG.random(10), requires_grad=True)
    foo = function_apply("FooBackward", bw, t)
    with pytest.raises(MyError, match="^something$") as info:
        foo.sum().backward()
    assert info.value.gradcli_node is foo.grad_fn
    tb_str = "\n".join(traceback.format_tb(info.value.__traceback__))
    assert 'raise MyError("something")' in tb_str

    # the fail op: an error while sibling tasks are still queued on this thread
    x = leaf([1.0, 2.0])
    sibling = O.exp(x)                 # created first: lower sequence_nr, runs after the fail
    failing = O.fail(x * 3, message="boom")
    out = (sibling + failing).sum()
    with pytest.raises(O.BackwardFailure, match="^boom$") as info:
        out.backward()
    assert info.value.gradcli_node.name == "FailBackward0"
    assert engine_mod.TLS.worker_device == NO_DEVICE
    assert engine_mod.TLS.current_graph_task is None

    # the engine stays usable on this thread
    x2 = leaf([1.0, 2.0])
    (O.exp(x2) * x2).sum().backward()
    np.testing.assert_allclose(x2.grad, np.exp(x2.data) * (1 + x2.data))


@pytest.mark.timeout(30)
def test_error_in_node_does_not_poison_other_threads():
    """A failing backward on one thread leaves concurrent backwards on others intact
    (TestMultithreadAutograd, test_multi_grad_all_hooks' error case)."""
    def fn(i):
        x = leaf(np.ones(4))
        y = O.exp(x)
        if i % 2:
            with pytest.raises(O.BackwardFailure):
                O.fail(y).sum().backward()
        else:
            y.sum().backward()
            np.testing.assert_allclose(x.grad, np.exp(1.0))

    run_threads(fn, num_threads=8, pass_idx=True)


# -- reentrant backward ----------------------------------------------------------------
@pytest.mark.timeout(30)
def test_simple_reentrant():
    """Mirrors test_autograd.py::TestAutograd::test_simple_reentrant."""
    y_data = RNG.standard_normal((2, 2))

    def forward(ctx, x):
        with enable_grad():
            ctx.x = Tensor(x.copy(), requires_grad=True)
            ctx.y = Tensor(y_data, requires_grad=True)
            ctx.output_var = ctx.x * ctx.y
        return ctx.output_var.data.copy()

    def bw(ctx, g):
        with enable_grad():
            ctx.output_var.sum().backward()
        return ctx.x.grad * g

    x = rand(2, 2)
    out = function_apply("ReenterBackward", bw, x, forward=forward)
    out.sum().backward()
    np.testing.assert_allclose(x.grad, y_data)


@pytest.mark.timeout(30)
def test_reentrant_child_error():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_child_error."""
    class SimulatedError(Exception):
        pass

    def simulate_error(ctx, g):
        raise SimulatedError("Simulate error on backward pass")

    # Parent graph.
    a = rand(3, 3)
    c = a * a
    # Reentrant child graph.
    b = rand(3, 3)
    e = b * b
    f = function_apply("SimulateBackwardErrorBackward", simulate_error, e)
    reentrant_root = f.sum()

    def reentrant_bw(ctx, g):
        reentrant_root.backward()
        return g

    d = function_apply("ReentrantFuncBackward", reentrant_bw, c)
    with pytest.raises(SimulatedError, match="Simulate error") as info:
        d.sum().backward()
    assert info.value.gradcli_node is f.grad_fn       # the innermost failing node
    assert a.grad is None
    # the engine stays usable
    d2 = function_apply("IdBackward", identity_backward, a * a)
    d2.sum().backward()
    np.testing.assert_allclose(a.grad, 2 * a.data)


@pytest.mark.timeout(30)
def test_reentrant_priority():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_priority."""
    order = []

    def my_bw(ctx, g):
        order.append("MyFunction")
        return g

    def reentrant_forward(ctx, x):
        with enable_grad():
            ctx.x = Tensor(np.array(x, copy=True), requires_grad=True) - 1
        return ctx.x.data.copy()

    def reentrant_bw(ctx, g):
        order.append("Reentrant")
        if ctx.x.data < 0:
            return g
        with enable_grad():
            function_apply("ReentrantBackward", reentrant_bw, ctx.x,
                           forward=reentrant_forward).backward()
        return g

    a = function_apply("MyFunctionBackward", my_bw, leaf(6.0))
    b = function_apply("ReentrantBackward", reentrant_bw, leaf(9.0), forward=reentrant_forward)
    v = a * b
    v.backward()
    assert len(order) == 11
    assert order.count("Reentrant") == 10
    assert order[-1] == "MyFunction"


def _deep_reentrant(value):
    def forward(ctx, x):
        with enable_grad():
            ctx.x = Tensor(np.array(x, copy=True), requires_grad=True) - 1
        return ctx.x.data.copy()

    def bw(ctx, g):
        if ctx.x.data < 0:
            return g
        with enable_grad():
            function_apply("DeepReentrantBackward", bw, ctx.x, forward=forward).sum().backward()
        return g

    v = leaf(value)
    function_apply("DeepReentrantBackward", bw, v, forward=forward).sum().backward()
    return v


@pytest.mark.timeout(30)
def test_deep_reentrant():
    """Mirrors test_autograd.py::TestAutograd::test_deep_reentrant (2000 levels, ~0.5 s):
    nesting past max_recursion_depth hands the graph task to a pool thread instead of
    overflowing the Python stack."""
    engine = engine_mod.get_default_engine()
    limit = sys.getrecursionlimit()
    v = _deep_reentrant(2000.0)
    assert float(v.grad) == 1.0
    assert sys.getrecursionlimit() == limit
    # each thread nests about max_recursion_depth levels before handing over to the pool
    assert engine.max_recursion_depth < 100
    assert len(engine._thread_pool.threads) >= 2000 // (2 * engine.max_recursion_depth)
    n_threads = len(engine._thread_pool.threads)

    # Test stack overflow escape mechanism multiple times
    # to ensure reusing workers in the pool works fine
    v2 = _deep_reentrant(200.0)
    assert float(v2.grad) == 1.0
    assert len(engine._thread_pool.threads) == n_threads


def _reentrant_with_callbacks(install_callbacks_in_depths):
    counter = {"inner": 0, "outer": 0}

    def inc_inner_counter():
        counter["inner"] += 1

    def inc_outer_counter():
        counter["outer"] += 1

    def my_bw(ctx, g):
        if 1 in install_callbacks_in_depths:
            queue_callback(inc_inner_counter)
        return g

    def reentrant_bw(ctx, g):
        if 0 in install_callbacks_in_depths:
            queue_callback(inc_outer_counter)
        tmp_inp = Tensor(g.copy(), requires_grad=True)
        with enable_grad():
            tmp_out = function_apply("MyFuncBackward", my_bw, tmp_inp).sum()
        tmp_out.backward()
        # the nested backward ran its own callbacks only
        assert counter["outer"] == 0
        return g

    t1 = Tensor(RNG.random((3, 3)), requires_grad=True)
    t2 = function_apply("MyReentrantFuncBackward", reentrant_bw, t1)
    t3 = t2.sum()
    backward([t3])
    return counter


@pytest.mark.timeout(30)
def test_reentrant_with_callbacks_depth_0():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_with_callbacks_depth_0."""
    assert _reentrant_with_callbacks([0]) == {"outer": 1, "inner": 0}


@pytest.mark.timeout(30)
def test_reentrant_with_callbacks_depth_1():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_with_callbacks_depth_1."""
    assert _reentrant_with_callbacks([1]) == {"outer": 0, "inner": 1}


@pytest.mark.timeout(30)
def test_reentrant_with_callbacks_both_depths():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_with_callbacks_both_depths."""
    assert _reentrant_with_callbacks([0, 1]) == {"outer": 1, "inner": 1}


@pytest.mark.timeout(30)
def test_reentrant_with_leaf_variable_hook():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_with_leaf_variable_hook."""
    handle = None
    param = Tensor(RNG.random(10), requires_grad=True)
    seen = []

    def add_gradient_penalty_to_grad(g):
        handle.remove()
        old_param_grad = g
        param.grad = None
        with enable_grad():
            gt = Tensor(g.copy(), requires_grad=True)
            new_param = Tensor(param.data.copy(), requires_grad=True)
            out = ((gt * 2) + new_param).sum()
            out.backward()
        res = gt.grad + g
        param.grad = old_param_grad
        seen.append(res)
        return res

    handle = param.register_hook(add_gradient_penalty_to_grad)
    tmp = param * param
    tmp.sum().backward()
    np.testing.assert_allclose(seen[0], 2 * param.data + 2)
    # the hook reset .grad to the incoming gradient (2 * param); AccumulateGrad then adds
    # the hook's result (2 * param + 2) to it, as in PyTorch
    np.testing.assert_allclose(param.grad, 4 * param.data + 2)


# -- TestMultithreadAutograd -----------------------------------------------------------
@pytest.mark.timeout(30)
def test_multithreaded_exception_propagation():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_multithreaded_exception_propagation."""
    def fn():
        raise AssertionError("from a thread")

    with pytest.raises(AssertionError):
        run_threads(fn)


@pytest.mark.timeout(30)
def test_simple_backward():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_simple_backward."""
    def train_fn():
        x = Tensor(np.ones((5, 5)), requires_grad=True)
        y = (x + 3) * (x + 4) * 0.5
        y.sum().backward()
        np.testing.assert_array_equal(x.grad, x.data + 3.5)

    run_threads(train_fn)


@pytest.mark.timeout(30)
def test_simple_backward_same_input():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_simple_backward_same_input."""
    def train_fn_backward(x):
        y = (x + 3) * (x + 4) * 0.5
        y.sum().backward()

    x = Tensor(np.ones((5, 5)), requires_grad=True)
    run_threads(train_fn_backward, (x,))
    # all threads accumulate into the same .grad: exactly num_threads * gradient
    np.testing.assert_array_equal(x.grad, 10 * (x.data + 3.5))

    def train_fn_grad(x):
        y = (x + 3) * (x + 4) * 0.5
        grads = grad(y.sum(), x)
        assert len(grads) == 1
        np.testing.assert_array_equal(grads[0], x.data + 3.5)

    # functional grad() does not accumulate into .grad
    run_threads(train_fn_grad, (x,))
    np.testing.assert_array_equal(x.grad, 10 * (x.data + 3.5))


@pytest.mark.timeout(30)
def test_shared_graph_retain_graph_accumulates_exactly():
    """test_autograd.py::TestMultithreadAutograd::test_simple_backward_same_input with the
    whole graph shared: 10 threads backward one graph with retain_graph=True, repeatedly;
    every contribution lands in .grad exactly once."""
    x = Tensor(np.ones((5, 5)), requires_grad=True)
    y = ((x + 3) * (x + 4) * 0.5).sum()
    rounds = 5

    def train_fn():
        for _ in range(rounds):
            y.backward(retain_graph=True)

    run_threads(train_fn)
    np.testing.assert_array_equal(x.grad, 10 * rounds * (x.data + 3.5))


@pytest.mark.timeout(30)
def test_python_thread_in_middle():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_python_thread_in_middle."""
    # Case 1: multiple backward with python threads, retain_graph=False
    # should throw error in some threads with no retain_graph.
    success_vs_raises = [0, 0]
    errors = []
    lock = threading.Lock()

    def train_fn_no_retain_graph(x):
        y = x + x ** 2
        try:
            y.sum().backward()
            with lock:
                success_vs_raises[0] += 1
        except RuntimeError as error:
            with lock:
                success_vs_raises[1] += 1
                errors.append(error)

    x_no_retain = Tensor(np.ones((5, 5)), requires_grad=True)
    y_no_retain = x_no_retain + x_no_retain ** 2
    run_threads(train_fn_no_retain_graph, (y_no_retain,), num_threads=5)
    assert success_vs_raises[0] >= 1
    assert sum(success_vs_raises) == 5
    for error in errors:
        assert str(error) == ERR_BACKWARD_TWICE

    # multiple backward with python threads, no error with retain_graph=True
    def train_fn_retain_graph(x):
        y = x + x ** 2
        y.sum().backward(retain_graph=True)

    x_retain = Tensor(np.ones((5, 5)), requires_grad=True)
    y_retain = x_retain + x_retain ** 2
    run_threads(train_fn_retain_graph, (y_retain,), num_threads=5)
    xr = x_retain.data
    np.testing.assert_array_equal(x_retain.grad, 5 * (4 * xr ** 3 + 6 * xr ** 2 + 4 * xr + 1))


@pytest.mark.timeout(30)
def test_reentrant_in_threads():
    """Reentrant backwards started concurrently from several threads (the reentrant tests
    above, run the way TestMultithreadAutograd runs its tests)."""
    def fn():
        v = _deep_reentrant(100.0)
        assert float(v.grad) == 1.0

    run_threads(fn, num_threads=4)


def test_private_engine_instance():
    """An Engine instance other than the default runs a backward too (``engine=``)."""
    engine = Engine()
    x = leaf([1.0, 2.0])
    backward((x * x).sum(), engine=engine)
    np.testing.assert_array_equal(x.grad, [2.0, 4.0])
    engine.stop()


# -- Note [Stealing gradients] -----------------------------------------------------------
def test_accumulate_grad_steals_only_a_sum_the_buffer_created():
    """The rule holds on any interpreter: no reference count is consulted. A
    sum the InputBuffer made is the engine's own and is kept; any array that
    came from outside the buffer (a node's output, the caller's gradient) is
    copied."""
    from gradcli.autograd.input_buffer import DeterministicInputBuffer, InputBuffer
    from gradcli.autograd.node import AccumulateGrad
    from gradcli.autograd.state import no_grad

    # The engine applies nodes with grad mode off unless create_graph is set
    # (Note [Differentiable .grad]); applied by hand here, so the same.
    with no_grad():
        _steal_only_sums(leaf)


def _steal_only_sums(leaf):
    from gradcli.autograd.input_buffer import DeterministicInputBuffer, InputBuffer
    from gradcli.autograd.node import AccumulateGrad

    x = leaf([1.0, 2.0])
    acc = AccumulateGrad(x)
    single = InputBuffer([None])
    g = np.ones(2)
    single.add(0, g)
    assert not single.owns(0)
    acc.apply(single)
    assert x.grad is not g and not np.shares_memory(x.grad, g)

    y = leaf([1.0, 2.0])
    summed = InputBuffer([None])
    summed.add(0, np.ones(2))
    summed.add(0, np.ones(2))
    assert summed.owns(0)
    total = summed[0]
    AccumulateGrad(y).apply(summed)
    assert y.grad is total                       # stolen: nobody else holds it

    det = DeterministicInputBuffer([None])
    det.add(0, np.ones(2), 1, 0)
    det.add(0, np.ones(2), 2, 0)
    variables = det.variables()
    assert variables.owns(0)
    one = DeterministicInputBuffer([None])
    one.add(0, g, 1, 0)
    assert not one.variables().owns(0)


def test_a_hook_result_is_never_stolen():
    """A tensor hook that replaces a summed gradient gives the slot an array from
    outside the engine: .grad must not alias what the hook returned."""
    x = leaf([1.0, 2.0])
    kept = []

    def hook(g):
        out = g * 1.0
        kept.append(out)
        return out

    x.register_hook(hook)
    (x * 2.0 + x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [5.0, 5.0])
    assert not np.shares_memory(x.grad, kept[0])


def _recorded_sums(monkeypatch):
    """The arrays an AccumulateGrad was handed in a slot its buffer owns, recorded as it
    asks (``InputBuffer.owns``; no hook sees them: a hook would make the gradient a copy).
    A slot that received several contributions owns their sum."""
    from gradcli.autograd.input_buffer import InputBuffer

    sums = []
    real_owns = InputBuffer.owns

    def owns(self, pos):
        owned = real_owns(self, pos)
        if owned:
            sums.append(self[pos])
        return owned
    monkeypatch.setattr(InputBuffer, "owns", owns)
    return sums


def test_summed_leaf_gradient_is_stolen_in_a_real_backward(monkeypatch):
    """x feeds two ops: its buffer sums two contributions into a fresh array,
    which AccumulateGrad keeps instead of copying."""
    sums = _recorded_sums(monkeypatch)
    x = leaf([1.0, 2.0])
    (x * 2.0 + x * 3.0).sum().backward()
    assert any(x.grad is s for s in sums)


def _recorded_mul_vjps(monkeypatch, vjp=None):
    """mul's VJPs, recording what they return (or ``vjp`` in place of them)."""
    mul = O.OPS["mul"]
    real, made = mul.vjps, []

    def recording(k):
        def call(g, ans, *inputs, **args):
            out = (vjp or real[k])(g, ans, *inputs, **args)
            made.append(out)
            return out
        return call
    monkeypatch.setattr(mul, "vjps", tuple(recording(k) for k in range(len(real))))
    return made


def test_a_fresh_vjp_result_becomes_grad_without_a_copy(monkeypatch):
    """Note [Stealing gradients]: the array mul's VJP made for x, which nothing else
    holds, is x.grad itself, in the fast path and in the general one."""
    made = _recorded_mul_vjps(monkeypatch)
    x = leaf([1.0, 2.0])
    (x * 3.0).sum().backward()
    assert x.grad is made[0]
    made.clear()
    y = leaf([1.0, 2.0])
    with set_multithreading_enabled(False):
        backward((y * 3.0).sum(), deterministic=False)
    assert y.grad is made[0]
    np.testing.assert_array_equal(y.grad, [3.0, 3.0])


def _recorded_searches(monkeypatch):
    """Each search for a VJP's output among what its node holds (Note [Stealing
    gradients]), recorded as (the items searched, the output) as it is made."""
    from gradcli.ops import core

    searches = []
    real_holds = core._holds

    def holds(items, o):
        searches.append((list(items), o))
        return real_holds(items, o)

    monkeypatch.setattr(core, "_holds", holds)
    return searches


def _six_branches_into_one_leaf():
    """``sum(x * k for k in 1..6)``'s backward, a fan-in of six branches into one leaf ``x``."""
    x = leaf([1.0, 2.0])
    total = x * 1.0
    for k in range(2, 7):
        total = total + x * float(k)
    total.sum().backward()
    np.testing.assert_array_equal(x.grad, [21.0, 21.0])
    return x


def test_only_a_gradient_alone_in_its_slot_is_looked_for_among_saved_values(monkeypatch):
    """Note [Stealing gradients]: in a fan-in into one leaf, every branch's gradient after
    the first is summed into the slot (a sum the buffer owns), so only the first is looked
    for among its node's inputs and saved values; the leaf still keeps the sum itself."""
    searches = _recorded_searches(monkeypatch)
    sums = _recorded_sums(monkeypatch)
    x = _six_branches_into_one_leaf()
    assert len({id(o) for _, o in searches}) == 1     # the first branch's gradient alone
    assert x.grad is sums[-1]


def test_a_node_whose_leaf_slots_are_all_summed_does_not_mark_fresh_outputs(monkeypatch):
    """Note [Stealing gradients]: a node whose every edge into a leaf's accumulator meets a
    slot already filled decides nothing by its outputs' freshness, so its ``apply`` does not
    look (only the first branch of a fan-in into one leaf does); a node with one such edge
    summed and another into an empty slot still looks, and the gradients are unchanged."""
    from gradcli.ops import core

    looked = []
    real = core.OpBackward._mark_fresh

    def mark_fresh(self, out, grads, inputs, ans):
        looked.append(self.name)
        return real(self, out, grads, inputs, ans)

    monkeypatch.setattr(core.OpBackward, "_mark_fresh", mark_fresh)
    _six_branches_into_one_leaf()
    assert looked == ["MulBackward0"]                  # one of the six branches
    looked.clear()
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a * b + a * 2.0).sum().backward()    # a * 2.0 runs first; then a * b: a's slot summed, b's empty
    np.testing.assert_array_equal(a.grad, [5.0, 6.0])
    np.testing.assert_array_equal(b.grad, [1.0, 2.0])
    assert looked.count("MulBackward0") == 2


def test_a_fresh_gradient_is_looked_for_among_what_its_vjp_was_handed(monkeypatch):
    """Note [Stealing gradients]: a VJP can hand back only what it was given (the incoming
    gradients, the saved arrays, the forward's output); the node's saved Tensors, which a
    backward without create_graph does not hand it, are not searched."""
    searches = _recorded_searches(monkeypatch)
    x, y = leaf([1.0, 2.0]), leaf([5.0, 7.0])
    (x * y).sum().backward()
    np.testing.assert_array_equal(x.grad, [5.0, 7.0])
    searched = [item for items, _ in searches for item in items]
    assert searched and not any(type(item) is Tensor for item in searched)
    assert any(item is y.data for item in searched)      # the saved arrays are


def test_a_stolen_gradient_never_aliases_a_saved_array_or_leaf(monkeypatch):
    """A VJP that hands back a saved input (here the other leaf's own data) or the
    forward's output: not fresh, so .grad is a copy."""
    _recorded_mul_vjps(monkeypatch, vjp=lambda g, ans, a, b: b)
    x, y = leaf([1.0, 2.0]), leaf([5.0, 7.0])
    (x * y).sum().backward()
    assert not np.shares_memory(x.grad, y.data) and not np.shares_memory(y.grad, y.data)
    np.testing.assert_array_equal(x.grad, [5.0, 7.0])
    monkeypatch.undo()
    _recorded_mul_vjps(monkeypatch, vjp=lambda g, ans, a, b: ans)
    x, y = leaf([1.0, 2.0]), leaf([5.0, 7.0])
    p = x * y
    p.sum().backward()
    assert not np.shares_memory(x.grad, p.data) and not np.shares_memory(x.grad, y.grad)


def test_a_stolen_gradient_never_aliases_a_retained_or_incoming_gradient(monkeypatch):
    """A VJP that passes its incoming gradient on (as AddBackward0 does): that array is
    the root's gradient or a retained one, so .grad is a copy."""
    made = _recorded_mul_vjps(monkeypatch, vjp=lambda g, ans, a, b: g)
    x = leaf([1.0, 2.0])
    root = np.array([4.0, 4.0])
    backward(x * 2.0, root)
    assert x.grad is not root and not np.shares_memory(x.grad, root)
    x = leaf([1.0, 2.0])
    z = x * 2.0
    z.retain_grad()
    (z * 3.0).sum().backward()
    assert made and not np.shares_memory(x.grad, z.grad)
    np.testing.assert_array_equal(x.grad, [1.0, 1.0])


def test_a_gradient_a_hook_was_shown_is_never_stolen():
    """A tensor hook, an accumulator pre-hook and a producer's post hook may keep the
    gradient they see: .grad never aliases what they kept."""
    x = leaf([1.0, 2.0])
    kept = []
    x.register_hook(lambda g: kept.append(g))
    (x * 3.0).sum().backward()
    assert not np.shares_memory(x.grad, kept[0])
    y = leaf([1.0, 2.0])
    seen = []
    acc = y.grad_accumulator     # held: a leaf holds its accumulator weakly, as PyTorch's
    acc.register_prehook(lambda grads: seen.append(grads[0]))
    (y * 2.0 + y * 3.0).sum().backward()
    assert not np.shares_memory(y.grad, seen[0])
    w = leaf([1.0, 2.0])
    out = w * 3.0
    given = []
    out.grad_fn.register_hook(lambda grad_inputs, grad_outputs: given.append(grad_inputs[0]))
    out.sum().backward()
    assert not np.shares_memory(w.grad, given[0])
    np.testing.assert_array_equal(w.grad, [3.0, 3.0])


# -- GraphRoot is the engine's own node -------------------------------------------------------
def test_predicted_order_and_trace_never_show_graph_root():
    a, b = leaf([1.0, 2.0]), leaf([3.0])
    y1, y2 = (a * 2.0).sum(), (b * b).sum()
    order = predicted_execution_order([y1.gradient_edge(), y2.gradient_edge()])
    assert order and not [fn for fn in order if fn.name == "GraphRoot"]
    trace = []
    with set_multithreading_enabled(False):
        backward([y1, y2], retain_graph=True, trace=trace)
    assert [r[0] for r in trace] == order
    # grad() semantics: only the nodes on a path to an input.
    only_a = predicted_execution_order([y1.gradient_edge(), y2.gradient_edge()],
                                       [a.gradient_edge()])
    assert [fn.name for fn in only_a] == ["SumBackward0", "MulBackward0"]


# -- in-place ops on views, first and second order (test_inplace_on_view_*) ------------
def _torch():
    return pytest.importorskip("torch")


def _narrow(t, dim, start, length):
    index = [slice(None)] * t.ndim
    index[dim] = slice(start, start + length)
    return O.slice(t, index=tuple(index))


def test_inplace_on_view_gradcheck_first_and_second_order():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_gradcheck: two
    in-place muls on views of views of one clone; the gradients and, under create_graph
    (its gradgradcheck), the second-order gradients through CopySlices equal PyTorch's."""
    torch = _torch()
    rng = np.random.default_rng(3)
    av, bv, vv = rng.standard_normal((4, 4)), rng.standard_normal((2, 2)), rng.standard_normal((4, 4))

    def ours():
        a, b = leaf(av), leaf(bv)
        x = a * 1
        _narrow(_narrow(x, 1, 2, 2), 0, 1, 2).mul_(b)
        _narrow(_narrow(x, 1, 0, 2), 0, 1, 2).mul_(b)
        assert x.grad_fn.name == "CopySlices"
        ga, gb = grad((x * leaf(vv, False)).sum(), [a, b], create_graph=True)
        gga, ggb = grad((ga * ga).sum() + (gb * gb).sum(), [a, b])
        return [g.data for g in (ga, gb)] + [gga, ggb]

    def theirs():
        a = torch.tensor(av, requires_grad=True)
        b = torch.tensor(bv, requires_grad=True)
        x = a.clone()
        x.narrow(1, 2, 2).narrow(0, 1, 2).mul_(b)
        x.narrow(1, 0, 2).narrow(0, 1, 2).mul_(b)
        ga, gb = torch.autograd.grad((x * torch.tensor(vv)).sum(), [a, b], create_graph=True)
        gg = torch.autograd.grad((ga * ga).sum() + (gb * gb).sum(), [a, b])
        return [t.detach().numpy() for t in (ga, gb, *gg)]

    for got, want in zip(ours(), theirs()):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_inplace_on_view_double_backward_through_copy_slices():
    """Mirrors the gradgradcheck half of test_autograd.py::TestAutograd::
    test_inplace_on_view_python: ``x = b * b; x[1:].mul_(b[1:])``: PyTorch 2.13 gives
    the gradient [2, 12, 27] (recorded: AddBackward0) and the second order [2, 12, 18]."""
    b = leaf([1.0, 2.0, 3.0])
    x = b * b
    O.slice(x, index=(slice(1, None),)).mul_(O.slice(b, index=(slice(1, None),)))
    g, = grad(x.sum(), [b], create_graph=True)
    assert g.grad_fn is not None and g.grad_fn.name == "AddBackward0"
    np.testing.assert_array_equal(g.data, [2.0, 12.0, 27.0])
    gg, = grad(g.sum(), [b])
    np.testing.assert_array_equal(gg, [2.0, 12.0, 18.0])


def test_inplace_on_view_makes_base_require_grad():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_makes_base_require_grad:
    a base that does not require grad starts to when a view of it is changed in place by
    a tensor that does; its gradient flows to ``b`` only through the view's region."""
    a = leaf(np.arange(16.0).reshape(4, 4), requires_grad=False)
    b = leaf(np.full((4, 2), 3.0))
    x = a * 1
    assert not x.requires_grad
    _narrow(x, 1, 2, 2).mul_(b)
    assert x.requires_grad and x.grad_fn.name == "CopySlices"
    (x * x).sum().backward()
    np.testing.assert_allclose(b.grad, 2 * 3.0 * np.arange(16.0).reshape(4, 4)[:, 2:] ** 2)


def test_inplace_on_view_backprop_view_of_view_second_order():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_backprop_view_of_view,
    then differentiates again: a view made before its base changed in place regenerates
    its history (AsStridedBackward0), and that node records under create_graph too."""
    torch = _torch()
    av = np.array([[1.0, 2.0], [3.0, 4.0]])

    a = leaf(av)
    x = a * a
    v = _narrow(x, 0, 0, 1)
    w = _narrow(x, 0, 0, 1)
    v.mul_(2.0)
    s = (w * w).sum()
    assert w.grad_fn.name == "AsStridedBackward0"
    g, = grad(s, [a], create_graph=True)
    gg, = grad(g.sum(), [a])

    ta = torch.tensor(av, requires_grad=True)
    tx = ta * ta
    tv, tw = tx.narrow(0, 0, 1), tx.narrow(0, 0, 1)
    tv.mul_(2.0)
    tg, = torch.autograd.grad((tw * tw).sum(), [ta], create_graph=True)
    tgg, = torch.autograd.grad(tg.sum(), [ta])
    np.testing.assert_allclose(g.data, tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gg, tgg.numpy(), rtol=1e-12)


# -- in-place ops under threads: shared graphs, device threads (TestMultithreadAutograd) --
def _sim_leaf(values, dev):
    from gradcli.devices import device, to_device  # noqa: PLC0415

    return Tensor(to_device(np.asarray(values, dtype=np.float64), device(dev)), requires_grad=True)


def _run_threads(work, n):
    errors = []

    def run(i):
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads)
    return errors


@pytest.mark.timeout(60)
def test_copy_slices_graph_shared_by_concurrent_backwards_on_device_threads():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_simple_backward_same_input
    with an in-place op on a view of a sim-device activation: every thread's backward
    of the shared graph runs CopySlices on the device thread and gets PyTorch's
    gradient ([0, 36, 288, 972, 256, 500], torch 2.13 on the same code), on the device."""
    from gradcli.devices import device, device_of  # noqa: PLC0415

    a = _sim_leaf(np.arange(6.0), "sim:1")
    x = a * a
    O.slice(x, index=(slice(1, 4),)).mul_(3.0)
    s = (x * x).sum()
    results = []

    def work(_):
        g, = grad(s, [a], retain_graph=True)
        assert device_of(g) is device("sim:1")
        results.append(np.asarray(g))

    assert _run_threads(work, 6) == []
    assert len(results) == 6
    for g in results:
        np.testing.assert_array_equal(g, [0.0, 36.0, 288.0, 972.0, 256.0, 500.0])


@pytest.mark.timeout(60)
def test_version_check_under_device_threads_in_concurrent_backwards():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_simple_backward_same_input
    with a saved tensor changed in place, on a sim device: each concurrent backward fails
    on the device thread with PyTorch's version error, naming the node, and none
    returns a gradient."""
    a = _sim_leaf([1.0, 2.0, 3.0], "sim:2")
    y = O.exp(a)
    z = y.sum()
    y.mul_(2.0)
    messages = []

    def work(_):
        grad(z, [a], retain_graph=True)

    errors = _run_threads(work, 5)
    messages = [str(e) for e in errors]
    assert len(messages) == 5
    assert all("modified by an inplace operation" in m and "ExpBackward0" in m
               for m in messages), messages


@pytest.mark.timeout(60)
def test_view_regenerated_on_device_thread_gives_pytorchs_gradient():
    """A view made before its base changed in place (AsStridedBackward0 regenerated,
    test_autograd.py::TestAutograd::test_inplace_on_view_backprop_view_of_view's shape)
    on a sim device: the gradient stays on the device and is PyTorch's [0, 16, 0, ...]."""
    from gradcli.devices import device, device_of  # noqa: PLC0415

    b = _sim_leaf(np.arange(6.0), "sim:2")
    y = b * b
    w = O.slice(y, index=(slice(0, 2),))
    y.mul_(2.0)
    g, = grad((w * w).sum(), [b])
    assert device_of(g) is device("sim:2")
    np.testing.assert_array_equal(np.asarray(g), [0.0, 16.0, 0.0, 0.0, 0.0, 0.0])


def test_inplace_on_view_weak_grad_fn():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_weak_grad_fn: the view
    rebased by relu_ is dropped (and collected) before the backward of a clone of it; the
    backward still runs through CopySlices (PyTorch: s == 1, a.grad = [1, 1, 0, ...])."""
    import gc  # noqa: PLC0415

    a = leaf(np.arange(10.0))
    b = O.reshape(O.slice(a, index=(slice(0, 2),)) * 1, shape=(-1,))
    b.relu_()
    c = b * 1
    del b
    gc.collect()
    s = c.sum()
    assert float(s.data) == 1.0
    s.backward()
    np.testing.assert_array_equal(a.grad, [0.0, 1.0] + [0.0] * 8)


def test_inplace_on_view_backward_create_graph():
    """Mirrors the second half of test_autograd.py::TestAutograd::test_inplace_on_view_backward
    (an in-place threshold on ``(inputs + 1).view_as(inputs)``, then sigmoid, a
    create_graph gradient and a backward of its sum): no error, and the gradients are
    PyTorch's (relu_ for threshold(0, 0, inplace=True))."""
    torch = _torch()
    xv = np.linspace(-2.0, 1.5, 12).reshape(1, 3, 2, 2)

    x = leaf(xv)
    tmp1 = O.reshape(x + 1.0, shape=xv.shape)
    tmp1.relu_()
    p = O.sigmoid(tmp1)
    g, = grad(p, [x], grad_outputs=[np.ones(xv.shape)], create_graph=True, retain_graph=True)
    g.sum().backward()

    tx = torch.tensor(xv, requires_grad=True)
    t1 = (tx + 1).view_as(tx)
    torch.nn.functional.threshold(t1, 0.0, 0.0, True)
    tp = torch.sigmoid(t1)
    tg, = torch.autograd.grad(tp, tx, torch.ones(tp.shape, dtype=tp.dtype), create_graph=True,
                              retain_graph=True)
    tg.sum().backward()
    np.testing.assert_allclose(g.data, tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-12)


def test_inplace_on_view_then_no_grad():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_then_no_grad: an
    in-place op on a view of a view, the view's history asked for under no_grad, then a
    backward: it runs and gives PyTorch's gradient (the written element gets none)."""
    a = leaf(np.ones((3, 1)))
    b = a * 2
    c = O.reshape(b, shape=(3, 1))
    O.slice(c, index=(slice(0, 1), slice(0, 1))).mul_(0.0)
    with no_grad():
        assert c.grad_fn is not None
    c.sum().backward()
    np.testing.assert_array_equal(a.grad, [[0.0], [2.0], [2.0]])


def test_inplace_on_view_leaf_errors():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_leaf_errors: PyTorch's
    words for an in-place op on a view of a leaf that requires grad."""
    x = leaf(np.zeros(1))
    y = O.reshape(x, shape=(1,))
    with pytest.raises(RuntimeError, match="^a view of a leaf Variable that requires grad is "
                                           "being used in an in-place operation.$"):
        y.add_(1.0)


def test_inplace_on_reshape_view_rebases_its_base():
    """PyTorch's ``reshape`` of a contiguous tensor is a view (test_autograd.py::TestAutograd::
    test_inplace_on_view_python's shape, with reshape as the view): an in-place op on it
    bumps the base's version and rebases its history (CopySlices), so the base's gradient
    is PyTorch's [8, 16, 24], not the [4, 8, 12] of a base changed behind its history."""
    a = leaf([1.0, 2.0, 3.0])
    x = a * 1
    y = O.reshape(x, shape=(3,))
    y.mul_(2.0)
    assert x._version == 1 and x.grad_fn.name == "CopySlices"
    (x * x).sum().backward()
    np.testing.assert_array_equal(a.grad, [8.0, 16.0, 24.0])


# -- hooks and retain_grad across in-place ops (test_retain_grad_inplace, test_tensor_hooks_inplace*) --
def test_retain_grad_inplace():
    """Mirrors test_autograd.py::TestAutograd::test_retain_grad_inplace: retain_grad asks
    for the gradient of the latest version, so after ``a.mul_(2)`` (once or twice) a.grad
    is 1, not the 2 or 4 at a's old value (Note [retain_grad after an in-place op])."""
    for times in (1, 2):
        a = leaf([1.0]) * 1
        a.retain_grad()
        for _ in range(times):
            a.mul_(2.0)
        a.sum().backward()
        np.testing.assert_array_equal(a.grad, [1.0])


def test_retain_grad_inplace_over_view():
    """Mirrors test_autograd.py::TestAutograd::test_retain_grad_inplace_over_view: an
    in-place op on a view moves the base's retains-grad hook onto CopySlices, and the
    next in-place op on the base onto its node: x.grad is 1."""
    x = leaf([1.0]) * 1
    x.retain_grad()
    xv = O.slice(x, index=(slice(None),))
    xv *= 2.0
    x *= 2.0
    x.sum().backward()
    np.testing.assert_array_equal(x.grad, [1.0])


def test_tensor_hooks_inplace():
    """Mirrors test_autograd.py::TestAutograd::test_tensor_hooks_inplace: a hook
    registered after ``b.mul_(2)`` sees the new version's gradient (1) and runs first;
    the one registered before sees the old version's (4); a.grad is 8."""
    log = []
    a = leaf(1.0)
    b = a * 1
    b.register_hook(lambda g: log.append(("fn1", float(g))) or g * 2)
    b.mul_(2.0)
    b.register_hook(lambda g: log.append(("fn2", float(g))) or g * 2)
    b.sum().backward()
    assert log == [("fn2", 1.0), ("fn1", 4.0)]
    assert float(a.grad) == 8.0


def test_tensor_hooks_inplace_over_view():
    """Mirrors test_autograd.py::TestAutograd::test_tensor_hooks_inplace_over_view: after
    an in-place op on a view, the base's new hook runs on CopySlices' input first, then the
    old one on the old node; the view's hook (on a history no longer used) never runs."""
    log = []
    base = leaf([1.0]) * 1
    view = O.slice(base, index=(slice(None),))
    other = leaf([1.0])
    view.register_hook(lambda g: log.append("fn0"))
    base.register_hook(lambda g: log.append("fn1"))
    view.mul_(other)
    base.register_hook(lambda g: log.append(("fn2", g.tolist())))
    base.sum().backward()
    assert log == [("fn2", [1.0]), "fn1"]


def test_post_accumulate_grad_hook_gets_cleaned_up():
    """Mirrors test_autograd.py::TestAutograd::test_post_accumulate_grad_hook_gets_cleaned_up:
    the hook (an optimizer step: in-place ops on the leaf, allowed since hooks run
    without grad mode) keeps what it closes over alive only as long as its tensor lives."""
    import gc  # noqa: PLC0415
    import weakref  # noqa: PLC0415

    def fun_stuff_with_hook():
        thing_to_put_in_hook = Tensor(np.full(3, 0.5))

        def hook(tensor):
            tensor.sub_(Tensor(tensor.grad))
            tensor.add_(thing_to_put_in_hook)

        tensor = leaf(np.ones(3))
        tensor.register_post_accumulate_grad_hook(hook)
        tensor.sum().backward()
        np.testing.assert_array_equal(tensor.data, [0.5, 0.5, 0.5])
        return tensor, weakref.ref(thing_to_put_in_hook)

    tensor, ref = fun_stuff_with_hook()
    gc.collect()
    assert ref() is not None
    del tensor
    gc.collect()
    assert ref() is None


def test_checkpoint_detects_non_determinism():
    """Mirrors test_autograd.py::TestAutograd::test_checkpoint_detects_non_determinism: a
    non-reentrant checkpoint whose function saves a tensor of another shape when it runs
    again fails with PyTorch's words, naming the position and both metadata (Note
    [Recomputed metadata]), not with an error of the backward formula."""
    from gradcli.autograd import checkpoint  # noqa: PLC0415

    a = leaf(np.ones(3))
    calls = [0]

    def f(x):
        calls[0] += 1
        return O.exp(x) if calls[0] == 1 else O.exp(O.slice(x, index=(slice(0, 2),)))

    y = checkpoint(f, a, use_reentrant=False)
    with pytest.raises(RuntimeError, match=r"^torch\.utils\.checkpoint: Recomputed values for the "
                       r"following tensors have different metadata than during the forward "
                       r"pass\.\ntensor at position 0:\nsaved metadata: \{'shape': \[3\], .*\n"
                       r"recomputed metadata: \{'shape': \[2\], "):
        y.sum().backward()
    assert a.grad is None


def test_inplace_on_view_of_multiple_output_view():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_of_multiple_output_view
    and test_inplace_multiple_output_view_of_view: an output of an op that returns
    several views (split_with_sizes), or a view of one, may not be changed in place
    while grad mode records it (Note [View creation]); PyTorch's words."""
    from gradcli.ops import OPS  # noqa: PLC0415

    a = leaf(np.arange(10.0)) * 1
    parts = OPS["aten.split_with_sizes.default"](a, split_sizes=[5, 5])
    with pytest.raises(RuntimeError, match="^Output 0 of SplitWithSizes is a view and is being "
                                           "modified inplace. This view is the output of a "
                                           "function that returns multiple views."):
        parts[0].mul_(2.0)
    view = O.reshape(parts[1], shape=(5,))
    with pytest.raises(RuntimeError, match="^Output 0 of View is a view and is being modified "
                                           "inplace"):
        view.mul_(2.0)
    with no_grad():                      # not recorded: allowed, as in PyTorch
        parts[0].mul_(2.0)
    np.testing.assert_array_equal(a.data[:5], [0.0, 2.0, 4.0, 6.0, 8.0])


def test_inplace_on_view_created_in_no_grad():
    """PyTorch's CreationMeta::NO_GRAD_MODE check (variable.cpp's handle_view_on_rebase;
    torch 2.13 on the same code raises these words): a view of a tensor
    that requires grad, made under no_grad, may not be changed in place with grad mode on;
    inside no_grad it may (Note [View creation])."""
    a = leaf(np.arange(4.0)) * 1
    with no_grad():
        v = O.slice(a, index=(slice(0, 2),))
    with pytest.raises(RuntimeError, match="^A view was created in no_grad mode and is being "
                                           "modified inplace with grad mode enabled."):
        v.mul_(2.0)
    with no_grad():
        v.mul_(2.0)
    np.testing.assert_array_equal(a.data, [0.0, 2.0, 2.0, 3.0])


def test_disable_saved_tensors_hooks_while_hooks_are_active_raises():
    """PyTorch's disable_saved_tensors_hooks (SavedTensorDefaultHooks::disable with
    fail_if_non_empty; torch 2.13 on this code): entered while saved-tensor hooks are
    active it raises its own message, and leaves the hooks usable afterwards."""
    from gradcli.autograd.graph import disable_saved_tensors_hooks, saved_tensors_hooks  # noqa: PLC0415

    with pytest.raises(RuntimeError, match="^late$"):
        with saved_tensors_hooks(lambda x: x, lambda x: x):
            with disable_saved_tensors_hooks("late"):
                pass
    seen = []
    a = leaf([1.0, 2.0])
    with saved_tensors_hooks(lambda x: seen.append(1) or x, lambda x: x):
        y = a * a
    y.sum().backward()
    assert seen and list(a.grad) == [2.0, 4.0]


def test_inplace_on_a_no_op_device_move_changes_its_input_with_its_history():
    """``x.to(its own device)`` is ``x`` itself in PyTorch, so an in-place op on the result
    changes ``x`` and its gradient (torch 2.13: a.grad = [8, 16] for this code). gradcli's
    result shares ``x``'s memory as a view (Note [Views that may copy]): the in-place op
    rebases ``x`` through CopySlices (a node PyTorch does not record here: a deliberate
    difference of node names, same gradient) instead of changing it behind its history."""
    a = leaf([1.0, 2.0])
    x = a * 1
    y = O.OPS["to"](x, device="cpu")
    y.mul_(2.0)
    assert x._version == 1
    (x * x).sum().backward()
    np.testing.assert_array_equal(a.grad, [8.0, 16.0])
