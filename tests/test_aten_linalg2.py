"""``torch.linalg``'s solvers with a factored matrix (gradcli/ops/aten/linalg_solvers.py): one
table row per case, checked as tests/test_aten_linalg.py checks its ops (and with its
helpers): against PyTorch (schema, node names, forward values, dtypes and gradients at
float64 and float32), against finite differences (first and second derivatives, float64)
and for the load-time shape rule.

Rows are batched, some with batch dims that broadcast, an empty batch or a non-contiguous
first input (``nc``). The triangular matrices are full random ones with a large diagonal: the
solves read one triangle, and the other one must not matter.

``cholesky_solve`` and ``cholesky_inverse`` read one triangle of their factor and PyTorch's
gradient of it is the formula's, dense: finite differences see only the triangle read, so
the comparison with them is on that triangle (``_read``), of a factor whose other triangle is
zero (where it is not, PyTorch's gradient is the formula's at the dense matrix, and so is
gradcli's: the rows against torch have such factors).
"""
from __future__ import annotations

import numpy as np
import pytest

import test_aten_linalg as TL
from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from test_aten_linalg import R, spd
from test_aten_ops import needs_torch, torch

TRSOLVE, TRIANGULAR = "aten.linalg_solve_triangular.default", "aten.triangular_solve.default"
CSOLVE, CINV = "aten.cholesky_solve.default", "aten.cholesky_inverse.default"


def tri(*shape, seed=0):
    """A full random matrix whose triangles both solve well (a large diagonal)."""
    return R(*shape, seed=seed) * 0.5 + 3 * np.eye(shape[-1])


def chol(*shape, upper=False, seed=0):
    """A Cholesky factor with the other triangle random (it must be ignored)."""
    f = np.linalg.cholesky(spd(*shape, seed=seed))
    f = np.swapaxes(f, -1, -2) if upper else f
    junk = R(*shape, seed=seed + 7)
    return f + (np.tril(junk, -1) if upper else np.triu(junk, 1))


CASES, REFUSED, GRADGRAD = [], [], []


def case(op, inputs, args=None, nc=False, fd=True, gradgrad=False, id=None):  # noqa: A002
    n = sum(1 for c in CASES if c.values[0] == op)
    param = pytest.param(op, inputs, args or {}, nc, fd, id=id or f"{op}-{n}")
    CASES.append(param)
    if gradgrad:
        GRADGRAD.append(param)


def refused(op, inputs, args, match, static=True):
    n = sum(1 for c in REFUSED if c.values[0] == op)
    REFUSED.append(pytest.param(op, inputs, args, match, static, id=f"{op}-refused-{n}"))


for _upper in (False, True):
    for _left in (True, False):
        _b = R(3, 2, seed=1) if _left else R(2, 3, seed=1)
        case(TRSOLVE, [tri(3, 3), _b], {"upper": _upper, "left": _left}, gradgrad=True,
             id=f"{TRSOLVE}-upper={_upper}-left={_left}")
    case(TRSOLVE, [tri(2, 4, 4), R(2, 4, 3, seed=1)], {"upper": _upper, "unitriangular": True},
         gradgrad=not _upper, id=f"{TRSOLVE}-unit-{_upper}")
    for _t in (False, True):
        case(TRIANGULAR, [R(2, 3, 2, seed=1), tri(2, 3, 3)], {"upper": _upper, "transpose": _t},
             gradgrad=not _t, id=f"{TRIANGULAR}-upper={_upper}-transpose={_t}")
    case(CSOLVE, [R(3, 2, seed=1), chol(3, 3, upper=_upper)], {"upper": _upper}, gradgrad=True,
         id=f"{CSOLVE}-{_upper}")
    case(CINV, [chol(3, 3, upper=_upper)], {"upper": _upper}, gradgrad=True, id=f"{CINV}-{_upper}")
    case(CINV, [chol(2, 4, 4, upper=_upper, seed=1)], {"upper": _upper}, id=f"{CINV}-batch-{_upper}")
case(TRSOLVE, [tri(2, 1, 3, 3), R(4, 3, 2, seed=1)], {"upper": True}, id=TRSOLVE + "-broadcast")
case(TRSOLVE, [tri(2, 3, 3), R(2, 3, 2, seed=1)], {"upper": False}, nc=True, id=TRSOLVE + "-nc")
case(TRSOLVE, [R(0, 3, 3), R(0, 3, 2, seed=1)], {"upper": True}, fd=False, id=TRSOLVE + "-empty-batch")
case(TRSOLVE, [R(2, 0, 0), R(2, 0, 2, seed=1)], {"upper": True}, fd=False, id=TRSOLVE + "-empty-matrix")
case(TRIANGULAR, [R(3, 2, seed=1), tri(2, 3, 3)], {"unitriangular": True}, id=TRIANGULAR + "-unit-broadcast")
case(TRIANGULAR, [R(2, 3, 2, seed=1), tri(2, 3, 3)], {"upper": False}, nc=True, id=TRIANGULAR + "-nc")
case(TRIANGULAR, [R(0, 3, 2, seed=1), R(0, 3, 3)], fd=False, id=TRIANGULAR + "-empty-batch")
case(CSOLVE, [R(2, 1, 4, 3, seed=1), chol(3, 4, 4)], id=CSOLVE + "-broadcast")
case(CSOLVE, [R(2, 3, 2, seed=1), chol(2, 3, 3)], nc=True, id=CSOLVE + "-nc")
case(CSOLVE, [R(0, 3, 2, seed=1), R(0, 3, 3)], fd=False, id=CSOLVE + "-empty-batch")
case(CINV, [chol(2, 3, 3)], nc=True, id=CINV + "-nc")
case(CINV, [R(0, 3, 3)], fd=False, id=CINV + "-empty-batch")

_I64 = np.ones((3, 3), np.int64)
refused(TRSOLVE, [R(3, 3), R(3)], {"upper": True}, "B must have at least 2 dimensions")
refused(TRSOLVE, [R(3, 3), R(4, 2)], {"upper": True}, r"equation AX = B \(3x3 and 4x2\)")
refused(TRSOLVE, [R(3, 3), R(2, 4)], {"upper": True, "left": False}, r"equation XA = B \(3x3 and 2x4\)")
refused(TRSOLVE, [R(3, 4), R(3, 2)], {"upper": True}, "square matrices")
refused(TRSOLVE, [R(2, 3, 3), R(4, 3, 2)], {"upper": True}, "do not broadcast")
refused(TRSOLVE, [_I64, _I64], {"upper": True}, "floating point")
for _op in (TRIANGULAR, CSOLVE):
    refused(_op, [R(4, 2), R(3, 3)], {}, "each A matrix is 3 by 3 but each b matrix is 4 by 2")
    refused(_op, [R(3), R(3, 3)], {}, "at least 2 dimensions")
    refused(_op, [R(3, 2), R(3, 4)], {}, "square matrices")
refused(CINV, [R(3, 4)], {}, "square matrices")
refused(CINV, [R(3)], {}, "at least 2 dimensions")
refused(CINV, [_I64], {}, "floating point")

# the inputs read through one triangle whose gradient is dense: input index -> the triangle
_READ = {CSOLVE: 1, CINV: 0}


def _read(op_name, args, i, g):
    if _READ.get(op_name) != i:
        return g
    return np.triu(g) if args.get("upper", False) else np.tril(g)


PARAMS = "op_name, inputs, args, nc, fd"


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(PARAMS, CASES)
def test_forward_gradients_and_node_names_match_torch(op_name, inputs, args, nc, fd, dtype):
    TL.test_forward_gradients_and_node_names_match_torch(op_name, inputs, args, nc, fd, dtype)


@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[4]])
def test_gradients_match_finite_differences(op_name, inputs, args, nc, fd):
    # (a factor read through one triangle: PyTorch's gradient is the formula's at the dense matrix,
    # which is the function's where the other triangle is zero)
    inputs = [_read(op_name, args, i, x) for i, x in enumerate(inputs)]
    leaves, outs = TL._ours(op_name, inputs, args, nc)
    vs = TL._upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    got = grad([outs[k] for k in used], leaves, grad_outputs=[vs[k] for k in used])
    ref = [o.data for o in outs]
    for i, g in enumerate(got):
        assert g.shape == leaves[i].shape
        np.testing.assert_allclose(_read(op_name, args, i, g),
                                   _read(op_name, args, i, TL._numeric(op_name, inputs, args, vs, i, ref)),
                                   rtol=1e-5, atol=1e-6, err_msg=f"input {i}")


@pytest.mark.parametrize(PARAMS, CASES)
def test_load_time_infer_matches_the_forward(op_name, inputs, args, nc, fd, monkeypatch):
    TL.test_load_time_infer_matches_the_forward(op_name, inputs, args, nc, fd, monkeypatch)


@pytest.mark.parametrize("op_name, inputs, args, match, static", REFUSED)
def test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static):
    TL.test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static)


@pytest.mark.parametrize(PARAMS, [c for c in GRADGRAD if c.values[0] not in _READ])
def test_second_derivative_matches_finite_differences(op_name, inputs, args, nc, fd):
    # (the factor read through one triangle: its dense second derivative is checked against torch below)
    TL.test_second_derivative_matches_finite_differences(op_name, inputs, args, nc, fd)


@needs_torch
@pytest.mark.parametrize(PARAMS, GRADGRAD)
def test_second_derivative_matches_torch_double_backward(op_name, inputs, args, nc, fd):
    TL.test_second_derivative_matches_torch_double_backward(op_name, inputs, args, nc, fd)


def test_mixed_dtypes_are_refused_where_pytorch_promotes():
    # docs/deviations.md: PyTorch's linalg_solve_triangular promotes float32 B to A's float64
    with pytest.raises(TypeError, match="same dtype"):
        OPS[TRSOLVE](R(3, 3), R(3, 2).astype(np.float32), upper=True)


def test_a_zero_on_the_diagonal_gives_infinities_not_an_error():
    a = np.array([[1.0, 0.0], [2.0, 0.0]])
    x = np.asarray(OPS[TRSOLVE](a, np.ones((2, 1)), upper=False))
    assert np.isfinite(x[0]).all() and not np.isfinite(x[1]).all()


@needs_torch
def test_the_cloned_coefficient_alone_gets_its_gradient():
    # triangular_solve's second output is A broadcast to the batch: its gradient is summed back
    a = Tensor(tri(3, 3), requires_grad=True)
    b = Tensor(R(2, 3, 2, seed=1), requires_grad=True)
    _, m = OPS[TRIANGULAR](b, a)
    (ga,) = grad([m], [a], grad_outputs=[np.ones((2, 3, 3))])
    np.testing.assert_allclose(ga, 2 * np.ones((3, 3)))


def table_ops():
    """The ops this table covers (the coverage checks of the other tables ask)."""
    return {c.values[0] for c in CASES}


def gradgrad_ops():
    return {c.values[0] for c in GRADGRAD}


def test_every_op_of_this_table_is_registered_with_torchs_schema():
    import test_aten_ops as T
    from gradcli.ops.aten import ATEN_OPS

    for name in table_ops():
        assert name in ATEN_OPS
        if torch is not None:
            T.test_schema_is_torch_schema(name)
