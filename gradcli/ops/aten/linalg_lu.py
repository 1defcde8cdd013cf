"""``torch.linalg``'s LU ops, kernels of their own (none is in the core opset, and PyTorch has
no decomposition of them): ``linalg_lu_factor_ex`` (``torch.linalg.lu_factor``,
``lu_factor_ex``, ``torch.lu``), ``linalg_lu`` (``torch.linalg.lu``), ``lu_unpack`` and
``linalg_lu_solve``. Every leading dim is a batch. The factorization is partial pivoting
as LAPACK's ``getrf`` (Note [LU as LAPACK's getrf], in ``gradcli.ops.aten_kernels.linalg``),
of rectangular matrices too (``pivots`` has ``min(m, n)`` entries); a singular matrix gives
``info``, never an error, unless ``check_errors``. ``pivot=False`` is refused as PyTorch's
CPU kernels refuse it.

The VJPs are derivatives.yaml's formulas (``lu_factor_ex_backward``, ``linalg_lu_backward``,
``lu_unpack_backward``, ``linalg_lu_solve_LU``), written with the ops themselves
(``linalg_solve_triangular``, ``lu_unpack``, ``linalg_lu_solve``) so that a create_graph
gradient records and differentiates again.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> P, L, U = OPS["aten.linalg_lu.default"](np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> np.asarray(U).tolist()
    [[3.0, 4.0], [0.0, 0.6666666666666667]]
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import linalg as K
from ..aten_kernels._common import array_module
from ..library import _value
from .linalg import _INT, _NAMES, _check_float, _mH, _mm, _tril, _triu, _undefined, _zeros_like
from .linalg_solvers import _batch, _check_rhs, linalg_solve_triangular
from .registry import aten, defvjp, defvjp_joint


# -- shape rules --------------------------------------------------------------------------------
def _at_least_2d(api, a):
    if len(a.shape) < 2:
        raise ValueError(f"{api}: Expected tensor with 2 or more dimensions. Got size: {list(a.shape)} instead")


def _no_pivot(pivot):
    if not pivot:
        raise ValueError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")


def _int32_pivots(message, pivots):
    if np.dtype(pivots.dtype) != _INT:
        raise TypeError(f"{message} (got {_NAMES.get(np.dtype(pivots.dtype), np.dtype(pivots.dtype).name)})")


def _lu_factor_meta(A, *, pivot=True, check_errors=False):
    _check_float("linalg.lu_factor", A)
    _at_least_2d("torch.lu_factor", A)
    _no_pivot(pivot)
    s = tuple(A.shape)
    return [(s, np.dtype(A.dtype)), (s[:-2] + (min(s[-2:]),), _INT), (s[:-2], _INT)]


def _lu_meta(A, *, pivot=True):
    _check_float("linalg.lu", A)
    _at_least_2d("linalg.lu", A)
    _no_pivot(pivot)
    s = tuple(A.shape)
    m, n = s[-2:]
    k = min(m, n)
    dt = np.dtype(A.dtype)
    return [(s[:-2] + (m, m), dt), (s[:-2] + (m, k), dt), (s[:-2] + (k, n), dt)]


def _lu_unpack_meta(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):  # noqa: N803 - PyTorch's names
    _at_least_2d("torch.lu_unpack", LU_data)
    _check_float("torch.lu_unpack", LU_data)
    _int32_pivots("torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype.",
                  LU_pivots)
    s = tuple(LU_data.shape)
    m, n = s[-2:]
    k = min(m, n)
    if tuple(LU_pivots.shape) != s[:-2] + (k,):
        raise ValueError(f"Expected LU_pivots to have shape {list(s[:-2] + (k,))} but got "
                         f"{list(LU_pivots.shape)} instead.")
    dt = np.dtype(LU_data.dtype)
    P = (s[:-2] + (m, m), dt) if unpack_pivots else ((0,), dt)
    if not unpack_data:
        return [P, ((0,), dt), ((0,), dt)]
    return [P, (s[:-2] + (m, k), dt), (s[:-2] + (k, n), dt)]


def _lu_solve_meta(LU, pivots, B, *, left=True, adjoint=False):  # noqa: N803
    api = "linalg.lu_solve"
    _check_float(api, LU)
    _at_least_2d(api, LU)
    s = tuple(LU.shape)
    if s[-1] != s[-2]:
        raise ValueError(f"torch.linalg.lu_solve: A must be batches of square matrices, but they are {s[-2]} by "
                         f"{s[-1]} matrices")
    _check_float(api, B)
    if np.dtype(B.dtype) != np.dtype(LU.dtype):
        raise TypeError(f"{api}: Expected LU and B to have the same dtype, but found LU of type "
                        f"{_NAMES[np.dtype(LU.dtype)]} and B of type {_NAMES[np.dtype(B.dtype)]} instead")
    b = _check_rhs(api, s, B, left)
    _int32_pivots(f"{api}: pivots should be a Tensor of scalar type torch.int32", pivots)
    if tuple(pivots.shape[-1:]) != s[-1:]:
        raise ValueError(f"{api}: Number of pivots per batch should be same as the dimension of the matrix")
    if tuple(pivots.shape[:-1]) != s[:-2]:
        raise ValueError(f"{api}: Expected LU.shape[:-2] == pivots.shape[:-1], but got {list(s[:-2])} and "
                         f"{list(pivots.shape[:-1])}")
    return [(_batch(api, s[:-2], b[:-2]) + b[-2:], np.dtype(LU.dtype))]


# -- forwards -----------------------------------------------------------------------------------
def _unpack(lu, piv, unpack_data=True, unpack_pivots=True):
    """(P, L, U) of a factor, as ``lu_unpack`` (row-major, as PyTorch's)."""
    xp = array_module(lu)
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    dt = lu.dtype
    P = xp.ascontiguousarray(K.lu_permutation(piv, m, dt)) if unpack_pivots else xp.zeros((0,), dt)
    if not unpack_data:
        return [P, xp.zeros((0,), dt), xp.zeros((0,), dt)]
    lo = xp.tril(lu[..., :, :k], -1) + xp.eye(m, k, dtype=dt)
    up = xp.triu(lu[..., :k, :])
    return [P, xp.ascontiguousarray(lo), xp.ascontiguousarray(up)]


@aten("linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> "
      "(Tensor LU, Tensor pivots, Tensor info)", "LinalgLuFactorExBackward0",
      differentiable_outputs=[True, False, False], meta=_lu_factor_meta)
def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    _lu_factor_meta(A, pivot=pivot)
    lu, piv, info = K.lu_factor(A)
    if check_errors:
        flat = np.asarray(info).reshape(-1)
        bad = np.flatnonzero(flat)
        if bad.size:
            where = f"(Batch element {int(bad[0])}): " if np.ndim(info) else ""
            v = int(flat[bad[0]])
            raise ValueError(f"torch.linalg.lu_factor_ex: {where}U[{v},{v}] is zero and using it on lu_solve would "
                             "result in a division by zero. If you still want to perform the factorization, consider "
                             "calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)")
    return [lu, piv, info]


@aten("linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)", "LinalgLuBackward0",
      differentiable_outputs=[False, True, True], meta=_lu_meta)
def linalg_lu(A, *, pivot=True):
    _lu_meta(A, pivot=pivot)
    lu, piv, _ = K.lu_factor(A)
    return _unpack(lu, piv)


@aten("lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> "
      "(Tensor P, Tensor L, Tensor U)", "LuUnpackBackward0", differentiable_outputs=[False, True, True],
      meta=_lu_unpack_meta)
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):  # noqa: N803
    _lu_unpack_meta(LU_data, LU_pivots, unpack_data, unpack_pivots)
    return _unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


@aten("linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor",
      "LinalgLuSolveBackward0", meta=_lu_solve_meta)
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):  # noqa: N803
    _lu_solve_meta(LU, pivots, B, left=left, adjoint=adjoint)
    x = K.lu_solve(LU, pivots, B, adjoint=adjoint, left=left)
    return K.batch_f_contig(x) if left else array_module(x).ascontiguousarray(x)


# -- VJPs ------------------------------------------------------------------------------------------
def _slice(x, dim, start, end):
    from .shape import slice_  # noqa: PLC0415

    return slice_(x, dim=dim, start=start, end=end)


def _zeros(shape, like):
    v = _value(like)
    return array_module(v).zeros(shape, v.dtype)


def _st(A, B, upper, left=True, unitriangular=False):
    return linalg_solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular)


def _lu_backward(gL, gU, P, Lo, U):
    """``linalg_lu_backward(L_grad, U_grad, P, L, U, pivot=True)``; None when neither is defined."""
    has_l, has_u = not _undefined(gL), not _undefined(gU)
    if not has_l and not has_u:
        return None
    m, n = _value(Lo).shape[-2], _value(U).shape[-1]
    k = min(m, n)
    batch = _value(Lo).shape[:-2]
    if m == n:
        # P L^{-H} [L^H gL o 1_L + gU U^H o 1_U] U^{-H}
        gA = _tril(_mm(_mH(Lo), gL), -1) if has_l else None
        if has_u:
            t = _triu(_mm(gU, _mH(U)))
            gA = t if gA is None else L.add(gA, t)
        gA = _st(_mH(U), gA, upper=False, left=False)
        return _mm(P, _st(_mH(Lo), gA, upper=True, unitriangular=True))
    if m < n:
        # A1 = P L^{-H} [gU1 o 1_U + (L^H gL o 1_L - gU U^H o 1_U) U1^{-H}], A2 = P L^{-H} gU2
        gA = _mm(_mH(Lo), gL) if has_l else None
        if has_u:
            t = _mm(_triu(gU), _mH(U))
            gA = L.neg(t) if gA is None else L.sub(gA, t)
        gA = _st(_mH(_slice(U, -1, 0, k)), _tril(gA, -1), upper=False, left=False)
        if has_u:
            gA = L.concat(L.add(gA, _triu(_slice(gU, -1, 0, k))), _slice(gU, -1, k, n), axis=-1)
        gA = _st(_mH(Lo), gA, upper=True, unitriangular=True)
        if not has_u:
            gA = L.concat(gA, _zeros(batch + (m, n - k), gA), axis=-1)
        return _mm(P, gA)
    # tall: A1 = P [gL1 o 1_L + L1^{-H} (gU U^H o 1_U - L^H gL o 1_L)] U^{-H}, A2 = P gL2 U^{-H}
    gA = _mm(gU, _mH(U)) if has_u else None
    if has_l:
        t = _mm(_mH(Lo), _tril(gL, -1))
        gA = L.neg(t) if gA is None else L.sub(gA, t)
    gA = _st(_mH(_slice(Lo, -2, 0, k)), _triu(gA), upper=True, unitriangular=True)
    if has_l:
        gA = L.concat(L.add(gA, _tril(_slice(gL, -2, 0, k), -1)), _slice(gL, -2, k, m), axis=-2)
    gA = _st(_mH(U), gA, upper=False, left=False)
    if not has_l:
        gA = L.concat(gA, _zeros(batch + (m - k, n), gA), axis=-2)
    return _mm(P, gA)


def _lu_factor_vjp(g, ans, A, pivot=True, check_errors=False):
    # A: lu_factor_ex_backward(grad, LU, pivots, pivot)
    gLU, LU, piv = g[0], ans[0], ans[1]
    if _value(A).size == 0:
        return _zeros_like(_value(A))
    if _undefined(gLU):
        return None
    P, Lo, U = lu_unpack(LU, piv)
    m, n = _value(LU).shape[-2:]
    k = min(m, n)
    return _lu_backward(_slice(gLU, -1, 0, k), _slice(gLU, -2, 0, k), P, Lo, U)


defvjp(linalg_lu_factor_ex, _lu_factor_vjp)


def _lu_vjp(g, ans, A, pivot=True):
    # A: linalg_lu_backward(grad_L, grad_U, P, L, U, pivot)
    if _value(A).size == 0:
        return _zeros_like(_value(A))
    return _lu_backward(g[1], g[2], *ans)


defvjp(linalg_lu, _lu_vjp)


def _lu_unpack_vjp(g, ans, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):  # noqa: N803
    # LU_data: lu_unpack_backward(grad_L, grad_U, LU_data.size(-2), LU_data.size(-1))
    gL, gU = g[1], g[2]
    v = _value(LU_data)
    if not unpack_data:
        raise RuntimeError("lu_unpack: the backward needs L and U, which unpack_data=False did not compute "
                           "(PyTorch's fails: triu: input tensor must have at least 2 dimensions)")
    if v.size == 0:
        return _zeros_like(v)
    has_l, has_u = not _undefined(gL), not _undefined(gU)
    if not has_l and not has_u:
        return None
    m, n = v.shape[-2:]
    batch = v.shape[:-2]
    out = None
    if has_l:
        out = _tril(gL, -1)
        if m < n:
            out = L.concat(out, _zeros(batch + (m, n - m), v), axis=-1)
    if has_u:
        u = _triu(gU)
        if m > n:
            u = L.concat(u, _zeros(batch + (m - n, n), v), axis=-2)
        out = u if out is None else L.add(out, u)
    return out


defvjp(lu_unpack, _lu_unpack_vjp, None)


def _lu_solve_vjp(g, ans, LU, pivots, B, output_mask, left=True, adjoint=False):  # noqa: N803
    # LU: linalg_lu_solve_LU(grad, LU, pivots, result, left, adjoint)
    # B: linalg_lu_solve(LU, pivots, grad, left, !adjoint)
    X = ans
    gLU = gB = None
    if output_mask[2]:
        gB = L.unbroadcast(linalg_lu_solve(LU, pivots, g, left=left, adjoint=not adjoint), _value(B).shape)
    if output_mask[0]:
        if _value(LU).size == 0 or _value(X).size == 0:
            return [_zeros_like(_value(LU)), None, gB]
        P, Lo, U = lu_unpack(LU, pivots, unpack_data=True, unpack_pivots=left == adjoint)
        if left != adjoint:
            # gR = U^{-H} op_2(-gX) op_2(X)^H; gL = (L^{-H} gR U^H) o 1_L
            gR = _st(_mH(U), L.neg(_mm(g, _mH(X)) if left else _mm(_mH(g), X)), upper=False)
            gL = _tril(_st(_mH(Lo), _mm(gR, _mH(U)), upper=True, unitriangular=True), -1)
            gLU = L.add(gL, _triu(gR))
        else:
            # gR = -P^T op_3(X) op_1(op_2(gX)) P; gR = gR L^{-H}; gU = (L^H gR U^{-H}) o 1_U
            gR = L.neg(_mm(_mm(_mm(_mH(P), X if left else _mH(X)), _mH(g) if left else g), P))
            gR = _st(_mH(Lo), gR, upper=True, left=False, unitriangular=True)
            gU = _triu(_st(_mH(U), _mm(_mH(Lo), gR), upper=False, left=False))
            gLU = L.add(_tril(gR, -1), gU)
        gLU = L.unbroadcast(gLU, _value(LU).shape)
    return [gLU, None, gB]


defvjp_joint(linalg_lu_solve, _lu_solve_vjp, (True, False, True))
