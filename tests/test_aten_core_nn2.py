"""Core ATen ops, the nn half continued: pair distances (``_pdist_forward``), grid sampling
(``grid_sampler_2d``), bags of embeddings (``_embedding_bag``) and the real FFTs
(``_fft_r2c``, ``_fft_c2r``). One table row per case, run through the checks of
``tests/test_aten_ops.py`` (forward, dtypes, gradients and node names against torch, gradients
against finite differences, the load-time shape rule) and ``tests/test_aten_gradgrad.py``
(second derivatives), whose machinery this file reuses.

Rows cover float64 and float32 (every row runs in both), empty inputs and non-contiguous
inputs (``nc``); none of these ops broadcasts.
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
NODE_NAME_DIFFERENCES = {}
# ops whose second derivative PyTorch does not implement: op -> PyTorch's backward op, whose
# create_graph node raises "the derivative for '<backward op>' is not implemented."
NO_SECOND_DERIVATIVE = {}
# rows whose gradient is not compared with torch's: row id -> why (checked against finite
# differences, and by a test of their own)
NO_TORCH_GRADIENT = {}
BACKWARD_OPS = set()       # PyTorch's backward ops, rows of their own (no gradient checked)


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


# -- pair distances ---------------------------------------------------------------------------------
PDIST = "aten._pdist_forward.default"
PDIST_BACKWARD = "aten._pdist_backward.default"
for _p in (2.0, 1.0, 3.0, 1.5, 0.5, float("inf")):
    case(PDIST, [R(5, 3)], {"p": _p})
case(PDIST, [R(4, 3)], {"p": 0.0}, fd=False)         # a count: its gradient is zero
case(PDIST, [R(4, 3)], {}, id=PDIST + "-default-p")
case(PDIST, [R(1, 3)], {"p": 2.0}, id=PDIST + "-one-row")
case(PDIST, [R(0, 3)], {"p": 2.0}, id=PDIST + "-empty")
NO_TORCH_GRADIENT[PDIST + "-empty"] = "torch 2.13's _pdist_backward crashes (segfault) on no rows"
case(PDIST, [R(3, 0)], {"p": 2.0}, fd=False, id=PDIST + "-no-columns")
# two equal rows: a zero distance, whose gradient is zero as PyTorch's kernel makes it
case(PDIST, [np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 3.0]])], {"p": 2.0}, fd=False, id=PDIST + "-equal-rows")
case(PDIST_BACKWARD, [R(6, seed=1), R(4, 3), np.abs(R(6, seed=2)) + 1], {"p": 2.0}, wrt=[])
BACKWARD_OPS.add(PDIST_BACKWARD)
NO_SECOND_DERIVATIVE[PDIST] = "_pdist_backward"
refused(PDIST, [np.ones((4, 3), np.int64)], {"p": 2.0}, "not implemented for int64")


def test_pdist_refuses_a_non_contiguous_input_like_torch():
    x = OPS["aten.transpose.int"](R(3, 4), dim0=0, dim1=1)
    with pytest.raises(ValueError, match="requires contiguous input"):
        OPS[PDIST](x, p=2.0)
    if torch is not None:
        with pytest.raises(RuntimeError, match="requires contiguous input"):
            torch.ops.aten._pdist_forward(torch.tensor(R(3, 4)).t(), 2.0)


def test_pdist_of_no_rows_has_a_zero_gradient():
    # (torch 2.13 crashes computing this gradient, so it is not compared with torch's)
    x = Tensor(R(0, 3), requires_grad=True)
    y = OPS[PDIST](x, p=2.0)
    assert y.shape == (0,) and y.grad_fn.name == "PdistBackward0"
    (g,) = grad([y], [x], grad_outputs=[np.zeros(0)])
    assert g.shape == (0, 3) and g.dtype == np.float64


@pytest.mark.parametrize("inputs, args, match", [
    ([R(3, 4, 5)], {"p": 2.0}, "only supports 2D tensors"),
    ([R(4, 3)], {"p": -1.0}, "non-negative p"),
])
def test_pdist_refuses_what_torch_pdist_refuses(inputs, args, match):
    # gradcli deliberately differs from aten._pdist_forward itself, which computes on a 3-D
    # input and a negative p without complaint: it refuses them as torch.pdist (the one
    # caller PyTorch records the op from) does, so a graph file cannot reach undefined sizes
    with pytest.raises(ValueError, match=match):
        OPS[PDIST](*inputs, **args)
    with pytest.raises(ValueError, match=match):
        T._inferred(PDIST, inputs, args)
    if torch is not None:
        with pytest.raises(RuntimeError, match=match):
            torch.pdist(torch.tensor(inputs[0]), **args)


@pytest.mark.parametrize("op_name", sorted(NO_SECOND_DERIVATIVE))
def test_create_graph_gradient_records_torchs_backward_node_that_cannot_be_differentiated(op_name):
    backward = NO_SECOND_DERIVATIVE[op_name]
    inputs, args = next((c.values[1], c.values[2]) for c in CASES if c.values[0] == op_name)
    wrt = T._wrt(inputs, None)
    flat, outs = T._ours(op_name, inputs, args, wrt)
    vs = T._upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    gs = grad([outs[k] for k in used], [flat[i] for i in wrt],
              grad_outputs=[Tensor(vs[k], requires_grad=True) for k in used], create_graph=True)
    plain = grad([outs[k] for k in used], [flat[i] for i in wrt], grad_outputs=[vs[k] for k in used])
    for g, p in zip(gs, plain):
        np.testing.assert_array_equal(g.data, p)
    names = [g.grad_fn.name for g in gs]
    if torch is not None:
        tflat, touts = T._theirs(op_name, inputs, args, wrt)
        tgs = torch.autograd.grad([touts[k] for k in used], [tflat[i] for i in wrt],
                                  [torch.tensor(vs[k], requires_grad=True) for k in used], create_graph=True)
        assert names == [g.grad_fn.name() for g in tgs]
        with pytest.raises(RuntimeError, match=f"the derivative for '{backward}' is not implemented"):
            torch.autograd.grad(tgs[0].sum(), tflat[wrt[0]])
    with pytest.raises(RuntimeError, match=f"the derivative for '{backward}' is not implemented"):
        grad([gs[0]], [flat[wrt[0]]], grad_outputs=[np.ones(gs[0].shape)])


# -- the checks of tests/test_aten_ops.py, on this table ----------------------------------------
PARAMS = T.PARAMS


@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[4] and c.values[3] != []])
def test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd):
    T.test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd)


@needs_torch
@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[3] != [] and c.id not in NO_TORCH_GRADIENT])
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
    """The ops with a second-derivative row here, or none because PyTorch has none (their
    backward ops' nodes raise PyTorch's error, tested above)."""
    return set(GRADGRAD) | set(NO_SECOND_DERIVATIVE) | BACKWARD_OPS


def test_every_op_of_this_table_is_registered_with_torchs_schema():
    for name in table_ops():
        assert name in ATEN_OPS
        if torch is not None:
            assert ATEN_OPS[name].schema.text == str(T._torch_op(name)._schema).removeprefix("aten::")
