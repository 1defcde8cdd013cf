"""``aten.linalg_vector_norm``: a kernel of its own with PyTorch's backward formula.

Note [A norm's gradient at zero]: the op is outside the core opset and PyTorch decomposes it
(``sum(abs(x) ** p) ** (1 / p)``), so it could be written as a composite. But the
decomposition's derivative is not PyTorch's where the norm is 0: ``sqrt``'s gradient there is
``inf``, times the ``0`` of ``x``, NaN; PyTorch's ``linalg_vector_norm_backward``
(``norm_backward`` in FunctionsManual.cpp) masks it to 0. ``F.normalize`` of a zero vector
(swin_v2's cosine attention over padded tokens) then gives NaN gradients in the composite and
finite ones in PyTorch. The kernel below computes PyTorch's formula:

- ``ord == 0``: zero;
- ``ord == 1``: ``grad * sgn(self)``;
- ``ord == 2``: ``self * (grad / norm)``, 0 where the norm is 0;
- ``ord == +-inf``: ``grad * sgn(self)`` shared among the elements whose magnitude is the norm;
- any other ``ord``: ``self * |self| ** (ord - 2) * grad / norm ** (ord - 1)``, 0 where the
  norm is 0.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.linalg_vector_norm.default"](np.array([[3.0, 4.0], [0.0, 0.0]]), dim=[1])
    array([5., 0.])
"""
from __future__ import annotations

import math

import numpy as np

from ...devices import scalar
from .. import library as L
from ..library import _value
from .nn import _axes
from .reduce_core import _kept
from .registry import aten, defvjp


def _meta(self, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002 - PyTorch's name
    dt = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    if dt.kind != "f" or np.dtype(self.dtype).kind != "f":
        raise TypeError(f"linalg.vector_norm: Expected a floating point tensor as input. Got "
                        f"{np.dtype(self.dtype) if np.dtype(self.dtype).kind != 'f' else dt}")
    axes = _axes(dim, len(self.shape)) if len(self.shape) else ()
    p = float(ord)
    if (p < 0 or math.isinf(p)) and any(self.shape[a] == 0 for a in axes):
        raise IndexError(f"linalg.vector_norm cannot compute the {ord} norm on an empty tensor "
                         "because the operation does not have an identity")
    return [(_kept(tuple(self.shape), axes, keepdim), dt)]


@aten("linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, "
      "ScalarType? dtype=None) -> Tensor", "LinalgVectorNormBackward0", meta=_meta)
def linalg_vector_norm(self, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002
    (_, dt), = _meta(self, ord, dim, keepdim, dtype)
    x = np.abs(np.asarray(self, dt))
    axes = _axes(dim, x.ndim) if x.ndim else None
    p = float(ord)
    if p == 2:
        r = np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdim))
    elif p == math.inf:
        r = np.max(x, axis=axes, keepdims=keepdim)
    elif p == -math.inf:
        r = np.min(x, axis=axes, keepdims=keepdim)
    elif p == 0:
        r = np.sum(x != 0, axis=axes, keepdims=keepdim)
    elif p == 1:
        r = np.sum(x, axis=axes, keepdims=keepdim)
    else:
        r = np.sum(x ** p, axis=axes, keepdims=keepdim) ** (1.0 / p)
    return np.asarray(r, dt)


def _vjp(g, ans, self, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002
    # self: linalg_vector_norm_backward(grad, self, ord, result, dim, keepdim)
    shape = tuple(self.shape)
    axes = _axes(dim, len(shape)) if shape else ()
    p = float(ord)
    sdt = np.dtype(_value(self).dtype)
    if np.dtype(_value(g).dtype) != sdt:           # dtype=: the gradient comes back in self's
        g, ans = L.cast(g, dtype=sdt), L.cast(ans, dtype=sdt)
    kept = _kept(shape, axes, True)
    if not keepdim and shape:
        g, ans = L.reshape(g, shape=kept), L.reshape(ans, shape=kept)
    zero = scalar(0, sdt)
    if p == 0:
        return L.mul(self, zero)
    if p == 1:
        return L.mul(L.sgn(self), g)
    if math.isinf(p):
        mask = (np.abs(_value(self)) == _value(ans))
        count = np.sum(mask, axis=axes, keepdims=True).astype(sdt) if shape else scalar(1, sdt)
        return L.mul(L.mul(L.sgn(self), L.div(g, count)), mask.astype(sdt))
    at_zero = _value(ans) == 0
    if p == 2:
        scale = L.where(at_zero, zero, L.div(g, ans))
        return L.mul(self, scale)
    if p < 1:
        scale = L.mul(L.sgn(self), L.pow_(L.abs_(self), scalar(p - 1, sdt)))
    else:
        scale = L.mul(self, L.pow_(L.abs_(self), scalar(p - 2, sdt)))
    return L.mul(scale, L.where(at_zero, zero, L.div(g, L.pow_(ans, scalar(p - 1, sdt)))))


defvjp(linalg_vector_norm, _vjp)
