"""The per-op path of a run: what the VJPs and the recorded ops call, with no work that
the general path would do for nothing (Note [Raw calls], Note [Direct VJPs] in
gradcli/ops/aten/registry.py). Each shortcut gives what the general path gives."""
import numpy as np
import pytest

from gradcli.autograd import Tensor, grad
from gradcli.ops.aten.registry import ATEN_OPS, _FlatVJPs

MM = ATEN_OPS["aten.mm.default"]
ADDMM = ATEN_OPS["aten.addmm.default"]
VIEW = ATEN_OPS["aten.view.default"]
CAT = ATEN_OPS["aten.cat.default"]
EMBEDDING = ATEN_OPS["aten.embedding.default"]


def test_plain_ops_call_their_formulas_directly():
    """An op whose every schema input is differentiable, without a Tensor[], hands the
    node its formulas themselves: edge i is schema input i."""
    for op in (MM, ADDMM, VIEW):
        assert type(op.vjps) is tuple
        assert all(op.vjps[i] is op.schema_vjps[i] for i in range(len(op.schema_vjps)))
    # a Tensor[] input, or an input without a gradient, still maps edges to inputs
    assert type(CAT.vjps) is _FlatVJPs
    assert type(EMBEDDING.vjps) is _FlatVJPs


def test_every_op_with_direct_vjps_qualifies():
    direct = [op for op in ATEN_OPS.values() if type(op.vjps) is tuple]
    assert len(direct) > 100
    for op in direct:
        assert op._list_pos is None and not op.first_order_only and op.joint_vjp is None
        assert all(op.differentiable_inputs)


def _general(op, *inputs, **args):
    """The schema path of ``AtenOp.__call__`` (the raw-call shortcut turned off)."""
    op._plain = False
    try:
        return op(*inputs, **args)
    finally:
        op._plain = True


def test_raw_calls_give_what_the_schema_path_gives():
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 4)), rng.normal(size=(4, 5)), rng.normal(size=(5,))
    np.testing.assert_array_equal(MM(a, b), _general(MM, a, b))
    np.testing.assert_array_equal(ADDMM(c, a, b, alpha=2), _general(ADDMM, c, a, b, alpha=2))
    np.testing.assert_array_equal(ADDMM(c, a, b), _general(ADDMM, c, a, b))
    assert VIEW(a, size=[-1]).shape == _general(VIEW, a, size=[-1]).shape == (12,)


def test_raw_calls_keep_the_forward_checks():
    with pytest.raises(ValueError, match="invalid for input of size 12"):
        VIEW(np.zeros((3, 4)), size=[5])
    with pytest.raises(ValueError, match="2-D operands"):
        MM(np.zeros(3), np.zeros((3, 2)))


def test_a_tensor_input_still_records():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    out = MM(x, np.ones((3, 4)))
    assert type(out) is Tensor and out.grad_fn.name == "MmBackward0"
    with pytest.raises(TypeError, match="takes 2 tensor inputs"):
        MM(np.ones((2, 2)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("shape", [(), (0,), (3, 4), (257,)])
def test_host_erf_is_libm_erf_element_by_element(dtype, shape):
    """Note [erf on the host]: the fast path computes libm's erf on each element widened
    to float64, cast back to the input's dtype: the bits of ``math.erf``."""
    import math

    from gradcli.ops.aten_kernels._common import host_erf

    x = (np.random.default_rng(1).normal(size=shape) * 3).astype(dtype)
    if x.ndim == 2:
        x = x.T                                  # a non-contiguous input
    expect = np.array([math.erf(float(v)) for v in x.ravel()], np.float64).astype(dtype)
    out = host_erf(x)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert out.ravel().tobytes() == expect.tobytes()
    assert out.strides == np.empty_like(x).strides          # laid out like the input
    special = host_erf(np.array([np.nan, np.inf, -np.inf, -0.0]))
    assert np.isnan(special[0]) and list(special[1:3]) == [1.0, -1.0] and np.signbit(special[3])


def test_host_erf_answers_the_same_argument_bit_for_bit_with_a_fresh_copy(monkeypatch):
    """Note [erf's last results]: an argument equal bit for bit to a recent one gets that
    result again, as a new array laid out like the new argument; -0.0 is not 0.0."""
    import math

    from gradcli.ops.aten_kernels import _common
    from gradcli.ops.aten_kernels._common import host_erf

    computed = []
    compute = _common._host_erf
    monkeypatch.setattr(_common, "_host_erf", lambda a: computed.append(a.shape) or compute(a))
    x = np.random.default_rng(2).normal(size=(6, 5))
    first = host_erf(x)
    again = host_erf(x.copy().T.copy().T)            # the same values, another layout
    assert computed == [(6, 5)]                       # computed once
    assert again is not first and again.tobytes() == first.tobytes()
    assert again.strides == np.empty_like(x.T.copy().T).strides
    again[...] = 7.0                                  # the kept result is not the one handed out
    assert host_erf(x).tobytes() == first.tobytes()
    zeros = np.zeros(3)
    assert not np.signbit(host_erf(zeros)).any()
    assert np.signbit(host_erf(-zeros)).all()         # bits, not ==: erf(-0.0) is -0.0
    # an unseen argument is computed, and the kept results stay bounded
    for k in range(3 * _common._ERF_KEPT):
        y = np.full(4, 0.1 * k)
        assert host_erf(y).tolist() == [math.erf(0.1 * k)] * 4
    assert len(_common._erf_results) == _common._ERF_KEPT


def test_leaf_accumulators_share_one_stamp_per_leaf():
    """A run stamps each leaf's accumulator with the leaf's (op_id, line, leaf) pairs, made
    once per loaded graph (Note [Metadata stamps]); reading a node's metadata gives it
    a dict of its own."""
    from gradcli.loader import loads

    graph = loads("version: 1\ntensors:\n  w: {shape: [3], init: ones, requires_grad: true}\n"
                  "ops:\n  - {op: mul, inputs: [w, w], output: y}\n"
                  "  - {op: sum, inputs: [y], output: loss}\nbackward:\n  roots: [loss]\n")
    graph.run(order=False)              # (an order record reads every node's metadata)
    first = graph.values["w"].grad_accumulator
    graph.run(order=False)
    second = graph.values["w"].grad_accumulator
    assert first is not second and first._metadata is second._metadata
    assert second.metadata == {"op_id": "w", "line": 3, "leaf": True}
    second.metadata["extra"] = 1                       # its own dict now
    assert "extra" not in dict(first._metadata)


_OPERANDS = [np.ones(3), np.ones((2, 3), np.float32), np.arange(3), np.ones(3, bool),
             np.ones(3, np.complex64), np.array(2.0), np.array(2, np.int32), np.ones((), np.float32),
             0.5, 3, True, None]


@pytest.mark.parametrize("a", _OPERANDS[:5], ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_two_operand_promotion_shortcuts_answer_what_the_loop_answers(a):
    """result_type's shortcuts for two operands (two tensors with dims; a floating tensor
    with dims and a zero-dim tensor or a number) against its general loop, which a third
    operand, None (skipped), sends every call through."""
    from gradcli.ops.aten.promotion import result_type

    for b in _OPERANDS:
        if b is None:
            continue
        assert result_type(a, b) == result_type(a, b, None), (a.dtype, b)


@pytest.mark.parametrize("shape, size", [
    ((2, 3, 4), [-1]), ((2, 3, 4), [-1, 4]), ((2, 3, 4), [2, -1]), ((2, 3, 4), [2, -1, 2]),
    ((2, 3, 4), [1, -1, 1, 6]), ((4, 0), [-1, 0, 2]),
])
def test_view_infers_its_minus_one_as_reshape_does(shape, size):
    x = np.zeros(shape)
    if 0 in size and x.size == 0:
        with pytest.raises(ValueError, match="cannot reshape a tensor of 0 elements"):
            VIEW(x, size=size)
        return
    assert VIEW(x, size=size).shape == x.reshape(size).shape


def test_view_refuses_a_minus_one_that_divides_nothing():
    with pytest.raises(ValueError, match=r"shape \[5, -1\] is invalid for input of size 24"):
        VIEW(np.zeros((2, 3, 4)), size=[5, -1])
    with pytest.raises(ValueError, match=r"shape \[0, -1\] is invalid for input of size 24"):
        VIEW(np.zeros((2, 3, 4)), size=[0, -1])


def test_row_major_operands_skip_the_layout_work(monkeypatch):
    """An elementwise op on row-major arrays has a row-major result, which is its own
    layout: the forward's array comes back without TensorIterator's strides worked out;
    a transposed operand still gets them (and PyTorch's column-major result)."""
    from gradcli.ops.aten import tensor_iterator

    worked = []
    real = tensor_iterator.iterator_strides
    monkeypatch.setattr(tensor_iterator, "iterator_strides",
                        lambda shape, arrays: worked.append(shape) or real(shape, arrays))
    add = ATEN_OPS["aten.add.Tensor"]
    a, b = np.ones((3, 4)), np.ones((3, 4))
    add(a, b)
    add(a, 2.0)
    assert worked == []
    out = add(np.ones((4, 3)).T, b)
    assert worked == [(3, 4)] and out.flags.f_contiguous and not out.flags.c_contiguous


def test_add_and_mul_vjps_do_their_common_case_in_line(monkeypatch):
    """Note [The chain's VJPs inline]: a gradient of the operand's shape is not handed to
    unbroadcast, and raw arrays are multiplied without the op's call; a broadcast operand
    is still summed down, and under create_graph the product still records."""
    import gradcli.ops as O
    from gradcli.autograd import backward
    from gradcli.ops import library

    summed = []
    real = library.unbroadcast
    monkeypatch.setattr(library, "unbroadcast", lambda g, shape: summed.append(shape) or real(g, shape))
    x, y = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True), Tensor(np.ones((2, 3)), requires_grad=True)
    backward(O.sum(x * y + x - y))
    assert summed == []
    np.testing.assert_array_equal(x.grad, 2.0)
    np.testing.assert_array_equal(y.grad, np.arange(6.0).reshape(2, 3) - 1)
    b = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    backward(O.sum(x * b + b))
    assert summed == [(3,), (3,)]
    np.testing.assert_array_equal(b.grad, [5.0, 7.0, 9.0])
    w = Tensor(np.array([2.0, 3.0]), requires_grad=True)
    (gw,) = grad([O.sum(w * w * w)], [w], create_graph=True)
    assert type(gw) is Tensor and gw.grad_fn is not None
    np.testing.assert_array_equal(gw.data, 3 * w.data ** 2)


def test_view_and_matrix_vjps_call_the_forwards_on_arrays(monkeypatch):
    """Note [VJPs on arrays call forwards]: a backward without create_graph runs the view,
    transpose and matrix-product VJPs (and addmm's bias, summed by unbroadcast) without the
    ops' dispatch, with PyTorch's values;
    under create_graph they still record the ops (a second derivative through them)."""
    from gradcli.autograd import backward
    import sys

    from gradcli.ops.aten.registry import AtenOp
    from gradcli.ops.core import Op

    T = ATEN_OPS["aten.t.default"]
    TRANSPOSE = ATEN_OPS["aten.transpose.int"]
    vjps = {f.__code__ for f in (*MM.vjps, *ADDMM.vjps, VIEW.vjps[0], T.vjps[0], TRANSPOSE.vjps[0])}
    dispatched = []                      # (op, the VJP it was called from, itself or a helper)

    def spy(real):
        def call(self, *a, **k):
            callers = {sys._getframe(1).f_code, sys._getframe(2).f_code}
            if callers & vjps:
                dispatched.append(self.name)
            return real(self, *a, **k)
        return call
    for cls in (AtenOp, Op):             # the ATen ops', and the library's (view's reshape)
        monkeypatch.setattr(cls, "__call__", spy(cls.__call__))
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w = Tensor(np.arange(12.0).reshape(4, 3) / 10, requires_grad=True)
    b = Tensor(np.ones(4), requires_grad=True)
    h = ADDMM(b, x, T(w))                              # (2, 4)
    z = TRANSPOSE(VIEW(h, size=[4, 2]), dim0=0, dim1=1)  # (2, 4)
    y = MM(z, w)                                       # (2, 3)
    dispatched.clear()
    backward(ATEN_OPS["aten.sum.default"](y))
    assert dispatched == []
    zv = (x.data @ w.data.T + b.data).reshape(4, 2).T
    g_h = (np.ones((2, 3)) @ w.data.T).T.reshape(2, 4)   # back through mm, transpose, view
    np.testing.assert_allclose(w.grad, zv.T @ np.ones((2, 3)) + g_h.T @ x.data)
    np.testing.assert_allclose(x.grad, g_h @ w.data)
    np.testing.assert_allclose(b.grad, g_h.sum(axis=0))
    # sum(x^T x) = sum_k s_k^2 (s: x's row sums): the gradient 2 s_k, and of sum(gx * gx)
    # = 12 sum_k s_k^2 the gradient 24 s_k, through the recorded mm and t
    (gx,) = grad([ATEN_OPS["aten.sum.default"](MM(T(x), x))], [x], create_graph=True)
    s = x.data.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(gx.data, np.repeat(2 * s, 3, axis=1))
    (ggx,) = grad([ATEN_OPS["aten.sum.default"](gx * gx)], [x])
    np.testing.assert_allclose(ggx, np.repeat(24 * s, 3, axis=1))


_SQUARES = ("version: 1\ntensors: {x: {value: [1.0, 2.0], requires_grad: true}}\n"
            "ops: [{op: mul, inputs: [x, x], output: y}, {op: sum, inputs: [y], output: s}]\n"
            "backward: {roots: [s]}\n")


def test_a_forward_lets_go_of_the_last_runs_values_before_it_starts(monkeypatch):
    """Note [The last run's values]: ``values`` holds the last forward's tensors (every
    op's output); the next run or forward drops them before computing its own, so two
    forwards' activations are never alive at once, and ``values`` then holds the new ones."""
    import weakref

    from gradcli.graph import Graph
    from gradcli.loader import loads

    graph = loads(_SQUARES)
    graph.run()
    last = weakref.ref(graph.values["y"])
    alive = []
    real = Graph._forward

    def forward(self):
        alive.append(last() is not None)
        return real(self)

    monkeypatch.setattr(Graph, "_forward", forward)
    result = graph.run()
    assert alive == [False]
    np.testing.assert_array_equal(result.grads["x"], [2.0, 4.0])
    np.testing.assert_array_equal(graph.values["y"].data, [1.0, 4.0])
    last = weakref.ref(graph.values["y"])
    values = graph.forward()
    assert alive == [False, False] and graph.values is values


def test_current_values_runs_a_forward_only_when_none_has_finished():
    from gradcli.loader import loads

    graph = loads(_SQUARES)
    assert graph.values is None
    values = graph.current_values()
    assert graph.values is values
    assert graph.current_values() is values
    np.testing.assert_array_equal(values["y"].data, [1.0, 4.0])
