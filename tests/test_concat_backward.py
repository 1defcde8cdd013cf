"""`concat` backward does linear work in its number of inputs
(Note [Concat offsets once per node] in gradcli/ops/library.py): the offsets are
computed once per node, never once per input. Work is counted, not timed."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import Tensor, backward, grad
from gradcli.ops import library


@pytest.fixture
def offset_calls(monkeypatch):
    """Count the calls of the offset computation (each one sums every input's size)."""
    calls = []
    real = library._concat_offsets

    def counting(xs, axis):
        calls.append(len(xs))
        return real(xs, axis)

    monkeypatch.setattr(library, "_concat_offsets", counting)
    return calls


def _inputs(n, seed=0):
    """n leaves of shape (2, k), k cycling 1..3, so that offsets are uneven."""
    rng = np.random.default_rng(seed)
    return [Tensor(rng.normal(size=(2, 1 + k % 3)), requires_grad=True) for k in range(n)]


def _expected(xs, w):
    out, start = [], 0
    for x in xs:
        k = x.data.shape[1]
        out.append(w[:, start:start + k])
        start += k
    return out


def test_offsets_are_computed_once_per_node(offset_calls):
    # (scripts/-style timings: 30,000 inputs took 22 s before, 8 s after; the
    # count is what a test can hold on a loaded machine.)
    xs = _inputs(5_000)
    w = np.random.default_rng(1).normal(size=(2, sum(x.data.shape[1] for x in xs)))
    backward(O.sum(O.mul(O.concat(*xs, axis=1), w)))
    assert offset_calls == [5_000]           # once, not once per input (5,000 times)
    for x, e in zip(xs, _expected(xs, w)):
        assert np.array_equal(x.grad, e)


def test_each_concat_node_gets_its_own_offsets(offset_calls):
    """Two concat nodes, run one after the other on one thread, fed the same
    gradient, sharing their first input, with the same total size but other
    offsets, and the first one's last input needing no gradient: each computes
    its own offsets once (one call of its VJP for all inputs)."""
    a, b, c, d = (Tensor(np.ones((1, k)), requires_grad=True) for k in (1, 1, 2, 3))
    const = Tensor(np.ones((1, 2)))
    y2 = O.concat(a, b, d, axis=1)           # offsets 0, 1, 2
    y1 = O.concat(a, c, const, axis=1)       # offsets 0, 1, 3; created last, runs first
    w = np.arange(5.0).reshape(1, 5)
    backward(O.sum(O.mul(O.add(y1, y2), w)))
    assert np.array_equal(a.grad, 2 * w[:, :1])
    assert np.array_equal(c.grad, w[:, 1:3])
    assert np.array_equal(b.grad, w[:, 1:2])
    assert np.array_equal(d.grad, w[:, 2:5])
    assert offset_calls == [3, 3]            # one per node


def test_concat_backward_records_under_create_graph():
    """The VJP is written with ops: its gradients are differentiable."""
    xs = _inputs(5)                          # widths 1, 2, 3, 1, 2
    w = Tensor(np.random.default_rng(2).normal(size=(2, 9)), requires_grad=True)
    gs = grad(O.sum(O.mul(O.concat(*xs, axis=-1), w)), xs, create_graph=True)
    for g, e in zip(gs, _expected(xs, w.data)):
        assert g.grad_fn is not None and np.array_equal(g.data, e)
    # gs[1] is w[:, 1:3]: d/dw sum(gs[1] ** 2) is 2 w there, 0 elsewhere.
    backward(O.sum(O.mul(gs[1], gs[1])))
    expected = np.zeros((2, 9))
    expected[:, 1:3] = 2 * w.data[:, 1:3]
    assert np.allclose(w.grad, expected)


@pytest.mark.timeout(60)
def test_concurrent_concat_backwards_keep_their_own_offsets():
    """Backwards of different concats at once, on several threads, each gets its own offsets."""
    errors = []

    def work(seed):
        try:
            for _ in range(20):
                xs = _inputs(50 + seed, seed)
                width = sum(x.data.shape[1] for x in xs)
                w = np.random.default_rng(seed).normal(size=(2, width))
                backward(O.sum(O.mul(O.concat(*xs, axis=1), w)))
                for x, e in zip(xs, _expected(xs, w)):
                    if not np.array_equal(x.grad, e):
                        errors.append(f"thread {seed}: wrong gradient")
                        return
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {seed}: {exc!r}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert not errors and not any(t.is_alive() for t in threads), errors


def test_aten_cat_backward_runs_its_formula_once_per_node(monkeypatch):
    """aten.cat's VJP (cat_tensors_backward: every input's slice) runs once per node, not
    once per input (Note [one call for all inputs' gradients] in gradcli/ops/core.py):
    10,000 inputs took 487 s before (scripts/bench_concat.py), 0.14 s after."""
    op = O.OPS["aten.cat.default"]
    calls = []
    (real,) = op.schema_vjps

    def counting(g, ans, tensors, dim=0):
        calls.append(len(tensors))
        return real(g, ans, tensors, dim=dim)

    monkeypatch.setattr(op, "schema_vjps", (counting,))
    xs = _inputs(300)
    const = Tensor(np.ones((2, 2)))          # no gradient wanted: no edge is asked for it
    w = np.random.default_rng(3).normal(size=(2, sum(x.data.shape[1] for x in xs) + 2))
    gs = grad(op(xs[:150] + [const] + xs[150:], dim=1), xs, grad_outputs=[w])
    assert calls == [301]
    expected = _expected(xs[:150], w[:, :sum(x.data.shape[1] for x in xs[:150])])
    rest = w[:, sum(x.data.shape[1] for x in xs[:150]) + 2:]
    expected += _expected(xs[150:], rest)
    for g, e in zip(gs, expected):
        assert np.array_equal(g, e)


def test_one_inputs_vjp_of_a_joint_op_is_that_inputs_gradient():
    # op.vjps[i] of an op with one VJP for all inputs (concat) gives input i's gradient alone
    from gradcli.autograd.node import InputMetadata

    xs = [np.ones((2, k)) for k in (1, 3, 2)]
    metas = [InputMetadata.of(x) for x in xs]
    g = np.arange(12.0).reshape(2, 6)
    np.testing.assert_array_equal(O.OPS["concat"].vjps[1](g, None, *metas, axis=1), g[:, 1:4])
