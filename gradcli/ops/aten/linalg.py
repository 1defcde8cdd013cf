"""``torch.linalg``'s ATen ops, kernels of their own (none is in the core opset, and PyTorch
has no decomposition of them): ``_linalg_det`` (``torch.linalg.det``), ``_linalg_slogdet``
(``slogdet``, ``logdet``), ``linalg_inv_ex`` (``inv``), ``_linalg_solve_ex`` (``solve``),
``linalg_cholesky_ex`` (``cholesky``), ``linalg_qr`` (``qr``), ``_linalg_svd`` (``svd``,
``svdvals``) and ``_linalg_eigh`` (``eigh``, ``eigvalsh``). Every leading dim is a batch;
the arithmetic is in ``gradcli.ops.aten_kernels.linalg`` (LU and Cholesky as LAPACK's
unblocked routines, Note [LU as LAPACK's getrf]) and NumPy's ``linalg`` (QR, SVD, eigh).

The ``_ex`` ops never raise on a singular (or, for Cholesky, not positive-definite) matrix:
they return ``info`` as PyTorch's do, unless ``check_errors``.

The VJPs are derivatives.yaml's formulas (``linalg_det_backward``, ``slogdet_backward``,
``linalg_solve_backward``, ``cholesky_backward``, ``linalg_qr_backward``, ``svd_backward``,
``linalg_eig_backward`` for eigh), written with the ops themselves so that a create_graph
gradient records and differentiates again; where PyTorch solves with a triangular factor
(Cholesky's and QR's backward) gradcli does too, with ``linalg_solve_triangular``.

Note [Singular value and eigenvector signs]: each column of ``U`` and ``V`` (``svd``) and
each eigenvector (``eigh``) is defined up to its sign; NumPy's LAPACK and PyTorch's (MKL)
may pick different ones. A loss that depends on that sign is ill-defined (PyTorch's
documentation says so); any other (``svdvals``, eigenvalues, ``U S Vh``, ``|U|``) gets
PyTorch's gradient.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> float(OPS["aten._linalg_det.default"](np.array([[2.0, 1.0], [1.0, 3.0]]))[0])
    5.0
"""
from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from .. import library as L
from ..aten_kernels import linalg as K
from ..aten_kernels._common import array_module
from ..library import _value
from .registry import aten, defvjp, defvjp_joint

_INT = np.dtype(np.int32)
_NAMES = {np.dtype(np.float32): "Float", np.dtype(np.float64): "Double", np.dtype(np.float16): "Half",
          np.dtype(np.int64): "Long", np.dtype(np.int32): "Int", np.dtype(bool): "Bool"}


# -- shape rules --------------------------------------------------------------------------------
def _check_float(api, a):
    dt = np.dtype(a.dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"{api}: Expected a floating point or complex tensor as input. Got "
                        f"{_NAMES.get(dt, dt.name)} (gradcli computes float32 and float64)")


def _check_matrix(api, a, square=True):
    _check_float(api, a)
    if len(a.shape) < 2:
        raise ValueError(f"{api}: The input tensor A must have at least 2 dimensions.")
    if square and a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{api}: A must be batches of square matrices, but they are {a.shape[-2]} by "
                         f"{a.shape[-1]} matrices")
    return tuple(a.shape)


def _det_meta(A):
    s = _check_matrix("linalg.det", A)
    return [(s[:-2], np.dtype(A.dtype)), (s, np.dtype(A.dtype)), (s[:-1], _INT)]


def _slogdet_meta(A):
    s = _check_matrix("linalg.slogdet", A)
    return [(s[:-2], np.dtype(A.dtype)), (s[:-2], np.dtype(A.dtype)), (s, np.dtype(A.dtype)), (s[:-1], _INT)]


def _inv_meta(A, check_errors=False):
    s = _check_matrix("linalg.inv", A)
    return [(s, np.dtype(A.dtype)), (s[:-2], _INT)]


def _broadcast_batch(a, b):
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise ValueError(f"linalg.solve: the batch dimensions of A {list(a)} and B {list(b)} do not "
                         "broadcast") from None


def _vector_rhs(a_shape, b_shape):
    """PyTorch's ``linalg_solve_is_vector_rhs``: B is a vector (or a batch of vectors)."""
    return len(b_shape) == 1 or (len(a_shape) - 1 == len(b_shape) and tuple(b_shape) == tuple(a_shape[:-1]))


def _solve_meta(A, B, left=True, check_errors=False):
    s = _check_matrix("linalg.solve", A)
    _check_float("linalg.solve", B)
    if np.dtype(A.dtype) != np.dtype(B.dtype):
        raise TypeError(f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
                        f"{_NAMES[np.dtype(A.dtype)]} and B of type {_NAMES[np.dtype(B.dtype)]} instead")
    vector = _vector_rhs(s, B.shape)
    b = tuple(B.shape) + (1,) if vector else tuple(B.shape)
    if len(b) < 2:
        raise ValueError("linalg.solve: The input tensor B must have at least 2 dimensions.")
    if not left and vector:
        raise ValueError("linalg.solve: Vector broadcasting of the left hand side is not supported for "
                         "left=False. In this case linalg.solve is equivalent to B / A.squeeze(-1)")
    n = s[-1]
    if (b[-2] if left else b[-1]) != n:
        eq = "AX = B" if left else "XA = B"
        raise ValueError(f"linalg.solve: Incompatible shapes of A and B for the equation {eq} "
                         f"({s[-2]}x{s[-1]} and {b[-2]}x{b[-1]})")
    out = _broadcast_batch(s[:-2], b[:-2]) + b[-2:]
    out = out[:-1] if vector else out
    return [(out, np.dtype(A.dtype)), (s, np.dtype(A.dtype)), (s[:-1], _INT), (s[:-2], _INT)]


def _cholesky_meta(self, upper=False, check_errors=False):
    s = _check_matrix("linalg.cholesky", self)
    return [(s, np.dtype(self.dtype)), (s[:-2], _INT)]


_QR_MODES = ("reduced", "complete", "r")


def _qr_meta(A, mode="reduced"):
    s = _check_matrix("linalg.qr", A, square=False)
    if mode not in _QR_MODES:
        raise ValueError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
                         "'r', or 'complete'")
    m, n = s[-2:]
    k = min(m, n)
    dt = np.dtype(A.dtype)
    if mode == "r":
        return [((0,), dt), (s[:-2] + (k, n), dt)]
    if mode == "complete":
        return [(s[:-2] + (m, m), dt), (s[:-2] + (m, n), dt)]
    return [(s[:-2] + (m, k), dt), (s[:-2] + (k, n), dt)]


def _svd_meta(A, full_matrices=False, compute_uv=True, driver=None):
    s = _check_matrix("linalg.svd", A, square=False)
    if driver is not None:
        raise ValueError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                         "cuSOLVER backend.")
    m, n = s[-2:]
    k = min(m, n)
    dt = np.dtype(A.dtype)
    S = (s[:-2] + (k,), dt)
    if not compute_uv:
        return [((0,), dt), S, ((0,), dt)]
    if full_matrices:
        return [(s[:-2] + (m, m), dt), S, (s[:-2] + (n, n), dt)]
    return [(s[:-2] + (m, k), dt), S, (s[:-2] + (k, n), dt)]


def _eigh_meta(A, UPLO="L", compute_v=True):
    s = _check_matrix("linalg.eigh", A)
    if UPLO not in ("L", "U"):
        raise ValueError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    dt = np.dtype(A.dtype)
    return [(s[:-1], dt), (s if compute_v else (0,), dt)]


# -- forwards -----------------------------------------------------------------------------------
def _factor(A):
    """Note [PyTorch factors A transposed]: (LU, pivots, info, factored A.mT)."""
    at = K.use_transpose(A)
    return (*K.lu_factor(K.mT(A) if at else A), at)


@aten("_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)", "LinalgDetBackward0",
      differentiable_outputs=[True, False, False], meta=_det_meta)
def linalg_det(A):
    _det_meta(A)
    xp = array_module(A)
    lu, piv, _, _ = _factor(A)
    with np.errstate(all="ignore"):
        det = K.lu_det_sign(piv).astype(A.dtype) * xp.prod(xp.diagonal(lu, 0, -2, -1), axis=-1)
    return [xp.asarray(det, A.dtype), lu, piv]


@aten("_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)",
      "LinalgSlogdetBackward0", differentiable_outputs=[True, True, False, False], meta=_slogdet_meta)
def linalg_slogdet(A):
    _slogdet_meta(A)
    xp = array_module(A)
    lu, piv, _, _ = _factor(A)
    d = xp.diagonal(lu, 0, -2, -1)
    with np.errstate(all="ignore"):
        sign = xp.prod(xp.sign(d), axis=-1) * K.lu_det_sign(piv).astype(A.dtype)
        logabs = xp.sum(xp.log(xp.abs(d)), axis=-1)
    return [xp.asarray(sign, A.dtype), xp.asarray(logabs, A.dtype), lu, piv]


def _check_errors(api, info, kind):
    message = K.singular_message(api, info, kind)
    if message is not None:
        raise ValueError(message)


@aten("linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)",
      "LinalgInvExBackward0", differentiable_outputs=[True, False], meta=_inv_meta)
def linalg_inv_ex(A, check_errors=False):
    _inv_meta(A)
    xp = array_module(A)
    lu, piv, info = K.lu_factor(A)           # (through linalg_solve_ex, which factors A itself)
    if check_errors:
        _check_errors("linalg.inv_ex", info, "inv")
    eye = xp.eye(A.shape[-1], dtype=A.dtype)
    return [K.batch_f_contig(K.lu_solve(lu, piv, eye)), info]


@aten("_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> "
      "(Tensor result, Tensor LU, Tensor pivots, Tensor info)", "LinalgSolveExBackward0",
      differentiable_outputs=[True, False, False, False], meta=_solve_meta)
def linalg_solve_ex(A, B, left=True, check_errors=False):
    _solve_meta(A, B, left)
    xp = array_module(A, B)
    lu, piv, info = K.lu_factor(A)
    if check_errors:
        _check_errors("torch.linalg.solve_ex", info, "solve")
    vector = _vector_rhs(A.shape, B.shape)
    x = K.lu_solve(lu, piv, B[..., None] if vector else B, left=left)
    x = x[..., 0] if vector else x
    return [K.batch_f_contig(x) if left else xp.ascontiguousarray(x), lu, piv, info]


@aten("linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)",
      "LinalgCholeskyExBackward0", differentiable_outputs=[True, False], meta=_cholesky_meta)
def linalg_cholesky_ex(self, upper=False, check_errors=False):
    _cholesky_meta(self)
    out, info = K.cholesky(self, upper)
    if check_errors:
        _check_errors("linalg.cholesky_ex", info, "cholesky")
    return [out, info]


@aten("linalg_qr(Tensor A, str mode=\"reduced\") -> (Tensor Q, Tensor R)", "LinalgQrBackward0", meta=_qr_meta)
def linalg_qr(A, mode="reduced"):
    (qs, dt), (rs, _) = _qr_meta(A, mode)
    xp = array_module(A)
    if A.size == 0:       # (NumPy's qr needs a nonempty matrix): Q is the identity's columns, R zero
        m = A.shape[-1 - 1]
        q = xp.zeros(qs, dt) if mode == "r" else xp.broadcast_to(xp.eye(m, qs[-1], dtype=dt), qs).copy()
        return [K.batch_f_contig(q), K.batch_f_contig(xp.zeros(rs, dt))]
    if mode == "r":
        return [xp.zeros((0,), dt), K.batch_f_contig(xp.linalg.qr(A, mode="r").astype(dt, copy=False))]
    q, r = xp.linalg.qr(A, mode=mode)
    return [K.batch_f_contig(q.astype(dt, copy=False)), K.batch_f_contig(r.astype(dt, copy=False))]


@aten("_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) -> "
      "(Tensor U, Tensor S, Tensor Vh)", "LinalgSvdBackward0", meta=_svd_meta)
def linalg_svd(A, full_matrices=False, compute_uv=True, driver=None):
    (us, dt), (ss, _), (vs, _) = _svd_meta(A, full_matrices, compute_uv, driver)
    xp = array_module(A)
    if A.size == 0:       # (NumPy's svd needs a nonempty matrix): no singular values
        def eye(shape):
            return xp.broadcast_to(xp.eye(shape[-2], shape[-1], dtype=dt), shape).copy() if len(shape) > 1 \
                else xp.zeros(shape, dt)
        return [K.batch_f_contig(eye(us)), xp.zeros(ss, dt), K.batch_f_contig(eye(vs))]
    if not compute_uv:
        return [xp.zeros((0,), dt), xp.ascontiguousarray(xp.linalg.svd(A, compute_uv=False).astype(dt, copy=False)),
                xp.zeros((0,), dt)]
    u, s, vh = xp.linalg.svd(A, full_matrices=full_matrices)
    return [K.batch_f_contig(u.astype(dt, copy=False)), xp.ascontiguousarray(s.astype(dt, copy=False)),
            K.batch_f_contig(vh.astype(dt, copy=False))]


@aten("_linalg_eigh(Tensor A, str UPLO=\"L\", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)",
      "LinalgEighBackward0", meta=_eigh_meta)
def linalg_eigh(A, UPLO="L", compute_v=True):  # noqa: N803 - PyTorch's name
    (ws, dt), (vs, _) = _eigh_meta(A, UPLO, compute_v)
    xp = array_module(A)
    if A.size == 0:
        return [xp.zeros(ws, dt), K.batch_f_contig(xp.zeros(vs, dt))]
    if not compute_v:
        return [xp.ascontiguousarray(xp.linalg.eigvalsh(A, UPLO=UPLO).astype(dt, copy=False)), xp.zeros((0,), dt)]
    w, v = xp.linalg.eigh(A, UPLO=UPLO)
    return [xp.ascontiguousarray(w.astype(dt, copy=False)), K.batch_f_contig(v.astype(dt, copy=False))]


# -- the formulas' building blocks, on arrays or (under create_graph) Tensors -----------------------
def _recording(*xs):
    """Whether the backward records (create_graph): a gradient or a saved input is a Tensor."""
    return any(type(x) is Tensor for x in xs)


def _undefined(g):
    """An output's gradient PyTorch would leave undefined: the engine's zeros for an output
    nothing reached (raw zeros; a recording gradient is never taken for one)."""
    return type(g) is not Tensor and (_value(g).size == 0 or not array_module(_value(g)).any(_value(g)))


def _zeros_like(a):
    """An empty input's gradient (PyTorch's formulas return none; its engine gives zeros)."""
    return array_module(a).zeros(a.shape, a.dtype)


def _eye(n, like):
    v = _value(like)
    return array_module(v).eye(n, dtype=v.dtype)


def _mH(x):
    return L._swap_last(x)


def _mm(a, b):
    return L.matmul(a, b)


def _tril(x, k=0):
    v = _value(x)
    xp = array_module(v)
    return L.mul(x, xp.tril(xp.ones(v.shape[-2:], v.dtype), k))


def _triu(x, k=0):
    v = _value(x)
    xp = array_module(v)
    return L.mul(x, xp.triu(xp.ones(v.shape[-2:], v.dtype), k))


def _diag_embed(d):
    return L.mul(L.unsqueeze(d, axis=-2), _eye(_value(d).shape[-1], d))


def _times_eye(c, A):
    """``c`` (a batch of numbers) times the identity of ``A``'s size: ``diag_embed(c.expand(n))``."""
    return L.mul(L.unsqueeze(L.unsqueeze(c, axis=-1), axis=-1), _eye(_value(A).shape[-1], A))


def _diagonal(x):
    return L.sum_(L.mul(x, _eye(_value(x).shape[-1], x)), axis=-1)


def _solve(A, B, left=True):
    """``A^{-1} B`` (``B A^{-1}`` when not ``left``), recorded as ``_linalg_solve_ex``'s node."""
    return linalg_solve_ex(A, B, left=left)[0]


def _solve_triangular(A, B, upper, left=True):
    """``linalg_solve_triangular`` (linalg_solvers.py, which builds on this module: looked
    up by name, not imported), as PyTorch's formulas solve with a factor."""
    from .registry import ATEN_OPS  # noqa: PLC0415

    return ATEN_OPS["aten.linalg_solve_triangular.default"](A, B, upper=upper, left=left)


def _scale_rows(x, s):
    """``x * s.unsqueeze(-1)``."""
    return L.mul(x, L.unsqueeze(s, axis=-1))


def _scale_cols(x, s):
    """``x * s.unsqueeze(-2)``."""
    return L.mul(x, L.unsqueeze(s, axis=-2))


# -- VJPs ------------------------------------------------------------------------------------------
def _det_vjp(g, ans, A):
    # A: linalg_det_backward(grad, result, A, LU, pivots)
    gd, det = g[0], ans[0]
    a = _value(A)
    if a.size == 0:
        return _zeros_like(a)
    if not _recording(gd, A):
        # without create_graph PyTorch solves with the forward's LU, a zero pivot moved to eps
        lu, piv = ans[1], ans[2]
        xp = array_module(lu)
        eps = np.finfo(lu.dtype).eps
        d = xp.diagonal(lu, 0, -2, -1)
        lu_ = lu + K.batch_f_contig(xp.where(d == 0, lu.dtype.type(eps), 0)[..., None] * xp.eye(d.shape[-1],
                                                                                                dtype=lu.dtype))
        with np.errstate(all="ignore"):
            rhs = (gd * det)[..., None, None] * xp.eye(a.shape[-1], dtype=a.dtype)
        return K.lu_solve(lu_, piv, rhs, adjoint=not K.use_transpose(a))
    # Note [det's second derivative]: PyTorch takes the adjugate from an SVD where |det| < 100 eps
    # (masked_fmap, batch element by batch element); gradcli takes it for the whole batch when any
    # element is singular: the same gradient, as the formula holds for every matrix
    eps = np.finfo(a.dtype).eps
    if np.any(np.abs(np.asarray(_value(det))) < 100 * eps):
        U, S, Vh = linalg_svd(A)
        alpha = L.mul(L.mul(linalg_det(U)[0], linalg_det(Vh)[0]), gd)
        D = L.mul(L.unsqueeze(alpha, axis=-1), _others_product(S))
        return _mm(_scale_cols(U, D), Vh)
    return _solve(_mH(A), _times_eye(L.mul(gd, det), A))


def _others_product(S):
    """``prod_safe_zeros_backward(1, S, -1)``: for each i the product of the other entries of S
    (each row of a matrix holding S with its own entry made 1, multiplied out)."""
    from .reduce_core import prod_dim  # noqa: PLC0415

    n = _value(S).shape[-1]
    eye = _eye(n, S)
    return prod_dim(L.add(L.mul(L.unsqueeze(S, axis=-2), 1 - eye), eye), dim=-1)


defvjp(linalg_det, _det_vjp)


def _slogdet_vjp(g, ans, A):
    # A: slogdet_backward(grad_sign, grad_logabsdet, A, sign, LU, pivots); real: grad_sign unused
    gl = g[1]
    a = _value(A)
    if a.size == 0:
        return _zeros_like(a)
    if _undefined(gl):
        return None
    if not _recording(gl, A):
        xp = array_module(a)
        rhs = _value(gl)[..., None, None] * xp.eye(a.shape[-1], dtype=a.dtype)
        return K.lu_solve(ans[2], ans[3], rhs, adjoint=not K.use_transpose(a))
    return _solve(_mH(A), _times_eye(gl, A))


defvjp(linalg_slogdet, _slogdet_vjp)


# A: -at::matmul(inverse.mH(), at::matmul(grad, inverse.mH()))
defvjp(linalg_inv_ex, lambda g, ans, A, check_errors=False: L.neg(_mm(_mH(ans[0]), _mm(g[0], _mH(ans[0])))))


def _solve_vjp(g, ans, A, B, output_mask, left=True, check_errors=False):
    # A, B: linalg_solve_backward(grad, result, A, LU, pivots, left, grad_input_mask[1])
    gX, X = g[0], ans[0]
    a, b = _value(A), _value(B)
    vector = _vector_rhs(a.shape, _value(gX).shape)
    axis = -1 if left else -2
    gX_ = L.unsqueeze(gX, axis=axis) if vector else gX
    if not _recording(gX, A, B):
        gB_ = K.lu_solve(_value(ans[1]), _value(ans[2]), gX_, adjoint=True, left=left)
    else:
        gB_ = _solve(_mH(A), gX_, left=left)
    gA = gB = None
    if output_mask[0]:
        X_ = L.unsqueeze(X, axis=axis) if vector else X
        gA = L.unbroadcast(L.neg(_mm(gB_, _mH(X_)) if left else _mm(_mH(X_), gB_)), a.shape)
    if output_mask[1]:
        gB = L.unbroadcast(L.squeeze(gB_, axis=axis) if vector else gB_, b.shape)
    return [gA, gB]


defvjp_joint(linalg_solve_ex, _solve_vjp, (True, True))


def _cholesky_vjp(g, ans, self, upper=False, check_errors=False):
    # self: cholesky_backward(grad, upper, L)
    gL, Lo = g[0], ans[0]
    if _value(Lo).size == 0:
        return _zeros_like(_value(self))
    if upper:
        Lo, gL = _mH(Lo), _mH(gL)
    gA = _tril(_mm(_mH(Lo), gL))
    gA = L.mul(L.add(gA, _mH(_tril(gA, -1))), np.asarray(0.5, _value(gA).dtype))
    gA = _solve_triangular(_mH(Lo), gA, upper=True)
    return _solve_triangular(Lo, gA, upper=False, left=False)


defvjp(linalg_cholesky_ex, _cholesky_vjp)


def _qr_vjp(g, ans, A, mode="reduced"):
    # A: linalg_qr_backward(grad_Q, grad_R, Q, R, mode)
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use "
                           "linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.")
    gQ, gR = g
    Q, R = ans
    if _value(A).size == 0:
        return _zeros_like(_value(A))
    m, n = _value(Q).shape[-2], _value(R).shape[-1]
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    has_q, has_r = not _undefined(gQ), not _undefined(gR)
    if not has_q and not has_r:
        return None
    if has_q:
        gA = L.sub(_mm(gR, _mH(R)), _mm(_mH(Q), gQ)) if has_r else L.neg(_mm(_mH(Q), gQ))
    else:
        gA = _mm(gR, _mH(R))
    half = np.asarray(0.5, _value(gA).dtype)
    if m >= n:
        u = _triu(gA)                          # syminvadj(triu(gA)): X + X^H, its diagonal halved
        sym = L.add(u, _mH(u))
        sym = L.sub(sym, L.mul(_diag_embed(_diagonal(sym)), half))
        gA = _mm(Q, sym)
        if has_q:
            gA = L.add(gA, gQ)
        return _solve_triangular(_mH(R), gA, upper=False, left=False)
    neg = L.neg(gA)
    gA = _mm(Q, _tril(L.sub(neg, _mH(neg))))   # trilImInvAdjSkew(-gA), real
    from .shape import slice_  # noqa: PLC0415

    R1 = slice_(R, dim=-1, start=0, end=m)
    gA = _solve_triangular(_mH(R1), gA, upper=False, left=False)
    v = _value(gA)
    gA = L.concat(gA, array_module(v).zeros(v.shape[:-1] + (n - m,), v.dtype), axis=-1)
    if has_r:
        gA = L.add(gA, _mm(Q, gR))
    return gA


defvjp(linalg_qr, _qr_vjp)


def _svd_vjp(g, ans, A, full_matrices=False, compute_uv=True, driver=None):
    # A: svd_backward(gU narrowed to k columns when full_matrices, gS, gVh narrowed to k rows, U, S, Vh)
    gU, gS, gVh = g
    U, S, Vh = ans
    if _value(A).size == 0:
        return _zeros_like(_value(A))
    if not compute_uv:
        raise RuntimeError("_linalg_svd: the backward needs U and Vh, and compute_uv=False computed neither "
                           "(torch.linalg.svdvals passes compute_uv=True when its input requires grad)")
    k = _value(S).shape[-1]
    has_u, has_v, has_s = not _undefined(gU), not _undefined(gVh), not _undefined(gS)
    if not (has_u or has_v or has_s):
        return None
    if full_matrices:
        from .shape import slice_  # noqa: PLC0415

        U, Vh = slice_(U, dim=-1, start=0, end=k), slice_(Vh, dim=-2, start=0, end=k)
        gU = slice_(gU, dim=-1, start=0, end=k) if has_u else gU
        gVh = slice_(gVh, dim=-2, start=0, end=k) if has_v else gVh
    m, n = _value(U).shape[-2], _value(Vh).shape[-1]
    if not has_u and not has_v:                # svdvals: U diag(gS) Vh
        return _mm(U, _scale_rows(Vh, gS)) if m >= n else _mm(_scale_cols(U, gS), Vh)
    S2 = L.mul(S, S)
    E = L.add(L.sub(L.unsqueeze(S2, axis=-2), L.unsqueeze(S2, axis=-1)), _eye(k, S))
    if has_u:
        UhgU = _mm(_mH(U), gU)
        UhgU = L.sub(UhgU, _mH(UhgU))
    if has_v:
        VhgV = _mm(Vh, _mH(gVh))
        VhgV = L.sub(VhgV, _mH(VhgV))
    if has_u and has_v:
        gA = L.div(L.add(_scale_cols(UhgU, S), _scale_rows(VhgV, S)), E)
    elif has_u:
        gA = _scale_cols(L.div(UhgU, E), S)
    else:
        gA = _scale_rows(L.div(VhgV, E), S)
    if has_s:
        gA = L.add(gA, _diag_embed(gS))
    if m > n and has_u:
        gA = _mm(U, gA)
        gUSinv = L.div(gU, L.unsqueeze(S, axis=-2))
        gA = L.sub(L.add(gA, gUSinv), _mm(U, _mm(_mH(U), gUSinv)))
        return _mm(gA, Vh)
    if m < n and has_v:
        gA = _mm(gA, Vh)
        SinvgVh = L.div(gVh, L.unsqueeze(S, axis=-1))
        gA = L.sub(L.add(gA, SinvgVh), _mm(_mm(SinvgVh, _mH(Vh)), Vh))
        return _mm(U, gA)
    return _mm(U, _mm(gA, Vh)) if m >= n else _mm(_mm(U, gA), Vh)


defvjp(linalg_svd, _svd_vjp)


def _eigh_vjp(g, ans, A, UPLO="L", compute_v=True):  # noqa: N803
    # A: linalg_eig_backward(grads[0], grads[1], eigenvalues, eigenvectors, /*is_hermitian=*/true)
    gL, gV = g
    Lv, V = ans
    if _value(A).size == 0:
        return _zeros_like(_value(A))
    if not compute_v:
        raise RuntimeError("_linalg_eigh: the backward needs the eigenvectors, and compute_v=False computed none "
                           "(torch.linalg.eigvalsh passes compute_v=True when its input requires grad)")
    has_l, has_v = not _undefined(gL), not _undefined(gV)
    if not has_l and not has_v:
        return None
    if not has_v:                              # eigvalsh: V diag(gL) V^H
        return _mm(_scale_cols(V, gL), _mH(V))
    n = _value(Lv).shape[-1]
    VhgV = _mm(_mH(V), gV)
    VhgV = L.mul(L.sub(VhgV, _mH(VhgV)), np.asarray(0.5, _value(VhgV).dtype))
    E = L.add(L.sub(L.unsqueeze(Lv, axis=-2), L.unsqueeze(Lv, axis=-1)), _eye(n, Lv))
    gA = L.div(VhgV, E)
    if has_l:
        gA = L.add(gA, _diag_embed(gL))        # (the skew part's diagonal is zero)
    return _mm(V, _mm(gA, _mH(V)))


defvjp(linalg_eigh, _eigh_vjp)
