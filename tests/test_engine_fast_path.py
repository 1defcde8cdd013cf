"""The engine's fast path (Note [Engine fast path]) runs the same nodes in the same
order with bit-identical gradients as the general loop, and is taken when it applies.

The order is observed without disturbing either path: each node class's ``apply``
is wrapped (a hook or a trace would itself steer the engine off the fast path).
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from gradcli import loader
from gradcli.autograd import (AccumulateGrad, Engine, Function, GraphRoot, Node, Tensor,
                              backward, enable_grad, grad)
from gradcli.autograd import engine as E
from gradcli.ops import OpBackward
import gradcli.ops as O

ROOT = pathlib.Path(__file__).resolve().parent.parent
INVALID_ON_PURPOSE = {"bad_square.yaml", "invalid.yaml"}     # tests/graphs: load errors
EXAMPLES = sorted(p for d in (ROOT / "graphs", ROOT / "tests" / "graphs") for p in d.iterdir()
                  if p.suffix in (".yaml", ".json") and p.name not in INVALID_ON_PURPOSE)
DEVICE_MAPS = {"gpu_mlp.yaml": {"cuda": "sim"}}


def _all_node_classes():
    seen, todo = set(), [Node]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return [c for c in seen if "apply" in vars(c)]


@pytest.fixture
def order_log(monkeypatch):
    """A list that receives each node (not the seed GraphRoot) as it runs."""
    log = []
    for cls in _all_node_classes():
        original = vars(cls)["apply"]

        def apply(self, grads, _original=original):
            if type(self) is not GraphRoot:
                log.append(self)
            return _original(self, grads)

        monkeypatch.setattr(cls, "apply", apply)
    return log


@pytest.fixture
def fast_taken(monkeypatch):
    """Counts the backwards that went through thread_main_fast."""
    calls = []
    original = Engine.thread_main_fast

    def spy(self, graph_task):
        calls.append(graph_task)
        return original(self, graph_task)

    monkeypatch.setattr(Engine, "thread_main_fast", spy)
    return calls


def _bits(a):
    if a is None:
        return None
    a = np.asarray(a.data if type(a) is Tensor else a)
    return (a.dtype.str, a.shape, a.tobytes())


def _run_example(path, fast, order_log, monkeypatch, **kw):
    monkeypatch.setattr(E, "FAST_PATH", fast)
    order_log.clear()
    graph = loader.load(path, device_map=DEVICE_MAPS.get(path.name))
    try:
        result = graph.run(order=False, **kw)
    except Exception as exc:  # noqa: BLE001 - failing examples must fail the same way
        return ("error", type(exc).__name__, str(exc),
                [(n.name, n.metadata.get("op_id")) for n in order_log])
    return ([(n.name, n.metadata.get("op_id"), n.topological_nr) for n in order_log],
            {k: _bits(v) for k, v in result.grads.items()}, result.nodes_run)


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # nan_log.yaml makes NaNs on purpose
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_same_order_and_bits_with_and_without_fast_path(path, order_log, monkeypatch):
    graph = loader.load(path, device_map=DEVICE_MAPS.get(path.name))
    # Device threads run concurrently: their order (and the order contributions
    # are summed in) is not fixed from run to run, fast path or not. Such graphs
    # never take the fast path; compare them single-threaded.
    on_devices = (any(leaf.device.type != "cpu" for leaf in graph.leaves.values())
                  or any(getattr(spec.op, "moves_device", False) for spec in graph.ops))
    for kw in ([{"multithreading": False}] if on_devices else [{}, {"multithreading": False}]):
        slow = _run_example(path, False, order_log, monkeypatch, **kw)
        fast = _run_example(path, True, order_log, monkeypatch, **kw)
        assert fast == slow
        if slow[0] != "error":
            assert slow[0], "no node ran"


def test_fast_path_is_taken_for_a_plain_cpu_backward(fast_taken, monkeypatch):
    monkeypatch.setattr(E, "FAST_PATH", True)
    x = Tensor(np.arange(4.0), requires_grad=True)
    backward(O.sum(x * x))
    assert len(fast_taken) == 1
    assert np.array_equal(x.grad, 2 * np.arange(4.0))
    # not for grad() (exec_info), create_graph, a traced run
    grad(O.sum(x * x), [x])
    backward(O.sum(x * x), create_graph=True)
    backward(O.sum(x * x), trace=[])
    assert len(fast_taken) == 1


def test_run_counts_nodes_without_records():
    graph = loader.load(ROOT / "graphs" / "mlp.yaml")
    counted = graph.run(order=False)
    recorded = graph.run()
    assert counted.order is None
    assert counted.nodes_run == recorded.nodes_run == len(recorded.order) > 0
    with pytest.raises(ValueError):
        counted.to_json()


def _chain(n=50):
    x = Tensor(np.linspace(0.1, 1.0, 8), requires_grad=True)
    c, d = Tensor(np.full(8, 0.999)), Tensor(np.full(8, 0.001))
    y = x
    for _ in range(n):
        y = y * c + d
    return x, y


def _both_ways(monkeypatch, order_log, scenario):
    out = []
    for fast in (False, True):
        monkeypatch.setattr(E, "FAST_PATH", fast)
        order_log.clear()
        result = scenario()
        out.append(([(n.name, n.topological_nr) for n in order_log], result))
    return out


def test_hooks_retain_grad_and_repeated_retained_backwards(monkeypatch, order_log, fast_taken):
    def scenario():
        x, y = _chain()
        mid = []
        z = O.sum(O.mul(y, y))
        y.retain_grad()
        y.register_hook(lambda g: g * 2.0)
        y.grad_fn.register_prehook(lambda gs: None)
        y.grad_fn.register_hook(lambda gi, go: None)
        backward(z, retain_graph=True)
        mid.append(_bits(x.grad))
        backward(z)
        return mid + [_bits(x.grad), _bits(y.grad)]

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_taken, "the fast path ran"
    assert fast_order == slow_order and fast == slow


def test_errors_and_the_next_backward(monkeypatch, order_log):
    class Boom(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    def scenario():
        x, y = _chain(5)
        z = O.sum(Boom.apply(y) + y)
        with pytest.raises(ValueError, match="boom") as info:
            backward(z)
        # the same thread's next backward runs normally afterwards
        x2, y2 = _chain(5)
        backward(O.sum(y2))
        return str(info.value), _bits(x.grad), _bits(x2.grad)

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order and fast == slow


def _two_outputs(second):
    """A Function of two inputs whose backward returns ``g * 2`` and ``second(g)``."""
    class Two(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g * 2.0, second(g)

    return Two


@pytest.mark.parametrize("second", ["summed back", "cast", "invalid"])
def test_an_output_fixed_up_or_refused_after_the_one_before_was_handed_on(monkeypatch, order_log,
                                                                           fast_taken, second):
    # the fast path checks each output as it hands it on (Note [Outputs checked as they are
    # handed on]): a later output is still fixed up, or refused with the general path's error
    # and nothing it made ready runs (the first leaf gets no gradient either way)
    Two = _two_outputs({"summed back": lambda g: np.ones((3, 2, 3)),
                        "cast": lambda g: g.astype(np.float32),
                        "invalid": lambda g: np.ones(5)}[second])

    def scenario():
        a = Tensor(np.linspace(0.5, 2.0, 6).reshape(2, 3), requires_grad=True)
        b = Tensor(np.linspace(1.0, 3.0, 6).reshape(2, 3), requires_grad=True)
        error = None
        try:
            backward(O.sum(Two.apply(a, b)))
        except RuntimeError as exc:
            error = str(exc)
        x2, y2 = _chain(3)            # the same thread's next backward runs normally
        backward(O.sum(y2))
        return error, _bits(a.grad), _bits(b.grad), _bits(x2.grad)

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order and fast == slow
    assert len(fast_taken) == 2                  # (both backwards of the fast run)
    error, ga, gb, _ = fast
    if second == "invalid":
        assert error == ("Function TwoBackward returned an invalid gradient at index 1 - got [5] but "
                         "expected shape compatible with [2, 3]")
        assert ga is None and gb is None
    else:
        assert error is None and ga is not None and gb[0] == "<f8" and gb[1] == (2, 3)


def _queue_tasks():
    """The (kind, node name) of each task left in this thread's CPU ready queue."""
    queue = E.TLS.local_ready_queue
    return sorted((t[0], None if t[5] is None else t[5].name) for t in queue._heap)


def test_a_chain_runs_without_pushing_its_tasks(monkeypatch, fast_taken):
    # Note [The one ready task]: each node of a chain makes one task ready with the heap
    # empty; the fast path runs it next without a NodeTask on the heap. A fan-out still
    # queues its tasks (both branches' heads), and the order is the general loop's
    # (test_examples_same_order_and_bits_with_and_without_fast_path).
    pushed = []
    real = E.heappush

    def heappush(heap, task):
        pushed.append(task[5].name)
        real(heap, task)

    monkeypatch.setattr(E, "heappush", heappush)
    monkeypatch.setattr(E, "FAST_PATH", True)
    x, y = _chain(20)
    backward(O.sum(y))
    assert len(fast_taken) == 1 and x.grad is not None
    assert pushed == []
    a = Tensor(np.linspace(0.1, 1.0, 8), requires_grad=True)
    backward(O.sum(O.exp(a) + O.sin(a)))             # AddBackward0 feeds two nodes
    assert sorted(pushed) == ["ExpBackward0", "SinBackward0"]


def test_a_task_kept_out_of_the_heap_is_queued_when_the_backward_fails(monkeypatch, order_log):
    # the first output makes its leaf's accumulator ready (kept out of the heap), the second
    # fails and ends the graph task: the kept task is queued, as a pushed one would have
    # been, for the next backward to drop. (The general loop checks every output before
    # handing any on, so it makes nothing ready: Note [Outputs checked as they are handed on].)
    Two = _two_outputs(lambda g: np.ones(5))

    def scenario():
        a = Tensor(np.linspace(0.5, 2.0, 6).reshape(2, 3), requires_grad=True)
        b = Tensor(np.linspace(1.0, 3.0, 6).reshape(2, 3), requires_grad=True)
        with pytest.raises(RuntimeError, match="invalid gradient"):
            backward(O.sum(Two.apply(a, b)))
        left = _queue_tasks()
        assert E._drop_failed_tasks(E.TLS.local_ready_queue, None)   # as the next backward does
        assert _queue_tasks() == []
        return left

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order
    assert fast == [(E.RUN, "AccumulateGrad")] and slow == []


def test_a_node_that_leaves_grad_mode_on(monkeypatch, order_log):
    class LeavesGradOn(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            from gradcli.autograd.state import STATE
            STATE.grad_enabled = True       # not restored: the engine resets it
            return g * 3.0

    def scenario():
        x, y = _chain(3)
        z = O.sum(LeavesGradOn.apply(y) * y)
        backward(z)
        return _bits(x.grad), type(x.grad).__name__

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order and fast == slow
    assert fast[1] == "ndarray"


def test_reentrant_backward_inside_the_fast_path(monkeypatch, order_log):
    from gradcli.ops.reentrant import checkpoint

    def scenario():
        x, y = _chain(4)

        def body(t):
            return [O.sum(O.mul(t, t))]

        (out,) = checkpoint(body, y)
        backward(O.mul(out, out) + O.sum(y))
        return _bits(x.grad)

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order and fast == slow


def test_several_roots_broadcast_and_dtype_fixups(monkeypatch, order_log):
    def scenario():
        a = Tensor(np.linspace(0.5, 2.0, 6).reshape(2, 3), requires_grad=True)
        b = Tensor(np.linspace(1.0, 2.0, 3), requires_grad=True)
        f = Tensor(np.linspace(1.0, 2.0, 3).astype(np.float32), requires_grad=True)
        y1 = O.sum(a * b)
        y2 = O.sum(O.cast(f, dtype="float64") * b)
        backward([y1, y2])
        return _bits(a.grad), _bits(b.grad), _bits(f.grad)

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order and fast == slow
    assert slow_order[0][0] != "GraphRoot"


# -- Note [Schedules of retained graphs] ------------------------------------------------
def test_repeated_retained_backwards_replay_the_same_order_and_bits(monkeypatch, order_log):
    def scenario():
        x, y = _chain(30)
        a = Tensor(np.linspace(1.0, 2.0, 8), requires_grad=True)
        z = O.sum(O.mul(y, a) + O.mul(y, y))     # a diamond: buffers sum two contributions
        grads = []
        for k in range(4):
            if k == 2:                          # a hook added between backwards runs too
                y.register_hook(lambda g: g * 0.5)
            backward(z, retain_graph=k < 3)     # the last one frees the graph
            grads.append((_bits(x.grad), _bits(a.grad)))
        with pytest.raises(RuntimeError, match="second time"):
            backward(z)
        return grads

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order and fast == slow
    assert len(set(fast)) == 4                  # the grads accumulated each time


def test_a_schedule_is_recorded_and_replayed(monkeypatch):
    monkeypatch.setattr(E, "FAST_PATH", True)
    replays = []
    original = Engine.replay_schedule
    monkeypatch.setattr(Engine, "replay_schedule",
                        lambda self, *a: (replays.append(1), original(self, *a))[1])
    x, y = _chain(10)
    z = O.sum(y)
    backward(z, retain_graph=True)
    assert z.grad_fn in E._SCHEDULES and not replays
    first = x.grad.copy()
    backward(z, retain_graph=True)
    assert replays == [1]
    assert np.array_equal(x.grad, 2 * first)
    # not for grad(), nor several roots
    grad(z, [x], retain_graph=True)
    backward([z, O.sum(y * 2.0)], retain_graph=True)
    assert replays == [1]


def test_schedules_live_as_long_as_their_graph(monkeypatch):
    import gc

    import weakref

    monkeypatch.setattr(E, "FAST_PATH", True)
    x, y = _chain(10)
    z = O.sum(y)
    backward(z, retain_graph=True)
    assert z.grad_fn in E._SCHEDULES
    root, inner = weakref.ref(z.grad_fn), weakref.ref(y.grad_fn)
    del z, y
    gc.collect()
    assert root() is None and inner() is None     # the schedule kept no node alive


def test_an_error_in_a_replayed_backward(monkeypatch, order_log):
    class FailsSecondTime(Function):
        calls = 0

        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            FailsSecondTime.calls += 1
            if FailsSecondTime.calls % 2 == 0:
                raise ValueError("second")
            return g

    def scenario():
        FailsSecondTime.calls = 0
        x, y = _chain(5)
        z = O.sum(FailsSecondTime.apply(y))
        backward(z, retain_graph=True)
        with pytest.raises(ValueError, match="second"):
            backward(z, retain_graph=True)
        backward(z, retain_graph=True)
        return _bits(x.grad)

    (slow_order, slow), (fast_order, fast) = _both_ways(monkeypatch, order_log, scenario)
    assert fast_order == slow_order and fast == slow
