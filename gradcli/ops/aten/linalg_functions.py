"""``torch.linalg``'s matrix functions, kernels of their own (none is in the core opset, and
PyTorch has no decomposition of them in ``torch._decomp``): ``linalg_pinv.atol_rtol_tensor``
(``torch.linalg.pinv``, ``torch.pinverse``) and ``linalg_matrix_exp``
(``torch.linalg.matrix_exp``). Every leading dim is a batch.

``pinv`` is PyTorch's ``linalg_pinv``: an SVD (an eigendecomposition when ``hermitian``,
reading the lower triangle), the singular values at most ``max(atol, rtol * S.max())``
dropped; ``rtol`` defaults to ``eps * max(m, n)`` unless a positive ``atol`` is given.
``matrix_exp`` is scaling and squaring with a degree-13 Padé approximant (Higham 2005;
PyTorch evaluates a degree-18 Taylor polynomial instead: the values agree to rounding).

The VJPs are derivatives.yaml's formulas (``pinv_backward``,
``linalg_matrix_exp_differential``: the exponential of the block matrix
``[[A^H, G], [0, A^H]]``, whose upper-right block is the gradient), written with the ops so
that a create_graph gradient records and differentiates again.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> np.asarray(OPS["aten.linalg_pinv.atol_rtol_tensor"](np.array([[2.0, 0.0], [0.0, 0.0]]))).tolist()
    [[0.5, 0.0], [0.0, 0.0]]
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import linalg as K
from ..aten_kernels._common import array_module
from ..library import _value
from .linalg import _NAMES, _check_float, _check_matrix, _mH, _mm, _zeros_like
from .registry import aten, defvjp


# -- pinv -----------------------------------------------------------------------------------------
def _pinv_meta(self, atol=None, rtol=None, hermitian=False):
    s = tuple(self.shape)
    if len(s) < 2 or np.dtype(self.dtype) not in (np.float32, np.float64):
        raise ValueError(f"linalg.pinv({_NAMES.get(np.dtype(self.dtype), self.dtype)}{{{list(s)}}}): expected a tensor "
                         "with 2 or more dimensions of float, double, cfloat or cdouble types")
    batch = s[:-2]
    for name, t in (("atol", atol), ("rtol", rtol)):
        if t is None:
            continue
        _check_float(f"linalg.pinv: {name}", t)
        try:            # (the tolerances' dims broadcast with the batch, as PyTorch's)
            batch = tuple(np.broadcast_shapes(tuple(t.shape), batch))
        except ValueError:
            raise ValueError(f"linalg.pinv: {name} of shape {list(t.shape)} does not broadcast with the batch "
                             f"{list(s[:-2])} of the input") from None
    return [(batch + (s[-1], s[-2]), np.dtype(self.dtype))]


@aten("linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) "
      "-> Tensor", "LinalgPinvBackward0", meta=_pinv_meta)
def linalg_pinv(self, atol=None, rtol=None, hermitian=False):
    ((shape, dt),) = _pinv_meta(self, atol=atol, rtol=rtol, hermitian=hermitian)
    xp = array_module(self)
    m, n = self.shape[-2:]
    if self.size == 0 or int(np.prod(shape)) == 0:
        return xp.zeros(shape, dt)
    a = xp.zeros((), np.float64) if atol is None else xp.asarray(atol, np.float64)
    if rtol is not None:
        r = xp.asarray(rtol, np.float64)
    else:
        default = xp.asarray(np.finfo(dt).eps * max(m, n), np.float64)
        r = default if atol is None else xp.where(a > 0, 0.0, default)
    if not hermitian:
        u, s, vh = xp.linalg.svd(self, full_matrices=False)
        big = s[..., :1]
        absval = s
    else:
        s, u = xp.linalg.eigh(self, UPLO="L")
        absval = xp.abs(s)
        big = xp.max(absval, axis=-1, keepdims=True)
        vh = K.mT(u)
    tol = xp.maximum(a[..., None], r[..., None] * big)
    with np.errstate(divide="ignore"):
        sinv = xp.where(absval > tol, 1 / s, 0).astype(dt)
    return xp.ascontiguousarray((K.mT(vh) * sinv[..., None, :]) @ K.mT(u)).astype(dt, copy=False)


def _pinv_vjp(g, ans, A, atol=None, rtol=None, hermitian=False):
    # self: pinv_backward(grad, result, self)
    if _value(A).size == 0:
        return _zeros_like(_value(A))
    m, n = _value(A).shape[-2:]
    P, Ph, gh = ans, _mH(ans), _mH(g)
    if m <= n:
        Km = _mm(gh, P)
        KPh = _mm(Km, Ph)
        out = L.sub(KPh, _mH(_mm(P, Km)))
        out = L.sub(out, _mm(_mm(A, P), KPh))
        return L.unbroadcast(L.add(out, _mm(_mm(Ph, P), L.sub(gh, _mm(Km, A)))), _value(A).shape)
    Km = _mm(P, gh)
    PhK = _mm(Ph, Km)
    out = L.add(L.neg(_mH(_mm(Km, P))), _mm(_mm(L.sub(gh, _mm(A, Km)), P), Ph))
    return L.unbroadcast(L.sub(L.add(out, PhK), _mm(_mm(PhK, P), A)), _value(A).shape)


defvjp(linalg_pinv, _pinv_vjp, None, None)


# -- matrix_exp -----------------------------------------------------------------------------------
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0,
           960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


def _expm(a):
    """exp of each matrix of ``a`` (float64 arithmetic): scaling and squaring, Padé 13."""
    xp = array_module(a)
    x = xp.asarray(a, np.float64)
    n = x.shape[-1]
    if x.size == 0:
        return x.copy()
    norm = xp.max(xp.sum(xp.abs(x), axis=-2), axis=-1)            # the 1-norm of each matrix
    with np.errstate(divide="ignore"):
        s = xp.maximum(0, xp.ceil(xp.log2(xp.maximum(norm, 1e-300) / _THETA13))).astype(np.int64)
    s = xp.where(xp.isfinite(norm), s, 0)
    x = x / (2.0 ** s)[..., None, None]
    b = _PADE13
    eye = xp.eye(n)
    x2 = x @ x
    x4 = x2 @ x2
    x6 = x4 @ x2
    u = x @ (x6 @ (b[13] * x6 + b[11] * x4 + b[9] * x2) + b[7] * x6 + b[5] * x4 + b[3] * x2 + b[1] * eye)
    v = x6 @ (b[12] * x6 + b[10] * x4 + b[8] * x2) + b[6] * x6 + b[4] * x4 + b[2] * x2 + b[0] * eye
    r = xp.linalg.solve(v - u, v + u)
    for k in range(int(xp.max(s)) if s.size else 0):                # the squarings, matrix by matrix
        r = xp.where((s > k)[..., None, None], r @ r, r)
    return r


def _matrix_exp_meta(self):
    s = _check_matrix("linalg.matrix_exp", self)
    return [(s, np.dtype(self.dtype))]


@aten("linalg_matrix_exp(Tensor self) -> Tensor", "LinalgMatrixExpBackward0", meta=_matrix_exp_meta)
def linalg_matrix_exp(self):
    _matrix_exp_meta(self)
    return array_module(self).ascontiguousarray(_expm(self).astype(self.dtype, copy=False))


def _matrix_exp_vjp(g, ans, A):
    # self: linalg_matrix_exp_differential(self, grad, adjoint=true): the upper-right block of
    # exp([[A^H, G], [0, A^H]])
    v = _value(A)
    if v.size == 0:
        return _zeros_like(v)
    n = v.shape[-1]
    Ah = _mH(A)
    zeros = array_module(v).zeros(v.shape, v.dtype)
    big = L.concat(L.concat(Ah, g, axis=-1), L.concat(zeros, Ah, axis=-1), axis=-2)
    from .shape import slice_  # noqa: PLC0415

    e = linalg_matrix_exp(big)
    return slice_(slice_(e, dim=-2, start=0, end=n), dim=-1, start=n, end=2 * n)


defvjp(linalg_matrix_exp, _matrix_exp_vjp)
