"""``torch.linalg``'s solvers with a factored matrix, kernels of their own (none is in the core
opset, and PyTorch has no decomposition of them): ``linalg_solve_triangular``
(``torch.linalg.solve_triangular``), ``triangular_solve`` (the deprecated
``torch.triangular_solve``), ``cholesky_solve`` and ``cholesky_inverse``. Every leading dim is
a batch, and the batch dims of the two inputs broadcast. The arithmetic is substitution
(``gradcli.ops.aten_kernels.linalg.triangular_solve``, as LAPACK's ``trtrs``): only the
triangle the op names is read, and a zero on the diagonal gives infinities or NaN, never an
error, as PyTorch's.

The VJPs are derivatives.yaml's formulas (``linalg_solve_triangular_backward``,
``triangular_solve_backward``, ``cholesky_solve_backward``, ``cholesky_inverse_backward``),
written with the ops themselves so that a create_graph gradient records and differentiates
again. The gradient of a factor that is read through one triangle (``cholesky_solve``'s and
``cholesky_inverse``'s) is PyTorch's: the formula's, dense, as if the whole matrix were read.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> a, b = np.array([[2.0, 1.0], [0.0, 4.0]]), np.array([[4.0], [8.0]])
    >>> np.asarray(OPS["aten.linalg_solve_triangular.default"](a, b, upper=True)).ravel().tolist()
    [1.0, 2.0]
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import linalg as K
from ..aten_kernels._common import array_module
from ..library import _value
from .linalg import _NAMES, _check_float, _check_matrix, _mH, _mm, _tril, _triu, _undefined, _zeros_like
from .registry import aten, defvjp, defvjp_joint


# -- shape rules --------------------------------------------------------------------------------
def _same_dtype(api, a, b):
    if np.dtype(a.dtype) != np.dtype(b.dtype):
        raise TypeError(f"{api}: Expected A and B to have the same dtype, but found A of type "
                        f"{_NAMES[np.dtype(a.dtype)]} and B of type {_NAMES[np.dtype(b.dtype)]} instead "
                        "(gradcli does not promote them)")


def _batch(api, a, b):
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise ValueError(f"{api}: the batch dimensions of A {list(a)} and B {list(b)} do not broadcast") from None


def _solve_triangular_meta(self, B, *, upper=None, left=True, unitriangular=False):
    api = "linalg.solve_triangular"
    s = _check_matrix(api, self)
    _check_float(api, B)
    _same_dtype(api, self, B)
    b = _check_rhs(api, s, B, left)
    return [(_batch(api, s[:-2], b[:-2]) + b[-2:], np.dtype(self.dtype))]


def _check_rhs(api, s, B, left):
    """``B``'s shape, checked as the right-hand side of ``AX = B`` (``XA = B`` when not
    ``left``) for an ``A`` of shape ``s``."""
    b = tuple(B.shape)
    if len(b) < 2:
        raise ValueError(f"{api}: The input tensor B must have at least 2 dimensions.")
    if (b[-2] if left else b[-1]) != s[-1]:
        eq = "AX = B" if left else "XA = B"
        raise ValueError(f"{api}: Incompatible shapes of A and B for the equation {eq} "
                         f"({s[-2]}x{s[-1]} and {b[-2]}x{b[-1]})")
    return b


def _rhs_and_factor(api, name, B, A):
    """``triangular_solve``'s and ``cholesky_solve``'s rule (B first, the matrix second):
    (the solution's shape, the factor's shape broadcast to the batch)."""
    _check_float(api, B)
    s = _check_matrix(api, A)
    _same_dtype(api, A, B)
    b = tuple(B.shape)
    if len(b) < 2:
        raise ValueError(f"torch.{api}: Expected b to have at least 2 dimensions, but it has {len(b)} dimensions "
                         "instead")
    if b[-2] != s[-1]:
        raise ValueError(f"Incompatible matrix sizes for {api}: each A matrix is {s[-2]} by {s[-1]} but each b "
                         f"matrix is {b[-2]} by {b[-1]}")
    batch = _batch(api, s[:-2], b[:-2])
    return batch + b[-2:], batch + s[-2:]


def _triangular_solve_meta(self, A, upper=True, transpose=False, unitriangular=False):
    x, a = _rhs_and_factor("triangular_solve", "A", self, A)
    return [(x, np.dtype(A.dtype)), (a, np.dtype(A.dtype))]


def _cholesky_solve_meta(self, input2, upper=False):
    x, _ = _rhs_and_factor("cholesky_solve", "input2", self, input2)
    return [(x, np.dtype(self.dtype))]


def _cholesky_inverse_meta(self, upper=False):
    s = _check_matrix("cholesky_inverse", self)
    return [(s, np.dtype(self.dtype))]


# -- forwards -----------------------------------------------------------------------------------
@aten("linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) "
      "-> Tensor", "LinalgSolveTriangularBackward0", meta=_solve_triangular_meta)
def linalg_solve_triangular(self, B, *, upper, left=True, unitriangular=False):
    _solve_triangular_meta(self, B, upper=upper, left=left)
    x = K.triangular_solve(self, B, upper, left=left, unitriangular=unitriangular)
    # (left=False: PyTorch solves the transposed system, and its solution comes back row-major)
    return K.batch_f_contig(x) if left else array_module(x).ascontiguousarray(x)


@aten("triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) "
      "-> (Tensor solution, Tensor cloned_coefficient)", "TriangularSolveBackward0", meta=_triangular_solve_meta)
def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    _, a_shape = _rhs_and_factor("triangular_solve", "A", self, A)
    xp = array_module(self, A)
    x = K.triangular_solve(A, self, upper, unitriangular=unitriangular, adjoint=transpose)
    return [K.batch_f_contig(x), K.batch_f_contig(xp.broadcast_to(A, a_shape))]


@aten("cholesky_solve(Tensor self, Tensor input2, bool upper=False) -> Tensor", "CholeskySolveBackward0",
      meta=_cholesky_solve_meta)
def cholesky_solve(self, input2, upper=False):
    _rhs_and_factor("cholesky_solve", "input2", self, input2)
    return K.batch_f_contig(K.cholesky_solve(input2, self, upper))


@aten("cholesky_inverse(Tensor self, bool upper=False) -> Tensor", "CholeskyInverseBackward0",
      meta=_cholesky_inverse_meta)
def cholesky_inverse(self, upper=False):
    _cholesky_inverse_meta(self)
    eye = array_module(self).eye(self.shape[-1], dtype=self.dtype)
    return K.batch_f_contig(K.cholesky_solve(self, eye, upper))


# -- VJPs ------------------------------------------------------------------------------------------
def _triangle(x, upper, unitriangular):
    """``x.triu(unitriangular)`` or ``x.tril(-unitriangular)``: the entries the solve reads."""
    k = int(unitriangular)
    return _triu(x, k) if upper else _tril(x, -k)


def _solve_triangular_vjp(g, ans, A, B, output_mask, upper=None, left=True, unitriangular=False):
    # self, B: linalg_solve_triangular_backward(grad, self, result, upper, left, unitriangular, grad_input_mask)
    gB = linalg_solve_triangular(_mH(A), g, upper=not upper, left=left, unitriangular=unitriangular)
    gA = None
    if output_mask[0]:
        Xh = _mH(ans)
        gA = _triangle(L.neg(_mm(gB, Xh) if left else _mm(Xh, gB)), upper, unitriangular)
        gA = L.unbroadcast(gA, _value(A).shape)
    return [gA, L.unbroadcast(gB, _value(B).shape) if output_mask[1] else None]


defvjp_joint(linalg_solve_triangular, _solve_triangular_vjp, (True, True))


def _triangular_solve_vjp(g, ans, b, A, output_mask, upper=True, transpose=False, unitriangular=False):
    # self, A: triangular_solve_backward(grad_solution, grad_cloned_coefficient, self, A, solution, upper,
    #                                    transpose, unitriangular, grad_input_mask)
    gX, gM = g
    X = ans[0]
    if _value(X).size == 0 or _value(A).size == 0:
        return [_zeros_like(_value(b)) if output_mask[0] else None, _zeros_like(_value(A)) if output_mask[1] else None]
    gb = ga = None
    if not _undefined(gX):
        gb = triangular_solve(gX, A, upper=upper, transpose=not transpose, unitriangular=unitriangular)[0]
        if output_mask[1]:
            ga = L.neg(_mm(X, _mH(gb)) if transpose else _mm(gb, _mH(X)))
            ga = _triangle(ga, upper, unitriangular)
    if output_mask[1] and not _undefined(gM):
        ga = gM if ga is None else L.add(ga, gM)
    if gb is None and ga is None:
        return [None, None]
    return [None if gb is None or not output_mask[0] else L.unbroadcast(gb, _value(b).shape),
            None if ga is None else L.unbroadcast(ga, _value(A).shape)]


defvjp_joint(triangular_solve, _triangular_solve_vjp, (True, True))


def _cholesky_solve_vjp(g, ans, b, factor, output_mask, upper=False):
    # self, input2: cholesky_solve_backward(grad, self, input2, result, upper, grad_input_mask)
    gb = cholesky_solve(g, factor, upper=upper)
    gf = None
    if output_mask[1]:
        common = _mm(gb, _mH(ans))
        common = L.add(common, _mH(common))
        gf = L.unbroadcast(L.neg(_mm(factor, common) if upper else _mm(common, factor)), _value(factor).shape)
    return [L.unbroadcast(gb, _value(b).shape) if output_mask[0] else None, gf]


defvjp_joint(cholesky_solve, _cholesky_solve_vjp, (True, True))


def _cholesky_inverse_vjp(g, ans, factor, upper=False):
    # self: cholesky_inverse_backward(grad, self, upper, result)
    common = _mm(ans, _mm(L.add(g, _mH(g)), ans))
    return L.neg(_mm(factor, common) if upper else _mm(common, factor))


defvjp(cholesky_inverse, _cholesky_inverse_vjp)
