"""Core ATen ops, the shape, indexing and nn half: one table row per case, run through
the checks of ``tests/test_aten_ops.py`` (forward, dtypes, gradients and node names
against torch, gradients against finite differences, the load-time shape rule) and
``tests/test_aten_gradgrad.py`` (second derivatives), whose machinery this file reuses.

Rows cover float64 and float32 (every row runs in both), empty inputs, broadcasting
where the op broadcasts and non-contiguous inputs (``nc``: a transposed or strided view).
"""
from __future__ import annotations

import numpy as np
import pytest

import test_aten_gradgrad as GG
import test_aten_ops as T
from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from test_aten_ops import I, R, needs_torch, torch

CASES = []
REFUSED = []
GRADGRAD = {}
# create_graph gradients whose root node differs from PyTorch's (same values, checked by
# the second-derivative tests): PyTorch records one composite formula's last op there
NODE_NAME_DIFFERENCES = {}
# ops without a derivative in PyTorch (NotImplemented nodes): checked by their own tests
NOT_DIFFERENTIABLE = set()


def case(op, inputs, args=None, wrt=None, fd=True, id=None):  # noqa: A002
    """One row, as ``tests/test_aten_ops.py``'s ``case``."""
    n = sum(1 for c in CASES if c.values[0] == op)
    CASES.append(pytest.param(op, inputs, args or {}, wrt, fd, id=id or f"{op}-{n}"))


def refused(op, inputs, args, match, static=True, id=None):  # noqa: A002
    """One row: refused as PyTorch refuses it (``tests/test_aten_ops.py``'s ``refused``)."""
    n = sum(1 for c in REFUSED if c.values[0] == op)
    REFUSED.append(pytest.param(op, inputs, args, match, static, id=id or f"{op}-{n}"))


def nc(x):
    """``x`` as a non-contiguous view with the same values (a transposed copy, transposed back)."""
    y = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1) if x.ndim >= 2 else x.repeat(2)[::2]
    assert not y.flags.c_contiguous and np.array_equal(x, y)
    return y


# -- group norm ---------------------------------------------------------------------------
GN = "aten.native_group_norm.default"
case(GN, [R(2, 4, 3, 3), R(4, seed=1), R(4, seed=2)], {"N": 2, "C": 4, "HxW": 9, "group": 2, "eps": 1e-5})
case(GN, [R(3, 6, 5), None, None], {"N": 3, "C": 6, "HxW": 5, "group": 3, "eps": 1e-3})
case(GN, [R(2, 4, 5), nc(R(4, seed=1)), None], {"N": 2, "C": 4, "HxW": 5, "group": 4, "eps": 1e-5})
case(GN, [R(2, 6), R(6, seed=1), R(6, seed=2)], {"N": 2, "C": 6, "HxW": 1, "group": 1, "eps": 1e-5})
case(GN, [R(0, 4, 3), R(4, seed=1), R(4, seed=2)], {"N": 0, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5}, fd=False,
     id=GN + "-empty")
GRADGRAD[GN] = ([R(2, 4, 3), R(4, seed=1), R(4, seed=2)], {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5},
                None)
NODE_NAME_DIFFERENCES[GN] = "weight and bias gradients: SumBackward1 (PyTorch: ViewBackward0)"
refused(GN, [R(2, 4, 3), None, None], {"N": 2, "C": 4, "HxW": 3, "group": 3, "eps": 1e-5}, "divisible by num_groups")
refused(GN, [R(2, 4, 3), R(3), None], {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5}, "weight to be a vector")
refused(GN, [R(2, 4, 3), None, None], {"N": 2, "C": 4, "HxW": 4, "group": 2, "eps": 1e-5}, "elements")
refused(GN, [np.ones((2, 4, 3), np.int64), None, None], {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5},
        "not implemented for int64")
GNB = "aten.native_group_norm_backward.default"
NOT_DIFFERENTIABLE.add(GNB)
_gn_x = R(2, 4, 3)
_gn_mean = _gn_x.reshape(2, 2, 6).mean(-1)
_gn_rstd = 1 / np.sqrt(_gn_x.reshape(2, 2, 6).var(-1) + 1e-5)
case(GNB, [R(2, 4, 3, seed=3), _gn_x, _gn_mean, _gn_rstd, R(4, seed=1)],
     {"N": 2, "C": 4, "HxW": 3, "group": 2, "output_mask": [True, True, True]}, wrt=[])
refused(GNB, [R(2, 4, 3, seed=3), _gn_x, _gn_mean, _gn_rstd, None],
        {"N": 2, "C": 4, "HxW": 3, "group": 2, "output_mask": [True, False, True]}, "gradcli computes every output")


def test_group_norm_statistics_carry_gradients_like_torch():
    # mean and rstd are differentiable outputs (Note [group norm statistics carry gradients])
    x = R(2, 4, 3)
    args = {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5}
    xt = Tensor(x.copy(), requires_grad=True)
    _, mean, rstd = OPS[GN](xt, None, None, **args)
    assert mean.grad_fn is rstd.grad_fn is not None
    v = R(2, 2, seed=5)
    ours = grad([mean, rstd], [xt], grad_outputs=[v, 2 * v])[0]
    if torch is not None:
        tx = torch.tensor(x, requires_grad=True)
        _, tm, tr = torch.ops.aten.native_group_norm(tx, None, None, **args)
        theirs = torch.autograd.grad([tm, tr], [tx], [torch.tensor(v), torch.tensor(2 * v)])[0]
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-12)
    assert np.abs(ours).sum() > 0


def test_group_norm_refuses_a_non_contiguous_input_like_torch():
    x = OPS["aten.transpose.int"](R(2, 5, 4), dim0=1, dim1=2)
    with pytest.raises(ValueError, match="contiguous"):
        OPS[GN](x, None, None, N=2, C=4, HxW=5, group=2, eps=1e-5)
    if torch is not None:
        with pytest.raises(RuntimeError, match="contiguous"):
            torch.ops.aten.native_group_norm(torch.tensor(R(2, 5, 4)).transpose(1, 2), None, None, 2, 4, 5, 2, 1e-5)


@pytest.mark.parametrize("op_name", sorted(NOT_DIFFERENTIABLE))
def test_ops_without_a_derivative_record_pytorchs_not_implemented_node(op_name):
    inputs, args = next((c.values[1], c.values[2]) for c in CASES if c.values[0] == op_name)
    wrt = T._wrt(inputs, None)
    flat, outs = T._ours(op_name, inputs, args, wrt)
    assert outs[0].grad_fn.name == "torch::autograd::NotImplemented"
    if torch is not None:
        _, touts = T._theirs(op_name, inputs, args, wrt)
        assert touts[0].grad_fn.name() == "torch::autograd::NotImplemented"
    with pytest.raises(RuntimeError, match=r"derivative for aten::\w+ is not implemented"):
        grad([outs[0]], [flat[wrt[0]]], grad_outputs=[np.ones(outs[0].shape)])


# -- the checks of tests/test_aten_ops.py, on this table ----------------------------------------
PARAMS = T.PARAMS


@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[4] and c.values[3] != []])
def test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd):
    T.test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd)


@needs_torch
@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[3] != []])
def test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd):
    T.test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd)


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float64_forward_matches_torch_without_gradients(op_name, inputs, args, wrt, fd):
    _, outs = T._ours(op_name, inputs, args, [])
    _, touts = T._theirs(op_name, inputs, args, [])
    assert len(outs) == len(touts)
    for o, t in zip(outs, touts):
        assert o.shape == tuple(t.shape) and o.dtype == np.dtype(str(t.dtype).removeprefix("torch."))
        np.testing.assert_allclose(o.data, t.numpy(), rtol=1e-12, atol=1e-14)


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd):
    T.test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd)


@pytest.mark.parametrize(PARAMS, CASES)
def test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd):
    T.test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd)


@pytest.mark.parametrize(PARAMS, CASES)
def test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch):
    T.test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch)


@pytest.mark.parametrize("op_name, inputs, args, match, static", REFUSED)
def test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static):
    T.test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static)


# -- the checks of tests/test_aten_gradgrad.py, on this table -------------------------------------
GG_CASES = [pytest.param(n, *GRADGRAD[n], id=n) for n in sorted(GRADGRAD)]


@pytest.mark.parametrize("op_name, arrays, args, wrt", GG_CASES)
def test_second_derivative_matches_finite_differences(op_name, arrays, args, wrt):
    GG.test_second_derivative_matches_finite_differences(op_name, arrays, args, wrt)


@needs_torch
@pytest.mark.parametrize("op_name, arrays, args, wrt", GG_CASES)
def test_second_derivative_matches_torch_double_backward(op_name, arrays, args, wrt):
    GG.test_second_derivative_matches_torch_double_backward(op_name, arrays, args, wrt)


@needs_torch
@pytest.mark.parametrize("op_name", sorted(GRADGRAD))
def test_create_graph_gradients_have_torchs_node_names(op_name, monkeypatch):
    monkeypatch.setattr(GG, "GRADGRAD", {**GG.GRADGRAD, **GRADGRAD})
    monkeypatch.setattr(GG, "NODE_NAME_DIFFERENCES", NODE_NAME_DIFFERENCES)
    GG.test_create_graph_gradients_have_torchs_node_names(op_name)


def table_ops():
    """The ops this table covers (the coverage checks of the other tables ask)."""
    return {c.values[0] for c in CASES}


def gradgrad_ops():
    """The ops with a second-derivative row here, or none because PyTorch has none."""
    return set(GRADGRAD) | NOT_DIFFERENTIABLE


def test_every_op_of_this_table_is_registered_with_torchs_schema():
    for name in table_ops():
        assert name in ATEN_OPS
        if torch is not None:
            assert ATEN_OPS[name].schema.text == str(T._torch_op(name)._schema).removeprefix("aten::")
