"""``_cdist_forward`` and its gradient as array functions: p-norm distances between the
rows of two batches of matrices, computed directly from the differences."""
import math

import numpy as np

from ._common import array_module, check_dtype


def cdist_shape(s1, s2, p):
    """The result shape ``batch + (P, R)``, checked as PyTorch checks it."""
    if len(s1) < 2 or len(s2) < 2:
        raise ValueError(f"cdist only supports at least 2D tensors, X1 got: {len(s1)}D, X2 got: {len(s2)}D")
    if s1[-1] != s2[-1]:
        raise ValueError(f"X1 and X2 must have the same number of columns. X1: {s1[-1]} X2: {s2[-1]}")
    if not p >= 0:
        raise ValueError("cdist only supports non-negative p values")
    try:
        batch = tuple(np.broadcast_shapes(tuple(s1[:-2]), tuple(s2[:-2])))
    except ValueError:
        raise ValueError(f"cdist: the batch dims of X1 {list(s1)} and X2 {list(s2)} do not broadcast") from None
    return batch + (s1[-2], s2[-2])


def _diff(x1, x2):
    return x1[..., :, None, :] - x2[..., None, :, :]


def cdist_forward(x1, x2, p, compute_mode=None):
    """``aten._cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor``:
    ``out[..., i, j] = ||x1[..., i, :] - x2[..., j, :]||_p`` (``p = 0`` counts the differing
    entries, ``p = inf`` takes the largest). Note [cdist computed directly]: PyTorch may use the
    matrix-product expansion for p = 2 on more than 25 rows (``compute_mode``); gradcli always
    computes from the differences, the more accurate of the two.

    >>> import numpy as np
    >>> cdist_forward(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]), 2.0).tolist()
    [[5.0]]
    """
    xp = array_module(x1, x2)
    check_dtype("cdist", x1, "f")
    if x1.dtype != x2.dtype:
        raise TypeError(f"cdist: X1 and X2 must have the same dtype, got {x1.dtype} and {x2.dtype}")
    shape = cdist_shape(tuple(x1.shape), tuple(x2.shape), p)
    a = xp.abs(_diff(x1, x2))
    if p == 0:
        out = (a != 0).sum(axis=-1).astype(x1.dtype)
    elif p == 1:
        out = a.sum(axis=-1)
    elif p == 2:
        out = xp.sqrt((a * a).sum(axis=-1))
    elif math.isinf(p):
        out = a.max(axis=-1, initial=0) if a.shape[-1] else xp.zeros(a.shape[:-1], x1.dtype)
    else:
        out = (a ** p).sum(axis=-1) ** (1.0 / p)
    return xp.ascontiguousarray(xp.broadcast_to(out, shape)).astype(x1.dtype, copy=False)


def cdist_backward(grad, x1, x2, p, result):
    """``_cdist_backward(grad, x1, x2, p, cdist)``: the gradient for ``x1`` (zero where the
    distance is zero, as PyTorch), summed over broadcast batch dims."""
    xp = array_module(grad, x1, x2)
    d = _diff(x1, x2)
    dist = result[..., None]
    if p == 0 or d.size == 0:
        w = xp.zeros_like(d)
    elif p == 1:
        w = xp.sign(d)
    elif p == 2:
        with np.errstate(divide="ignore", invalid="ignore"):
            w = xp.where(dist == 0, 0, d / dist)
    elif math.isinf(p):
        a = xp.abs(d)
        # every entry at the maximum gets the whole gradient (ties are not split), as PyTorch's
        w = xp.sign(d) * (a == dist)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            w = xp.sign(d) * xp.abs(d) ** (p - 1) / dist ** (p - 1)
        w = xp.where((dist == 0) | (d == 0), 0, w)
    g = (grad[..., None] * w).sum(axis=-2)
    lead = g.ndim - x1.ndim
    g = g.sum(axis=tuple(range(lead))) if lead else g
    keep = tuple(i for i, n in enumerate(x1.shape[:-2]) if n == 1 and g.shape[i] != 1)
    return (g.sum(axis=keep, keepdims=True) if keep else g).astype(x1.dtype, copy=False)
