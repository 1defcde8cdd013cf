"""Higher-order gradients: ``create_graph`` in the engine and the API.

Mirrors tests of PyTorch's ``test/test_autograd.py`` (each names the one it
mirrors), then checks every differentiable op's second derivative against
finite differences of its first-order gradient (PyTorch's ``gradgradcheck``),
one line per op.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import (Tensor, backward, enable_grad, grad, is_grad_enabled, no_grad,
                              set_multithreading_enabled)
from gradcli.autograd.node import ERR_BACKWARD_TWICE
from gradcli.devices import device_of, to_device
from gradcli.ops import OPS
from gradcli.ops.aten import AtenOp
from gradcli.ops.args import parse_index


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def leaf(*shape, seed=0):
    return Tensor(randn(*shape, seed=seed), requires_grad=True)


# -- PyTorch's tests ---------------------------------------------------------------------
def test_hessian_vector():
    """Mirrors test_autograd.py::TestAutograd::test_hessian_vector."""
    x, y = leaf(2, 2), leaf(2, 2, seed=1)
    z = x ** 2 + y * x + y ** 2
    z.backward(np.ones((2, 2)), create_graph=True)

    x_grad = 2 * x.data + y.data
    y_grad = x.data + 2 * y.data
    np.testing.assert_allclose(x.grad.data, x_grad)
    np.testing.assert_allclose(y.grad.data, y_grad)

    grad_sum = 2 * x.grad + y.grad
    grad_sum.backward(np.ones((2, 2)))
    np.testing.assert_allclose(x.grad.data, x_grad + 5)
    np.testing.assert_allclose(y.grad.data, y_grad + 4)


def test_grad():
    """Mirrors test_autograd.py::TestAutograd::test_grad: grad() of a .grad made with
    create_graph, which itself leaves .grad alone."""
    x, y = leaf(2, 2), leaf(2, 2, seed=1)
    z = x ** 2 + y * x + y ** 2
    z.backward(np.ones((2, 2)), create_graph=True)
    x_grad = 2 * x.data + y.data
    y_grad = x.data + 2 * y.data

    grad_sum = 2 * x.grad + y.grad
    x_hv = grad([grad_sum], [x], grad_outputs=[np.ones((2, 2))], create_graph=True)
    np.testing.assert_allclose(x_hv[0].data, np.full((2, 2), 5.0))
    np.testing.assert_allclose(x.grad.data, x_grad)
    np.testing.assert_allclose(y.grad.data, y_grad)


def test_grad_nonleaf():
    """Mirrors test_autograd.py::TestAutograd::test_grad_nonleaf: gradient steps on a
    non-leaf x, each gradient made with create_graph, then a backward through them all."""
    x_init = leaf(2, 2)
    x = x_init
    y = leaf(2, 2, seed=1)
    grad_output = np.ones((2, 2))

    def fn(x):
        return x ** 2 + y * x + y ** 2

    for _ in range(5):
        (grad_x,) = grad([fn(x)], [x], grad_outputs=[grad_output], create_graph=True)
        assert y.grad is None and x.grad is None
        np.testing.assert_allclose(grad_x.data, 2 * x.data + y.data)
        x = x + 0.05 * grad_x

    assert fn(x).sum().data > fn(x_init).sum().data
    x.backward(grad_output)
    assert y.grad is not None
    assert x_init.grad is not None
    # d x_final / d x_init is a product of (1 + 0.05 * 2) per step: 1.1 ** 5.
    np.testing.assert_allclose(x_init.grad, np.full((2, 2), 1.1 ** 5))


def test_accumulate_grad():
    """Mirrors test_autograd.py::TestAutograd::test_accumulate_grad: in place without
    create_graph, out of place with it (the earlier .grad object keeps its value)."""
    grad_output = np.ones((5, 5))

    def compute_grad(create_graph):
        x = leaf(5, 5)
        y = x + 2
        y.backward(grad_output, retain_graph=True)
        x_grad = x.grad
        x_grad_clone = np.array(x.grad, copy=True)
        y.backward(grad_output, create_graph=create_graph)
        return x_grad, x_grad_clone

    x_grad, x_grad_clone = compute_grad(create_graph=False)
    np.testing.assert_array_equal(x_grad, x_grad_clone * 2)
    x_grad, x_grad_clone = compute_grad(create_graph=True)
    np.testing.assert_array_equal(x_grad, x_grad_clone)


def test_grad_with_create_graph_is_differentiable():
    """.grad after backward(create_graph=True) carries the graph of the backward.

    The first accumulation copies the gradient with a recorded copy
    (``CopyBackwards``: no edge for the new tensor, one to the gradient's node),
    as PyTorch's AccumulateGrad; a second adds out of place (``AddBackward0``).
    """
    x = leaf(3)
    (x * x * x).sum().backward(create_graph=True)
    assert isinstance(x.grad, Tensor)
    assert x.grad.grad_fn is not None and x.grad.grad_fn.name == "CopyBackwards"
    assert [e and e[0].name for e in x.grad.grad_fn.next_edges] == [None, "AddBackward0"]
    np.testing.assert_allclose(x.grad.data, 3 * x.data ** 2)
    first = x.grad
    (x * x * x).sum().backward(create_graph=True)
    assert x.grad is not first and x.grad.grad_fn.name == "AddBackward0"
    np.testing.assert_allclose(first.data, 3 * x.data ** 2)   # not updated in place
    (gg,) = grad([x.grad.sum()], [x])
    np.testing.assert_allclose(gg, 2 * 6 * x.data)


def test_grad_of_function_without_path_to_input_under_create_graph():
    """A gradient that depends on no Tensor requiring grad is still a Tensor (no grad_fn)."""
    x = leaf(3)
    x.sum().backward(create_graph=True)
    assert isinstance(x.grad, Tensor) and not x.grad.requires_grad
    np.testing.assert_array_equal(x.grad.data, np.ones(3))
    (g,) = grad([x.sum()], [x], create_graph=True)
    assert isinstance(g, Tensor) and g.grad_fn is None


def test_retain_graph_defaults_to_create_graph():
    """As torch.autograd.backward: retain_graph=None means retain_graph=create_graph."""
    x = leaf(3)
    y = O.exp(x).sum()
    y.backward(create_graph=True)
    y.backward(create_graph=True)          # the graph was kept
    np.testing.assert_allclose(x.grad.data, 2 * np.exp(x.data))
    y.backward()                           # retain_graph=False now: freed after
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_grad_outputs_tensor_kept_with_create_graph():
    """A Tensor grad_output that requires grad stays in the graph: the gradient is
    differentiable w.r.t. it (the double-backward trick for a JVP)."""
    x = leaf(3)
    v = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = O.sin(x)
    (g,) = grad([y], [x], grad_outputs=[v], create_graph=True)
    np.testing.assert_allclose(g.data, v.data * np.cos(x.data))
    u = np.array([0.5, -1.0, 2.0])
    (jvp,) = grad([g], [v], grad_outputs=[u])
    np.testing.assert_allclose(jvp, np.cos(x.data) * u)


def test_saved_tensors_released_after_create_graph_backward():
    """create_graph with retain_graph=False frees the first graph as usual (as PyTorch).

    x * x's gradient is built from the saved leaf x only, so it stays
    differentiable; tanh's is built from its saved *output*, whose grad_fn is
    the freed TanhBackward0 node itself: differentiating it again fails with
    PyTorch's error, exactly as in PyTorch.
    """
    x = leaf(4)
    y = (x * x).sum()
    (g,) = grad([y], [x], create_graph=True, retain_graph=False)
    with pytest.raises(RuntimeError) as err:
        grad([y], [x])
    assert str(err.value) == ERR_BACKWARD_TWICE
    (gg,) = grad([g.sum()], [x])
    np.testing.assert_array_equal(gg, np.full(4, 2.0))

    y = O.tanh(x).sum()
    (g,) = grad([y], [x], create_graph=True, retain_graph=False)
    assert g.grad_fn is not None
    with pytest.raises(RuntimeError) as err:
        grad([g.sum()], [x])
    assert str(err.value) == ERR_BACKWARD_TWICE


def test_third_derivative():
    """create_graph twice: d3/dx3 sin(x) = -cos(x)."""
    x = leaf(5)
    (g1,) = grad([O.sin(x).sum()], [x], create_graph=True)
    (g2,) = grad([g1.sum()], [x], create_graph=True)
    (g3,) = grad([g2.sum()], [x])
    np.testing.assert_allclose(g3, -np.cos(x.data))


def test_backward_runs_with_grad_mode_as_create_graph():
    """The engine runs node backwards with grad mode on iff create_graph, and the
    caller's grad mode is what it was after the backward."""
    seen = []
    x = leaf(3)
    y = x * 2
    y.grad_fn.register_prehook(lambda grads: seen.append(is_grad_enabled()))
    s = y.sum()
    s.backward(retain_graph=True)
    s.backward(create_graph=True)
    with no_grad():
        s.backward(create_graph=True)
        assert not is_grad_enabled()
    assert seen == [False, True, True]
    assert is_grad_enabled()


def test_create_graph_single_threaded_and_deterministic():
    """The same second derivative with multithreading off and with deterministic buffers."""
    x = leaf(3, 4)
    w = leaf(4, 2, seed=1)
    for ctx_mt in (False, True):
        with set_multithreading_enabled(ctx_mt):
            loss = O.tanh(x @ w).sum()
            (gx,) = grad([loss], [x], create_graph=True)
            (gw,) = grad([(gx * gx).sum()], [w], deterministic=True)
            h = np.tanh(x.data @ w.data)
            d = 1 - h ** 2
            gx_ref = d @ w.data.T
            # d/dw sum((d @ w.T)**2) = 2 * [d.T @ (gx) ... ] computed numerically below
            eps = 1e-6
            num = np.zeros_like(w.data)
            for idx in np.ndindex(w.shape):
                wp, wm = w.data.copy(), w.data.copy()
                wp[idx] += eps
                wm[idx] -= eps
                fp = (((1 - np.tanh(x.data @ wp) ** 2) @ wp.T) ** 2).sum()
                fm = (((1 - np.tanh(x.data @ wm) ** 2) @ wm.T) ** 2).sum()
                num[idx] = (fp - fm) / (2 * eps)
            np.testing.assert_allclose(gx.data, gx_ref)
            np.testing.assert_allclose(gw, num, rtol=1e-5, atol=1e-7)


def test_create_graph_on_simulated_device():
    """Second derivative through a cross-device copy: the backward of the backward
    copies back (ToCopyBackward0 recorded on the Tensor path)."""
    x = leaf(4)
    y = O.to(x, device="sim:0")
    z = O.mul(O.mul(y, y), y).sum()
    (g,) = grad([z], [x], create_graph=True)
    assert str(g.device) == "cpu"
    (gg,) = grad([g.sum()], [x])
    np.testing.assert_allclose(gg, 6 * x.data)


def test_backward_with_inputs_and_create_graph():
    """backward(inputs=..., create_graph=True) accumulates only there, differentiably."""
    x, y = leaf(3), leaf(3, seed=1)
    (x * x * y).sum().backward(inputs=[x], create_graph=True)
    assert y.grad is None
    np.testing.assert_allclose(x.grad.data, 2 * x.data * y.data)
    (gy,) = grad([x.grad.sum()], [y])
    np.testing.assert_allclose(gy, 2 * x.data)


def test_retain_grad_with_create_graph():
    """retain_grad on a non-leaf keeps a differentiable .grad under create_graph."""
    x = leaf(3)
    h = x * x
    h.retain_grad()
    (h * h).sum().backward(create_graph=True)
    assert isinstance(h.grad, Tensor)
    np.testing.assert_allclose(h.grad.data, 2 * x.data ** 2)
    (gx,) = grad([h.grad.sum()], [x])
    np.testing.assert_allclose(gx, 4 * x.data)
    # a gradient that carries no graph is still kept as a Tensor, as .grad of a leaf
    h2 = x * 2
    h2.retain_grad()
    h2.sum().backward(create_graph=True)
    assert isinstance(h2.grad, Tensor) and not h2.grad.requires_grad
    np.testing.assert_array_equal(h2.grad.data, np.ones(3))


# -- every op's second derivative (gradgradcheck) -------------------------------------------
def R(*shape, seed=0, low=None, high=None, away=None):
    rng = np.random.default_rng(zlib.crc32(repr((shape, seed, low, high)).encode()))
    x = rng.uniform(low, high, size=shape) if low is not None else rng.standard_normal(shape)
    if away is not None:
        x = np.where(np.abs(x) < away, np.where(x < 0, -away, away), x)
    return np.asarray(x, dtype=np.float64)


def distinct(*shape, seed=0):
    n = int(np.prod(shape)) if shape else 1
    rng = np.random.default_rng(seed + 777)
    return (rng.permutation(n) * 0.37 - n * 0.15 + rng.uniform(-0.05, 0.05, n)).reshape(shape)


def _clamp_input():
    x = R(3, 4) * 1.2
    for b in (-0.5, 0.5):
        x = np.where(np.abs(x - b) < 1e-2, x + 0.05, x)
    return x


# op -> (inputs, args, wrt): one line per op. Engine exercisers whose backward
# is not math are left out (EXCLUDED, with the reason).
GRADGRAD = {
    "add": ([R(3, 1, 4), R(2, 4, seed=1)], {}, None),
    "sub": ([R(3, 4), R(4, seed=1)], {}, None),
    "mul": ([R(3, 1, 4), R(2, 4, seed=1)], {}, None),
    "div": ([R(3, 4), R(4, seed=1, low=0.5, high=2.0)], {}, None),
    "pow": ([R(3, 4, low=0.4, high=2.5), R(4, seed=1, low=-1.5, high=2.5)], {}, None),
    "maximum": ([distinct(3, 4), distinct(4, seed=1) + 0.05], {}, None),
    "minimum": ([distinct(3, 4), distinct(4, seed=1) + 0.05], {}, None),
    "where": ([np.random.default_rng(0).random((3, 4)) < 0.5, R(3, 4), R(4, seed=1)], {}, [1, 2]),
    "neg": ([R(3, 4)], {}, None),
    "exp": ([R(3, 4)], {}, None),
    "log": ([R(3, 4, low=0.3, high=3.0)], {}, None),
    "sin": ([R(3, 4)], {}, None),
    "cos": ([R(3, 4)], {}, None),
    "tanh": ([R(3, 4)], {}, None),
    "sigmoid": ([R(3, 4)], {}, None),
    "relu": ([R(3, 4, away=0.05)], {}, None),
    "abs": ([R(3, 4, away=0.05)], {}, None),
    "sqrt": ([R(3, 4, low=0.3, high=3.0)], {}, None),
    "square": ([R(3, 4)], {}, None),
    "clamp": ([_clamp_input()], {"min": -0.5, "max": 0.5}, None),
    "sum": ([R(2, 3, 4)], {"axis": [0, 2]}, None),
    "mean": ([R(2, 3, 4)], {"axis": 1, "keepdims": True}, None),
    "max": ([distinct(2, 3, 4)], {"axis": 1}, None),
    "min": ([distinct(2, 3, 4)], {"axis": [0, 2]}, None),
    "logsumexp": ([R(2, 3, 4)], {"axis": -1}, None),
    "reshape": ([R(2, 6)], {"shape": [3, -1]}, None),
    "transpose": ([R(2, 3, 4)], {"axes": [1, 2, 0]}, None),
    "expand": ([R(3, 1)], {"shape": [2, 3, 4]}, None),
    "squeeze": ([R(3, 1, 4)], {"axis": 1}, None),
    "unsqueeze": ([R(3, 4)], {"axis": -1}, None),
    "concat": ([R(1, 3), R(2, 3, seed=1), R(3, 3, seed=2)], {"axis": 0}, None),
    "stack": ([R(2, 3), R(2, 3, seed=1)], {"axis": -1}, None),
    "split": ([R(6, 2)], {"sections": 3, "axis": 0}, None),
    "slice": ([R(4, 5)], {"index": "1:3, ::2"}, None),
    "slice_backward": ([R(2, 3)], {"shape": [4, 5], "index": "1:3, ::2"}, None),
    "threshold_backward": ([R(3, 4), R(3, 4, seed=1, away=0.05)], {}, None),
    "clone": ([R(3, 4)], {}, None),
    "matmul": ([R(2, 3, 4), R(4, 5, seed=1)], {}, None),
    "softmax": ([R(3, 4)], {"axis": 1}, None),
    "log_softmax": ([R(3, 4)], {"axis": 0}, None),
    "cross_entropy": ([R(4, 3), np.array([0, 2, 1, 2])], {}, [0]),
    "mse_loss": ([R(3, 4), R(4, seed=1)], {}, None),
    "layer_norm": ([R(3, 5)], {"axis": -1, "eps": 1e-5}, None),
    "cast": ([R(3, 4)], {"dtype": "float64"}, None),
    "to": ([R(3, 4)], {"device": "sim:1"}, None),
    "delay": ([R(3, 4)], {"ms": 0}, None),
    "reenter": ([R(3, 4)], {"depth": 3}, None),
}
EXCLUDED = {
    "fail": "its backward raises by design",
    "nan": "its backward returns NaN by design",
}


def test_gradgrad_table_covers_every_op():
    """A new differentiable op must get a second-derivative line (or a reason)."""
    missing = sorted(n for n, op in OPS.items()   # ATen ops: tests/test_aten_gradgrad.py
                     if op.fn is not None and op.public and not isinstance(op, AtenOp)
                     and n not in GRADGRAD and n not in EXCLUDED)
    assert not missing, f"ops without a gradgrad line: {missing}"


# op -> (node of the gradient under create_graph with a seed that does not
# require grad, or None: PyTorch's own answer, checked below). relu and abs
# record a node reading the forward's tensor (Note [Recorded masks of relu
# and abs]); the others mask with comparisons, recording nothing.
SEED_GRAD_FN = {
    "relu": ("ThresholdBackwardBackward0", lambda t, x: t.relu(x)),
    "abs": ("MulBackward0", lambda t, x: t.abs(x)),
    "clamp": (None, lambda t, x: t.clamp(x, -0.5, 0.5)),
    "maximum": (None, lambda t, x: t.maximum(x, t.full_like(x, 0.1))),
    "minimum": (None, lambda t, x: t.minimum(x, t.full_like(x, 0.1))),
    "max": (None, lambda t, x: t.amax(x, (0, 1))),
    "min": (None, lambda t, x: t.amin(x, (0, 1))),
    "where": (None, lambda t, x: t.where(x > 0, x, t.zeros_like(x))),
}
SEED_ARGS = {"clamp": {"min": -0.5, "max": 0.5}}


@pytest.mark.parametrize("op_name", sorted(SEED_GRAD_FN))
def test_gradient_records_like_pytorch_when_the_seed_does_not_require_grad(op_name):
    """/tmp/rv/relu2.yaml: grad(relu(x).sum(), x, create_graph) then backward
    was "root does not require grad"; PyTorch records ThresholdBackwardBackward0
    and the double backward gives x.grad = zeros."""
    torch = pytest.importorskip("torch")
    expected, torch_fn = SEED_GRAD_FN[op_name]
    values = np.array([[1.0, -2.0, 3.0], [-0.25, 0.75, -4.0]])
    tx = torch.tensor(values, requires_grad=True)
    (tg,) = torch.autograd.grad(torch_fn(torch, tx).sum(), [tx], create_graph=True)
    assert (type(tg.grad_fn).__name__ if tg.requires_grad else None) == expected

    op = OPS[op_name]
    x = Tensor(values.copy(), requires_grad=True)
    if op_name == "where":
        out = op(Tensor(values > 0), x, Tensor(np.zeros_like(values)))
    elif op_name in ("maximum", "minimum"):
        out = op(x, Tensor(np.full_like(values, 0.1)))
    else:
        out = op(x, **_args(op, SEED_ARGS.get(op_name, {})))
    (g,) = grad([OPS["sum"](out)], [x], create_graph=True)
    assert (g.grad_fn.name if g.requires_grad else None) == expected
    if g.requires_grad:
        tg.sum().backward()
        backward([OPS["sum"](g)])
        np.testing.assert_array_equal(x.grad, tx.grad.numpy(force=True))  # zeros


def _args(op, args):
    return {k: op.args[k].check(v) for k, v in args.items()}


def _outputs(op, out):
    return list(out) if op.multi_output else [out]


def _first_order(op, arrays, args, wrt, vs, create_graph):
    """The VJP of ``op`` at ``arrays`` with upstream ``vs``: (inputs, vs, gradients)."""
    xs = [Tensor(np.array(a, copy=True), requires_grad=i in wrt) for i, a in enumerate(arrays)]
    vts = [Tensor(v.copy(), requires_grad=True) for v in vs] if create_graph else vs
    outs = _outputs(op, op(*xs, **args))
    gs = grad(outs, [xs[i] for i in wrt], grad_outputs=vts, create_graph=create_graph)
    return xs, vts, gs


@pytest.mark.parametrize("op_name", sorted(GRADGRAD))
def test_gradgrad(op_name):
    """gradgradcheck: the derivative of <w, vjp(x, v)> w.r.t. x and v, analytic
    (a backward through the backward) against central differences, float64."""
    op = OPS[op_name]
    arrays, args, wrt = GRADGRAD[op_name]
    args = _args(op, args)
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if wrt is None else wrt
    outs = _outputs(op, op.fn(*arrays, **args))
    rng = np.random.default_rng(zlib.crc32(op_name.encode()))
    vs = [to_device(np.asarray(rng.standard_normal(np.shape(o))), device_of(o)) for o in outs]
    ws = [np.asarray(rng.standard_normal(arrays[i].shape)) for i in wrt]

    xs, vts, gs = _first_order(op, arrays, args, wrt, vs, create_graph=True)
    assert all(isinstance(g, Tensor) for g in gs)
    roots = [(g, w) for g, w in zip(gs, ws) if g.requires_grad]
    assert roots, "the first-order gradient depends on nothing"
    targets = [xs[i] for i in wrt] + list(vts)
    analytic = grad([g for g, _ in roots], targets, grad_outputs=[w for _, w in roots],
                    allow_unused=True)

    def objective(arrs, v_arrs):
        _, _, g_raw = _first_order(op, arrs, args, wrt, v_arrs, create_graph=False)
        return sum(float(np.sum(w * np.asarray(g, np.float64))) for w, g in zip(ws, g_raw))

    eps = 1e-6
    variables = [(arrays, i) for i in wrt] + [(vs, k) for k in range(len(vs))]
    for (holder, j), got in zip(variables, analytic):
        base = holder[j]
        num = np.zeros(np.shape(base))
        for idx in np.ndindex(num.shape):
            orig = base[idx]
            base[idx] = orig + eps
            plus = objective(arrays, vs)
            base[idx] = orig - eps
            minus = objective(arrays, vs)
            base[idx] = orig
            num[idx] = (plus - minus) / (2 * eps)
        got = np.zeros(num.shape) if got is None else np.asarray(got, np.float64)
        np.testing.assert_allclose(got, num, rtol=1e-4, atol=1e-6,
                                   err_msg=f"{op_name}: d/d{'x' if holder is arrays else 'v'}{j}")


def test_anomaly_mode_checks_tensor_gradients():
    """detect_anomaly sees the gradients of a create_graph backward (Tensors) too."""
    from gradcli.autograd import detect_anomaly

    x = leaf(3)
    y = O.nan(x * 2).sum()
    with detect_anomaly():
        with pytest.raises(RuntimeError, match="Function 'NanBackward0' returned nan values "
                                               "in its 0th output"):
            grad([y], [x], create_graph=True)


def test_validate_outputs_fixes_tensor_gradients_differentiably():
    """A Tensor gradient of a broadcast shape is summed back (recorded), one of another
    dtype is cast (recorded), an incompatible one gets PyTorch's message."""
    from gradcli.autograd import Function

    class Broadcasting(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            # (2, 3) gradient for a (3,) input, and float32: both fixed by the engine
            grad_x = O.expand(O.mul(O.mul(g, x), np.full((), 2.0)), shape=[2, 3])
            return O.cast(grad_x, dtype="float32")

    x = leaf(3)
    (g,) = grad([Broadcasting.apply(x).sum()], [x], create_graph=True)
    assert g.dtype == np.float64 and g.shape == (3,)
    np.testing.assert_allclose(g.data, 4 * x.data, rtol=1e-6)
    (gg,) = grad([g.sum()], [x])
    np.testing.assert_allclose(gg, np.full(3, 4.0), rtol=1e-6)

    class Wrong(Function):
        @staticmethod
        def forward(ctx, x):
            return x.copy()

        @staticmethod
        def backward(ctx, g):
            return O.concat(g, g, axis=0)

    y = leaf(3)
    with pytest.raises(RuntimeError) as err:
        grad([Wrong.apply(y).sum()], [y], create_graph=True)
    assert str(err.value) == ("Function WrongBackward returned an invalid gradient at index 0 - "
                              "got [6] but expected shape compatible with [3]")


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "every_other_column", "scalar"])
def test_first_grad_under_create_graph_records_torchs_node(layout):
    """PyTorch copies the first gradient into the leaf's own layout (CopyBackwards)
    when that layout is dense, else clones it contiguously (CloneBackward0)."""
    torch = pytest.importorskip("torch")
    base = np.arange(1.0, 25.0).reshape(4, 6)
    data = {"contiguous": base, "transposed": base.T, "every_other_column": base[:, ::2],
            "scalar": np.array(2.0)}[layout]
    x = Tensor(data, requires_grad=True)
    (x * x * x).sum().backward(create_graph=True)
    tx = torch.from_numpy(data).requires_grad_()     # from_numpy keeps the strides
    (tx * tx * tx).sum().backward(create_graph=True)
    assert x.grad.grad_fn.name == type(tx.grad.grad_fn).__name__
    assert x.grad.data.strides == tuple(s * 8 for s in tx.grad.stride())
    np.testing.assert_allclose(x.grad.data, tx.grad.detach().numpy())
    (gg,) = grad([x.grad.sum()], [x])
    (tgg,) = torch.autograd.grad([tx.grad.sum()], [tx])
    np.testing.assert_allclose(gg, tgg.numpy())


def test_saved_non_differentiable_outputs_come_back_without_a_history(monkeypatch):
    """Under create_graph a node's saved outputs are handed to its formula as Tensors
    whose grad_fn is the node, except those the op marks non-differentiable (layer
    norm's mean and rstd): as PyTorch's SavedVariable of an output that did not require
    grad, they come back as constants, so no gradient can flow into their slots."""
    op = OPS["aten.native_layer_norm.default"]
    seen = []
    real = op.vjp_all
    monkeypatch.setattr(op, "vjp_all", lambda gs, ans, *rest: seen.append(ans) or real(gs, ans, *rest))
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w = Tensor(rng.standard_normal(4), requires_grad=True)
    out, mean, rstd = op(x, w, None, normalized_shape=[4], eps=1e-5)
    (gx,) = grad([O.sum(out * out)], [x], create_graph=True)
    (ans,) = seen
    assert ans[0].grad_fn is out.grad_fn and ans[0].requires_grad
    for saved, forward in ((ans[1], mean), (ans[2], rstd)):
        assert saved.grad_fn is None and not saved.requires_grad
        np.testing.assert_array_equal(saved.data, forward.data)
    assert gx.grad_fn is not None
