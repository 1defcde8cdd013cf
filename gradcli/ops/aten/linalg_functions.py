"""``torch.linalg``'s matrix functions, kernels of their own (none is in the core opset, and
PyTorch has no decomposition of them in ``torch._decomp``): ``linalg_pinv.atol_rtol_tensor``
(``torch.linalg.pinv``, ``torch.pinverse``), ``linalg_matrix_exp`` (``torch.linalg.matrix_exp``)
and ``linalg_lstsq`` (``torch.linalg.lstsq``). Every leading dim is a batch.

``pinv`` is PyTorch's ``linalg_pinv``: an SVD (an eigendecomposition when ``hermitian``,
reading the lower triangle), the singular values at most ``max(atol, rtol * S.max())``
dropped; ``rtol`` defaults to ``eps * max(m, n)`` unless a positive ``atol`` is given.
``matrix_exp`` is scaling and squaring with a degree-13 Padé approximant (Higham 2005;
PyTorch evaluates a degree-18 Taylor polynomial instead: the values agree to rounding).

``lstsq`` is the minimum-norm solution through the SVD, whatever the driver (the singular
values below ``rcond`` times the largest dropped; LAPACK's ``gelsy``, the CPU default, drops
by a QR's condition estimate instead: the same solution for a matrix of full rank). Its
other outputs are the driver's: ``residuals`` where ``m > n``, every matrix is of full
rank and the driver is not ``gelsy``; ``rank`` but for ``gels``; the singular values for
``gelsd`` and ``gelss``.

The VJPs are derivatives.yaml's formulas (``pinv_backward``, ``linalg_lstsq_backward``,
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
from .linalg import _NAMES, _check_float, _check_matrix, _mH, _mm, _undefined, _zeros_like
from .registry import aten, defvjp, defvjp_joint


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


# -- lstsq ----------------------------------------------------------------------------------------
_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq_shapes(self, b, rcond=None, driver=None):
    api = "torch.linalg.lstsq"
    _check_float(api, self)
    _check_float(api, b)
    s, bs = tuple(self.shape), tuple(b.shape)
    if len(s) < 2:
        raise ValueError(f"{api}: input must have at least 2 dimensions.")
    if np.dtype(self.dtype) != np.dtype(b.dtype):
        raise TypeError(f"{api}: Expected input and other to have the same dtype, but got input's dtype "
                        f"{_NAMES[np.dtype(self.dtype)]} and other's dtype {_NAMES[np.dtype(b.dtype)]}")
    if driver is not None and driver not in _DRIVERS:
        raise ValueError(f"{api}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    vector = len(bs) == 1 or (len(s) - 1 == len(bs) and bs == s[:-1])
    bm = bs + (1,) if vector else bs
    if len(bm) < 2:
        raise ValueError(f"{api}: other must have at least 1 dimension.")
    if len(bm) != len(s):
        raise ValueError(f"{api}: input and other must have as many dimensions (other's one more as a vector; "
                         f"got {len(s)} and {len(bs)}: PyTorch broadcasts only batch dims of size 1 between them)")
    if bm[-2] != s[-2]:
        raise ValueError(f"{api}: input.size(-2) should match other.size(-2)")
    try:
        batch = tuple(np.broadcast_shapes(s[:-2], bm[:-2]))
    except ValueError:
        raise ValueError(f"{api}: the batch dimensions of input {list(s[:-2])} and other {list(bm[:-2])} do not "
                         "broadcast") from None
    return s, bm, batch, vector


def _lstsq_meta(self, b, rcond=None, driver=None):
    s, bm, batch, vector = _lstsq_shapes(self, b, rcond, driver)
    m, n = s[-2:]
    dt = np.dtype(self.dtype)
    driver = driver or "gelsy"
    x = batch + (n,) if vector else batch + (n, bm[-1])
    # residuals: only where m > n and (known at run time) every matrix is of full rank
    res = (batch + ((1,) if vector else (bm[-1],)), dt) if m > n and driver != "gelsy" else ((0,), dt)
    rank = (s[:-2], np.dtype(np.int64)) if driver != "gels" else ((0,), np.dtype(np.int64))
    sv = (s[:-2] + (min(m, n),), dt) if driver in ("gelsd", "gelss") else ((0,), dt)
    return [(x, dt), res, rank, sv]


@aten("linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> "
      "(Tensor solution, Tensor residuals, Tensor rank, Tensor singular_values)", "LinalgLstsqBackward0",
      differentiable_outputs=[True, True, False, False], meta=_lstsq_meta)
def linalg_lstsq(self, b, rcond=None, driver=None):
    (xs, dt), (rs, _), _, (ss, _) = _lstsq_meta(self, b, rcond, driver)
    s, bm, batch, vector = _lstsq_shapes(self, b, rcond, driver)
    xp = array_module(self, b)
    m, n = s[-2:]
    B = b[..., None] if vector else b
    if self.size == 0 or B.size == 0:
        sol = xp.zeros(batch + (n, bm[-1]), dt)
        sv = xp.zeros(s[:-2] + (min(m, n),), dt)
        rank = xp.zeros(s[:-2], np.int64)
    else:
        u, sv, vh = xp.linalg.svd(self, full_matrices=False)
        cut = (np.finfo(dt).eps * max(m, n) if rcond is None or rcond < 0 else rcond) * sv[..., :1]
        rank = xp.sum(sv > cut, axis=-1).astype(np.int64)
        with np.errstate(divide="ignore"):
            sinv = xp.where(sv > cut, 1 / sv, 0).astype(dt)
        sol = (K.mT(vh) * sinv[..., None, :]) @ (K.mT(u) @ B)
    residuals = xp.zeros((0,), dt)
    if rs != (0,) and bool(xp.all(rank == n)):
        residuals = xp.sum((self @ sol - B) ** 2, axis=-2).astype(dt)
    out = [K.batch_f_contig(sol[..., 0] if vector else sol).astype(dt, copy=False), residuals]
    out.append(rank if (driver or "gelsy") != "gels" else xp.zeros((0,), np.int64))
    out.append(xp.ascontiguousarray(sv.astype(dt, copy=False)) if ss != (0,) else xp.zeros((0,), dt))
    return out


def _lstsq_vjp(g, ans, A, b, output_mask, rcond=None, driver=None):
    # self, b: linalg_lstsq_backward(grads[0], grads[1], self, b, solution, grad_input_mask):
    # the solution's through pinv(A) (pinv_backward(gX B^H, pinv(A), A) and pinv(A)^H gX), the
    # residuals' 2 (A X - B) X^H and -2 (A X - B)
    gX, gR = g[0], g[1]
    a, bv = _value(A), _value(b)
    if a.size == 0 or bv.size == 0:
        return [_zeros_like(a) if output_mask[0] else None, _zeros_like(bv) if output_mask[1] else None]
    vector = bv.ndim == 1 or (a.ndim - 1 == bv.ndim and bv.shape == a.shape[:-1])
    B = L.unsqueeze(b, axis=-1) if vector else b
    X = L.unsqueeze(ans[0], axis=-1) if vector else ans[0]
    gA = gB = None
    if not _undefined(gX):
        gX_ = L.unsqueeze(gX, axis=-1) if vector else gX
        pinvA = linalg_pinv(A, None, None)
        if output_mask[0]:
            gA = L.unbroadcast(_pinv_vjp(_mm(gX_, _mH(B)), pinvA, A), a.shape)
        if output_mask[1]:
            gB = _mm(_mH(pinvA), gX_)
    if _value(gR).size and not _undefined(gR):
        two_res = L.mul(L.sub(_mm(A, X), B), np.asarray(2.0, a.dtype))
        scaled = L.mul(two_res, L.unsqueeze(gR, axis=-2))
        if output_mask[0]:
            t = L.unbroadcast(_mm(scaled, _mH(X)), a.shape)
            gA = t if gA is None else L.add(gA, t)
        if output_mask[1]:
            gB = L.neg(scaled) if gB is None else L.sub(gB, scaled)
    if gB is not None:
        gB = L.unbroadcast(L.squeeze(gB, axis=-1) if vector else gB, bv.shape)
    return [gA, gB]


defvjp_joint(linalg_lstsq, _lstsq_vjp, (True, True))
