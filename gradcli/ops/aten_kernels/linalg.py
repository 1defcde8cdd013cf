"""The dense linear algebra PyTorch's ``torch.linalg`` records, as array functions on
batches of matrices (the last two dims; any leading dims are a batch).

Note [LU as LAPACK's getrf]: ``lu_factor`` is partial pivoting by columns, as LAPACK's
``getf2``: the pivot is the first entry of largest magnitude on and below the diagonal, its
row swapped with the diagonal's, ``pivots`` 1-based (int32, as PyTorch's), ``info`` the
first zero pivot (1-based, 0 when none: the matrix is singular and nothing raises).
``lu_solve`` solves with such a factor, or with its adjoint, by substitution: a zero pivot
gives infinities and NaN where LAPACK's ``getrs`` does, never an error. The determinants,
the inverse and the solves all go through these two, as PyTorch's kernels go through
``linalg_lu_factor_ex`` and ``linalg_lu_solve``; NumPy's ``linalg.solve`` would raise on a
singular matrix where PyTorch returns ``info``.

Note [PyTorch factors A transposed]: PyTorch's ``_linalg_det`` and ``_linalg_slogdet``
factor ``A.mT`` when ``A`` is row-major (``A.is_contiguous()``: LAPACK reads column-major, so
the transpose needs no copy) and ``A`` otherwise, and their backward solves with the
adjoint of that factor. Their ``LU`` and ``pivots`` outputs therefore depend on ``A``'s
layout; so do gradcli's (``use_transpose``). ``_linalg_solve_ex`` (and ``linalg_inv_ex``
through it) factors ``A`` whatever its layout (torch 2.13 and 2.14).

Example::

    >>> import numpy as np
    >>> lu, piv, info = lu_factor(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> lu.tolist(), piv.tolist(), int(info)
    ([[3.0, 4.0], [0.3333333333333333, 0.6666666666666667]], [2, 2], 0)
"""
from __future__ import annotations

import numpy as np

from ._common import array_module

_INT = np.dtype(np.int32)


def batch_f_contig(x):
    """``x`` laid out as PyTorch's ``batched_matrix_contiguous_strides(f_contig=True)``:
    each matrix column-major, the batch dims outermost (LAPACK's results)."""
    xp = array_module(x)
    if x.ndim < 2:
        return xp.ascontiguousarray(x)
    return xp.ascontiguousarray(xp.swapaxes(x, -1, -2)).swapaxes(-1, -2)


def use_transpose(a):
    """Note [PyTorch factors A transposed]: whether PyTorch factors ``A.mT`` (``A`` row-major)."""
    return bool(a.flags.c_contiguous) if isinstance(a, np.ndarray) else bool(
        getattr(getattr(a, "flags", None), "c_contiguous", True))


def mT(x):
    return x.swapaxes(-1, -2)


def lu_factor(a):
    """(LU, pivots, info) of each matrix of ``a`` (..., m, n): Note [LU as LAPACK's getrf];
    ``pivots`` has ``min(m, n)`` entries."""
    xp = array_module(a)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    nb = int(np.prod(batch))
    work = xp.array(a, copy=True, order="C").reshape((nb, m, n))
    piv = xp.zeros((nb, k), _INT)
    info = xp.zeros((nb,), _INT)
    rows = xp.arange(nb)
    with np.errstate(all="ignore"):
        for j in range(k):
            p = j + xp.argmax(xp.abs(work[:, j:, j]), axis=1)
            piv[:, j] = p + 1
            top = work[rows, j, :].copy()
            work[rows, j, :] = work[rows, p, :]
            work[rows, p, :] = top
            pivot = work[:, j, j]
            zero = pivot == 0
            info[(info == 0) & zero] = j + 1
            if j + 1 < m:
                scaled = work[:, j + 1:, j] / xp.where(zero, 1, pivot)[:, None]
                work[:, j + 1:, j] = xp.where(zero[:, None], work[:, j + 1:, j], scaled)
                work[:, j + 1:, j + 1:] -= work[:, j + 1:, j, None] * work[:, j, None, j + 1:]
    return (batch_f_contig(work.reshape(batch + (m, n))), piv.reshape(batch + (k,)),
            info.reshape(batch))


def lu_permutation(piv, m, dtype):
    """The permutation matrix ``P`` (..., m, m) of LAPACK's ``pivots`` (the row swaps, in order),
    with ``A = P L U``."""
    xp = array_module(piv)
    batch = tuple(piv.shape[:-1])
    nb = int(np.prod(batch))
    p = xp.asarray(piv).reshape((nb, piv.shape[-1])).astype(np.int64) - 1
    perm = xp.broadcast_to(xp.arange(m), (nb, m)).copy()
    rows = xp.arange(nb)
    for i in range(p.shape[-1]):
        top = perm[:, i].copy()
        perm[:, i] = perm[rows, p[:, i]]
        perm[rows, p[:, i]] = top
    out = xp.zeros((nb, m, m), dtype)
    out[rows[:, None], perm, xp.arange(m)[None, :]] = 1
    return out.reshape(batch + (m, m))


def lu_det_sign(piv):
    """The permutation's determinant (+1 or -1) of each ``pivots`` row, in the dtype asked."""
    xp = array_module(piv)
    n = piv.shape[-1]
    swaps = xp.sum(piv != xp.arange(1, n + 1, dtype=piv.dtype), axis=-1)
    return 1 - 2 * (swaps % 2)


def lu_solve(lu, piv, b, adjoint=False, left=True):
    """``X`` with ``op(M) X = B`` (``left``) or ``X op(M) = B``, where ``M = P L U`` is the
    matrix ``lu``/``piv`` factor and ``op`` the adjoint when ``adjoint``; the batch dims
    broadcast. A zero pivot gives infinities or NaN, as LAPACK's ``getrs``."""
    if not left:        # X op(M) = B  <=>  op'(M) X^T = B^T, op' the other one
        return mT(lu_solve(lu, piv, mT(b), adjoint=not adjoint, left=True))
    xp = array_module(lu, b)
    n, k = b.shape[-2], b.shape[-1]
    batch = np.broadcast_shapes(tuple(lu.shape[:-2]), tuple(b.shape[:-2]))
    dt = np.result_type(lu.dtype, b.dtype)
    nb = int(np.prod(batch))
    f = xp.broadcast_to(lu, batch + (n, n)).reshape((nb, n, n))
    p = xp.broadcast_to(piv, batch + (n,)).reshape((nb, n)) - 1
    x = xp.array(xp.broadcast_to(b, batch + (n, k)), dtype=dt, copy=True, order="C").reshape((nb, n, k))
    rows = xp.arange(x.shape[0])

    def swap(i):
        top = x[rows, i, :].copy()
        x[rows, i, :] = x[rows, p[:, i], :]
        x[rows, p[:, i], :] = top

    with np.errstate(all="ignore"):
        if not adjoint:
            for i in range(n):
                swap(i)
            for i in range(1, n):                  # L (unit lower) forward
                x[:, i, :] -= (f[:, i, None, :i] @ x[:, :i, :])[:, 0]
            for i in reversed(range(n)):           # U back
                x[:, i, :] = (x[:, i, :] - (f[:, i, None, i + 1:] @ x[:, i + 1:, :])[:, 0]) / f[:, i, i, None]
        else:
            for i in range(n):                     # U^T forward
                x[:, i, :] = (x[:, i, :] - (mT(f[:, :i, i, None]) @ x[:, :i, :])[:, 0]) / f[:, i, i, None]
            for i in reversed(range(n - 1)):       # L^T (unit upper) back
                x[:, i, :] -= (mT(f[:, i + 1:, i, None]) @ x[:, i + 1:, :])[:, 0]
            for i in reversed(range(n)):
                swap(i)
    return x.reshape(batch + (n, k))


def triangular_solve(a, b, upper, left=True, unitriangular=False, adjoint=False):
    """``X`` with ``op(A) X = B`` (``left``) or ``X op(A) = B``, ``A`` triangular (only its
    ``upper`` or lower triangle read; its diagonal taken as ones when ``unitriangular``), ``op``
    the adjoint when ``adjoint``; the batch dims broadcast. By substitution, as LAPACK's
    ``trtrs``: a zero on the diagonal gives infinities or NaN, never an error."""
    if not left:        # X op(A) = B  <=>  op'(A) X^T = B^T, op' the other one
        return mT(triangular_solve(a, mT(b), upper, True, unitriangular, not adjoint))
    if adjoint:
        a, upper = mT(a), not upper
    xp = array_module(a, b)
    n, k = b.shape[-2], b.shape[-1]
    batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    nb = int(np.prod(batch))
    f = xp.broadcast_to(a, batch + (n, n)).reshape((nb, n, n))
    x = xp.array(xp.broadcast_to(b, batch + (n, k)), dtype=np.result_type(a.dtype, b.dtype), copy=True,
                 order="C").reshape((nb, n, k))
    with np.errstate(all="ignore"):
        for i in (reversed(range(n)) if upper else range(n)):
            done = slice(i + 1, n) if upper else slice(0, i)
            xi = x[:, i, :] - (f[:, i, None, done] @ x[:, done, :])[:, 0]
            x[:, i, :] = xi if unitriangular else xi / f[:, i, i, None]
    return x.reshape(batch + (n, k))


def cholesky_solve(factor, b, upper=False):
    """``(L L^H)^{-1} B`` (``(U^H U)^{-1} B`` when ``upper``), as LAPACK's ``potrs``: only the
    factor's triangle is read; the batch dims broadcast."""
    y = triangular_solve(factor, b, upper, adjoint=upper)
    return triangular_solve(factor, y, upper, adjoint=not upper)


def cholesky(a, upper=False):
    """(L, info) of each matrix of ``a``, read from its lower triangle (its upper one when
    ``upper``, giving ``U = L^T``), as LAPACK's unblocked ``potf2``: where the leading minor
    of order ``info`` is not positive-definite the factor stops, that diagonal entry holds
    the value whose square root was to be taken and the columns after it stay ``a``'s."""
    xp = array_module(a)
    n = a.shape[-1]
    batch = tuple(a.shape[:-2])
    src = mT(a) if upper else a
    nb = int(np.prod(batch))
    work = xp.array(src, copy=True, order="C").reshape((nb, n, n))
    info = xp.zeros((nb,), _INT)
    alive = xp.ones((nb,), bool)
    with np.errstate(all="ignore"):
        for j in range(n):
            row = work[:, j, :j]
            ajj = work[:, j, j] - xp.sum(row * row, axis=-1)
            bad = alive & ~(ajj > 0)
            info[bad] = j + 1
            work[:, j, j] = xp.where(alive, xp.where(bad, ajj, xp.sqrt(ajj)), work[:, j, j])
            alive = alive & ~bad
            if j + 1 < n:
                below = (work[:, j + 1:, j] - (work[:, j + 1:, :j] @ row[:, :, None])[:, :, 0]) \
                    / work[:, j, j, None]
                work[:, j + 1:, j] = xp.where(alive[:, None], below, work[:, j + 1:, j])
    out = xp.tril(work).reshape(batch + (n, n))
    return batch_f_contig(mT(out) if upper else out), info.reshape(batch)


def singular_message(api, info, kind):
    """PyTorch's ``_linalg_check_errors`` message for the first nonzero ``info``, or None."""
    flat = np.asarray(info).reshape(-1)
    bad = np.flatnonzero(flat)
    if not bad.size:
        return None
    where = f": (Batch element {int(bad[0])})" if np.ndim(info) else ""
    v = int(flat[bad[0]])
    if kind == "inv":
        return (f"{api}{where}: The diagonal element {v} is zero, the inversion could not be completed "
                "because the input matrix is singular.")
    if kind == "solve":
        return f"{api}{where}: The solver failed because the input matrix is singular."
    return (f"{api}{where}: The factorization could not be completed because the input is not "
            f"positive-definite (the leading minor of order {v} is not positive-definite).")
