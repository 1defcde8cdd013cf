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

import functools

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


case = functools.partial(TL.case, cases=CASES, gradgrads=GRADGRAD)     # this module's tables
refused = functools.partial(TL.refused, table=REFUSED)


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




def test_every_op_of_this_table_is_registered_with_torchs_schema():
    import test_aten_ops as T
    from gradcli.ops.aten import ATEN_OPS

    for name in table_ops():
        assert name in ATEN_OPS
        if torch is not None:
            T.test_schema_is_torch_schema(name)


# -- LU (gradcli/ops/aten/linalg_lu.py): rows whose inputs may hold int32 pivots --------------------
LUF, LU, UNPACK, LUSOLVE = ("aten.linalg_lu_factor_ex.default", "aten.linalg_lu.default", "aten.lu_unpack.default",
                            "aten.linalg_lu_solve.default")


def _factored(*shape, seed=0):
    """A factor and its pivots (gradcli's lu_factor of a random matrix)."""
    from gradcli.ops.aten_kernels.linalg import lu_factor

    lu, piv, _ = lu_factor(R(*shape, seed=seed))
    return np.array(lu), np.array(piv)


LU_CASES, LU_GRADGRAD = [], []


def lu_case(op, inputs, args=None, nc=False, fd=True, gradgrad=False, id=None):  # noqa: A002
    n = sum(1 for c in LU_CASES if c.values[0] == op)
    param = pytest.param(op, inputs, args or {}, nc, fd, id=id or f"{op}-{n}")
    LU_CASES.append(param)
    if gradgrad:
        LU_GRADGRAD.append(param)


for _shape in ((3, 3), (4, 3), (3, 5), (2, 4, 4), (2, 5, 3), (2, 3, 4)):
    lu_case(LUF, [R(*_shape)], gradgrad=len(_shape) == 2, id=f"{LUF}-{_shape}")
    lu_case(LU, [R(*_shape, seed=1)], gradgrad=len(_shape) == 2, id=f"{LU}-{_shape}")
    lu_case(UNPACK, list(_factored(*_shape, seed=2)), id=f"{UNPACK}-{_shape}")     # (linear: no second)
for _op in (LUF, LU):
    lu_case(_op, [R(2, 4, 3)], nc=True, id=f"{_op}-nc")
    lu_case(_op, [R(0, 3, 3)], fd=False, id=f"{_op}-empty-batch")
    lu_case(_op, [R(2, 0, 0)], fd=False, id=f"{_op}-empty-matrix")
lu_case(UNPACK, list(_factored(2, 3, 3)), {"unpack_pivots": False}, id=UNPACK + "-no-pivots")
lu_case(UNPACK, list(_factored(2, 3, 3)), {"unpack_data": False}, fd=False, id=UNPACK + "-no-data")
lu_case(UNPACK, list(_factored(2, 4, 3)), nc=True, id=UNPACK + "-nc")
lu_case(UNPACK, list(_factored(0, 3, 3)), fd=False, id=UNPACK + "-empty-batch")
for _left in (True, False):
    for _adj in (False, True):
        _b = R(3, 2, seed=4) if _left else R(2, 3, seed=4)
        lu_case(LUSOLVE, [*_factored(3, 3), _b], {"left": _left, "adjoint": _adj}, gradgrad=True,
                id=f"{LUSOLVE}-left={_left}-adjoint={_adj}")
lu_case(LUSOLVE, [*_factored(2, 1, 3, 3), R(4, 3, 2, seed=4)], id=LUSOLVE + "-broadcast")
lu_case(LUSOLVE, [*_factored(2, 3, 3), R(2, 3, 2, seed=4)], nc=True, id=LUSOLVE + "-nc")
lu_case(LUSOLVE, [*_factored(0, 3, 3), R(0, 3, 2, seed=4)], fd=False, id=LUSOLVE + "-empty-batch")

_LU3, _PIV3 = _factored(3, 3)
refused(LUF, [R(3)], {}, "2 or more dimensions")
refused(LUF, [R(3, 3)], {"pivot": False}, "without pivoting")
refused(LUF, [_I64], {}, "floating point")
refused(LUF, [np.zeros((2, 2, 2))], {"check_errors": True}, r"\(Batch element 0\): U\[1,1\] is zero", False)
refused(LU, [R(3)], {}, "2 or more dimensions")
refused(LU, [R(2, 3, 5)], {"pivot": False}, "without pivoting")
# (PyTorch's CPU kernel does not check the pivots' length: it checks their values, reading
# past the end of a short tensor, so whether it refuses [3, 2] depends on the memory after
# it; a pivot out of range among those given makes its refusal certain. gradcli refuses the
# length, as PyTorch's shape rule does.)
refused(UNPACK, [_LU3, np.array([0, 2], np.int32)], {}, r"Expected LU_pivots to have shape \[3\] but got \[2\]")
refused(UNPACK, [R(3), _PIV3], {}, "2 or more dimensions")
refused(UNPACK, [_LU3, _PIV3.astype(np.int64)], {}, "torch.int32")
refused(LUSOLVE, [_LU3, _PIV3, R(4, 2)], {}, r"equation AX = B \(3x3 and 4x2\)")
refused(LUSOLVE, [_LU3, _PIV3, R(3)], {}, "B must have at least 2 dimensions")
refused(LUSOLVE, [_LU3, _PIV3, R(2, 4)], {"left": False}, r"equation XA = B \(3x3 and 2x4\)")
refused(LUSOLVE, [R(3, 4), _PIV3, R(3, 2)], {}, "square matrices")
refused(LUSOLVE, [_LU3, _PIV3[:2], R(3, 2)], {}, "Number of pivots")
refused(LUSOLVE, [_LU3, _PIV3.astype(np.int64), R(3, 2)], {}, "torch.int32")

# -- pinv and matrix_exp (gradcli/ops/aten/linalg_functions.py), run as the LU rows ------------------
PINV, MEXP = "aten.linalg_pinv.atol_rtol_tensor", "aten.linalg_matrix_exp.default"
for _shape in ((3, 4), (4, 3), (3, 3), (2, 3, 5), (2, 5, 3)):
    lu_case(PINV, [R(*_shape), None, None], gradgrad=len(_shape) == 2 and _shape != (3, 3), id=f"{PINV}-{_shape}")
# (a tolerance that drops a singular value: PyTorch's gradient is pinv_backward's formula at the
# truncated result, not the truncated function's derivative, and gradcli's is PyTorch's: fd=False)
lu_case(PINV, [np.diag([3.0, 2.0, 1e-3]) @ R(3, 4), np.array(0.01), None], fd=False, id=PINV + "-atol-drops-one")
lu_case(PINV, [np.diag([3.0, 2.0, 0.5]) @ R(3, 4), None, np.array([0.3])], fd=False, id=PINV + "-rtol-drops-one")
lu_case(PINV, [R(2, 4, 3), None, None], nc=True, id=PINV + "-nc")
lu_case(PINV, [R(3, 4), np.array([0.0, 0.5]), None], fd=False, id=PINV + "-atol-batch")
lu_case(PINV, [R(0, 4, 3), None, None], fd=False, id=PINV + "-empty-batch")
lu_case(PINV, [TL.sym(2, 3, 3), None, None], {"hermitian": True}, fd=False, id=PINV + "-hermitian")
lu_case(MEXP, [R(3, 3)], gradgrad=True, id=MEXP + "-3x3")
lu_case(MEXP, [R(2, 4, 4, seed=1)], id=MEXP + "-batch")
lu_case(MEXP, [R(2, 3, 3, seed=2) * 4], id=MEXP + "-squarings")
lu_case(MEXP, [R(2, 3, 3, seed=3)], nc=True, id=MEXP + "-nc")
lu_case(MEXP, [R(0, 3, 3)], fd=False, id=MEXP + "-empty-batch")
lu_case(MEXP, [R(1, 1, seed=4)], id=MEXP + "-1x1")
LSTSQ = "aten.linalg_lstsq.default"
lu_case(LSTSQ, [R(5, 3), R(5, 2, seed=1)], gradgrad=True, id=LSTSQ + "-tall")
lu_case(LSTSQ, [R(3, 5), R(3, 2, seed=1)], gradgrad=True, id=LSTSQ + "-wide")
lu_case(LSTSQ, [R(2, 5, 3), R(2, 5, 2, seed=1)], {"driver": "gelsd"}, gradgrad=True, id=LSTSQ + "-gelsd-residuals")
lu_case(LSTSQ, [R(5, 3), R(5, seed=1)], {"driver": "gelss"}, id=LSTSQ + "-gelss-vector")
lu_case(LSTSQ, [R(2, 5, 3), R(2, 5, seed=1)], {"driver": "gels"}, id=LSTSQ + "-gels-batch-of-vectors")
lu_case(LSTSQ, [R(2, 1, 5, 3), R(1, 4, 5, 2, seed=1)], {"driver": "gelsd"}, id=LSTSQ + "-broadcast")
lu_case(LSTSQ, [R(2, 5, 3), R(2, 5, 2, seed=1)], nc=True, id=LSTSQ + "-nc")
lu_case(LSTSQ, [R(0, 5, 3), R(0, 5, 2, seed=1)], fd=False, id=LSTSQ + "-empty-batch")
refused(LSTSQ, [R(5, 3), R(4, 2)], {}, r"input.size\(-2\) should match other.size\(-2\)")
refused(LSTSQ, [R(5, 3), R(5, 2)], {"driver": "gesv"}, "should be one of")
refused(LSTSQ, [R(3), R(3)], {}, "at least 2 dimensions")
refused(LSTSQ, [R(2, 5, 3), R(5, 2)], {}, "as many dimensions")
refused(PINV, [R(3), None, None], {}, "2 or more dimensions")
refused(PINV, [_I64, None, None], {}, "2 or more dimensions of float")
refused(MEXP, [R(3, 4)], {}, "square matrices")
refused(MEXP, [R(3)], {}, "at least 2 dimensions")


def _is_float(x):
    return x is not None and np.issubdtype(np.asarray(x).dtype, np.floating)


_NONDIFF = {"aten.linalg_pinv.atol_rtol_tensor": (1, 2)}     # pinv's atol and rtol


def _diff_inputs(op_name, inputs):
    return [i for i, x in enumerate(inputs) if _is_float(x) and i not in _NONDIFF.get(op_name, ())]


def _lu_leaves(op_name, inputs, nc, dtype, lib):
    out = []
    for k, x in enumerate(inputs):
        if x is None:                 # an optional tensor left out
            out.append(None)
            continue
        fl = k in _diff_inputs(op_name, inputs)
        v = np.array(x, dtype=dtype) if fl else np.array(x)
        out.append(Tensor(v, requires_grad=fl) if lib is None else torch.tensor(v, requires_grad=fl))
    called = list(out)
    if nc:
        called[0] = TL._nc_ours(called[0]) if lib is None else called[0].mT.contiguous().mT
    return [t for t in out if t is not None and t.requires_grad], called


def _lu_run(op_name, inputs, args, nc, dtype=np.float64, lib=None):
    leaves, called = _lu_leaves(op_name, inputs, nc, dtype, lib)
    if lib is None:
        return leaves, TL._outputs(OPS[op_name](*called, **args))
    import test_aten_ops as T

    return leaves, TL._outputs(T._torch_call(op_name, *called, **args))


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(PARAMS, LU_CASES)
def test_lu_forward_gradients_and_node_names_match_torch(op_name, inputs, args, nc, fd, dtype):
    leaves, outs = _lu_run(op_name, inputs, args, nc, dtype)
    tleaves, touts = _lu_run(op_name, inputs, args, nc, dtype, torch)
    rtol, atol = (1e-10, 1e-12) if dtype == np.float64 else (2e-4, 2e-5)
    assert len(outs) == len(touts)
    for k, (o, t) in enumerate(zip(outs, touts)):
        assert o.shape == tuple(t.shape) and o.dtype == np.dtype(str(t.dtype).removeprefix("torch."))
        np.testing.assert_allclose(o.data, t.detach().numpy(), rtol=rtol, atol=atol, err_msg=f"output {k}")
        assert (o.grad_fn is None) == (t.grad_fn is None)
        if t.grad_fn is not None:
            # docs/deviations.md: gradcli numbers a node's outputs by position, PyTorch counts only
            # the differentiable ones (linalg_lu's and lu_unpack's P is not)
            before = sum(1 for u in touts[:k] if u.grad_fn is not None)
            assert o.grad_fn.name == t.grad_fn.name() and o.output_nr - (k - before) == t.output_nr
    vs = TL._upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    if not used or args.get("unpack_data") is False:
        return
    ours = grad([outs[k] for k in used], leaves, grad_outputs=[vs[k] for k in used])
    theirs = torch.autograd.grad([touts[k] for k in used], tleaves, [torch.tensor(vs[k]) for k in used])
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b.numpy(), rtol=rtol * 10, atol=atol * 10, err_msg=f"input {i}")


def _lu_objective(op_name, inputs, args, vs, ws=None):
    """sum_k <v_k, f_k(x)> (or, with ``ws``, <w, its gradient>) at float64 ``inputs``."""
    leaves, outs = _lu_run(op_name, inputs, args, False)
    if ws is None:
        return sum(float(np.sum(v * o.data)) for v, o in zip(vs, outs) if v is not None)
    used = [k for k, v in enumerate(vs) if v is not None]
    gs = grad([outs[k] for k in used], leaves, grad_outputs=[vs[k] for k in used])
    return sum(float(np.sum(w * g)) for w, g in zip(ws, gs))


def _fd(fn, inputs, i, eps=1e-6):
    xs = [None if x is None else np.array(x) for x in inputs]
    num = np.zeros(xs[i].shape)
    for idx in np.ndindex(num.shape):
        orig = xs[i][idx]
        xs[i][idx] = orig + eps
        plus = fn(xs)
        xs[i][idx] = orig - eps
        minus = fn(xs)
        xs[i][idx] = orig
        num[idx] = (plus - minus) / (2 * eps)
    return num


@pytest.mark.parametrize(PARAMS, [c for c in LU_CASES if c.values[4]])
def test_lu_gradients_match_finite_differences(op_name, inputs, args, nc, fd):
    leaves, outs = _lu_run(op_name, inputs, args, nc)
    vs = TL._upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    got = grad([outs[k] for k in used], leaves, grad_outputs=[vs[k] for k in used])
    floats = _diff_inputs(op_name, inputs)
    for g, i in zip(got, floats):
        num = _fd(lambda xs: _lu_objective(op_name, xs, args, vs), inputs, i)
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6, err_msg=f"input {i}")


@pytest.mark.parametrize(PARAMS, LU_GRADGRAD)
def test_lu_second_derivative_matches_finite_differences_and_torch(op_name, inputs, args, nc, fd):
    _, outs = _lu_run(op_name, inputs, args, False)
    vs = TL._upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    floats = _diff_inputs(op_name, inputs)
    ws = TL._ws([inputs[i] for i in floats])

    def second(lib):
        leaves, outs = _lu_run(op_name, inputs, args, False, lib=lib)
        if lib is None:
            gs = grad([outs[k] for k in used], leaves, grad_outputs=[vs[k] for k in used], create_graph=True)
            return [np.asarray(g) for g in grad(list(gs), leaves, grad_outputs=ws)]
        gs = torch.autograd.grad([outs[k] for k in used], leaves, [torch.tensor(vs[k]) for k in used],
                                 create_graph=True)
        return [g.detach().numpy() for g in torch.autograd.grad(list(gs), leaves, [torch.tensor(w) for w in ws])]

    got = second(None)
    for g, i in zip(got, floats):
        num = _fd(lambda xs: _lu_objective(op_name, xs, args, vs, ws), inputs, i)
        np.testing.assert_allclose(g, num, rtol=1e-4, atol=1e-6, err_msg=f"input {i}")
    if torch is not None:
        for a, b in zip(got, second(torch)):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(PARAMS, LU_CASES)
def test_lu_load_time_infer_matches_the_forward(op_name, inputs, args, nc, fd, monkeypatch):
    TL.test_load_time_infer_matches_the_forward(op_name, inputs, args, nc, fd, monkeypatch)


@needs_torch
@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (2, 3, 5)])
def test_lu_unpack_gradient_differentiates_with_respect_to_the_upstream_gradients(shape):
    lu, piv = _factored(*shape, seed=3)
    _, outs = _lu_run(UNPACK, [lu, piv], {}, False)
    vs = TL._upstream(outs)
    ws = TL._ws([lu])

    def second(lib):
        leaves, outs = _lu_run(UNPACK, [lu, piv], {}, False, lib=lib)
        if lib is None:
            vts = [Tensor(vs[k].copy(), requires_grad=True) for k in (1, 2)]
            (g,) = grad([outs[1], outs[2]], leaves, grad_outputs=vts, create_graph=True)
            return [np.asarray(h) for h in grad([g], vts, grad_outputs=ws)]
        vts = [torch.tensor(vs[k], requires_grad=True) for k in (1, 2)]
        (g,) = torch.autograd.grad([outs[1], outs[2]], leaves, vts, create_graph=True)
        return [h.numpy() for h in torch.autograd.grad([g], vts, [torch.tensor(w) for w in ws])]

    for a, b in zip(second(None), second(torch)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_lu_unpack_without_data_refuses_a_backward():
    t = Tensor(_LU3.copy(), requires_grad=True)
    _, lo, _ = OPS[UNPACK](t, _PIV3, unpack_data=False)
    with pytest.raises(RuntimeError, match="unpack_data=False"):
        grad([lo], [t], grad_outputs=[np.ones(lo.shape)])


def test_lu_of_a_singular_matrix_gives_info_not_an_error():
    lu, piv, info = OPS[LUF](np.stack([np.zeros((2, 2)), np.eye(2)]))
    assert np.asarray(info).tolist() == [1, 0] and np.asarray(info).dtype == np.int32


def table_ops():
    """The ops this table covers (the coverage checks of the other tables ask)."""
    return {c.values[0] for c in CASES + LU_CASES}


def gradgrad_ops():
    # (lu_unpack: its gradient is linear in the upstream one and free of LU_data, whose second
    # derivative is therefore checked with respect to the upstream gradients)
    return {c.values[0] for c in GRADGRAD + LU_GRADGRAD} | {UNPACK}


@needs_torch
@pytest.mark.parametrize("op_name, a", [("aten.linalg_cholesky_ex.default", spd(3, 3)),
                                        ("aten.linalg_qr.default", R(4, 3)), ("aten.linalg_qr.default", R(3, 4))],
                         ids=["cholesky", "qr-tall", "qr-wide"])
def test_cholesky_and_qr_gradients_record_pytorchs_triangular_solve(op_name, a):
    # their formulas end in linalg_solve_triangular (a wide QR's in a concat after it): a
    # create_graph gradient's node is PyTorch's
    import test_aten_ops as T

    t = Tensor(a.copy(), requires_grad=True)
    out = OPS[op_name](t)[0]
    (g,) = grad([out], [t], grad_outputs=[np.ones(out.shape)], create_graph=True)
    tt = torch.tensor(a, requires_grad=True)
    tout = T._torch_call(op_name, tt)[0]
    (tg,) = torch.autograd.grad(tout, tt, torch.ones(tout.shape, dtype=torch.float64), create_graph=True)
    assert g.grad_fn.name == tg.grad_fn.name()
    assert g.grad_fn.name == ("CatBackward0" if a.shape[-2] < a.shape[-1] else "LinalgSolveTriangularBackward0")
