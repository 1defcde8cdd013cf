"""Special and pointwise functions beyond the core opset: ``lgamma``, ``digamma``,
``polygamma``, ``erfc``, ``special_erfcx``, ``exp2``, the modified Bessel functions ``i0``,
``special_i0e``, ``special_i1``, ``special_i1e``, ``special_ndtri``, ``fmax``/``fmin``,
``signbit`` and ``nextafter``.

Kernels: ``aten_kernels/special.py`` (PyTorch's CPU algorithms in float64, NumPy only). The
VJPs are PyTorch 2.13's derivatives.yaml formulas (quoted above each), written with ATen ops so
that they record themselves under create_graph.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.lgamma.default"](np.array([0.5, 3.0]))
    array([0.57236494, 0.69314718])
"""
from __future__ import annotations

import math

import numpy as np

from .. import library as L
from ..aten_kernels import special as K
from ..aten_kernels._common import check_dtype
from ..library import _value
from .pointwise import as_dtype, masked_fill, pow_tensor_scalar, scalar, zeros
from .pointwise_core import _extremum, _float_unary, reciprocal, sign
from .promotion import cast, result_type, to_float
from .registry import ELEMENTWISE, aten, defvjp, not_differentiable

_M_2_SQRTPI = 1.12837916709551257390        # 2 / sqrt(pi)
_M_LN2 = 0.693147180559945309417


def _c(value, like):
    return scalar(value, _value(like))


lgamma = _float_unary("lgamma", "LgammaBackward0", K.lgamma)
digamma = _float_unary("digamma", "DigammaBackward0", K.digamma)
erfc = _float_unary("erfc", "ErfcBackward0", K.erfc)
special_erfcx = _float_unary("special_erfcx", "SpecialErfcxBackward0", K.erfcx)
exp2 = _float_unary("exp2", "Exp2Backward0", np.exp2)
i0 = _float_unary("i0", "I0Backward0", K.i0)
special_i0e = _float_unary("special_i0e", "SpecialI0EBackward0", K.i0e)
special_i1 = _float_unary("special_i1", "SpecialI1Backward0", K.i1)
special_i1e = _float_unary("special_i1e", "SpecialI1EBackward0", K.i1e)
special_ndtri = _float_unary("special_ndtri", "SpecialNdtriBackward0", K.ndtri)


@aten("polygamma(int n, Tensor self) -> Tensor", "PolygammaBackward0", meta=ELEMENTWISE)
def polygamma(self, n):
    if n < 0:
        raise ValueError("polygamma(n, x) does not support negative n.")
    dt = to_float(np.dtype(self.dtype))
    return as_dtype(K.polygamma(int(n), cast(self, dt)), dt)


# self: grad * digamma(self)
defvjp(lgamma, lambda g, ans, self: L.mul(g, digamma(self)))
# self: grad * polygamma(1, self)
defvjp(digamma, lambda g, ans, self: L.mul(g, polygamma(self, n=1)))
# self: grad * polygamma(n + 1, self)
defvjp(polygamma, lambda g, ans, self, n: L.mul(g, polygamma(self, n=n + 1)))
# self: -M_2_SQRTPI * exp(-(self.pow(2))) * grad
defvjp(erfc, lambda g, ans, self: L.mul(L.mul(_c(-_M_2_SQRTPI, self), L.exp(L.neg(pow_tensor_scalar(self, exponent=2)))),
                                        g))
# self: (2.0 * self * result - M_2_SQRTPI) * grad
defvjp(special_erfcx, lambda g, ans, self: L.mul(L.sub(L.mul(L.mul(_c(2.0, self), self), ans), _c(_M_2_SQRTPI, self)),
                                                 g))
# self: grad * result.conj() * M_LN2
defvjp(exp2, lambda g, ans, self: L.mul(L.mul(g, ans), _c(_M_LN2, g)))
# self: grad * at::special_i1(self)
defvjp(i0, lambda g, ans, self: L.mul(g, special_i1(self)))
# self: grad * (at::special_i1e(self) - self.sgn() * result)
defvjp(special_i0e, lambda g, ans, self: L.mul(g, L.sub(special_i1e(self), L.mul(sign(self), ans))))


def _not_tiny(self):
    s = _value(self)
    eps = float(np.finfo(s.dtype).eps)
    return np.abs(s) > eps, eps


def _i1_vjp(g, ans, self):
    # i1_backward(grad, self, result): safe_self = where(|self| > eps, self, eps);
    # grad * where(|self| > eps, safe_self.i0() - result * safe_self.reciprocal(), 0.5)
    keep, eps = _not_tiny(self)
    safe = L.where(keep, self, _c(eps, self))
    gradx = L.sub(i0(safe), L.mul(ans, reciprocal(safe)))
    return L.mul(g, L.where(keep, gradx, _c(0.5, self)))


def _i1e_vjp(g, ans, self):
    # i1e_backward(grad, self, result): as i1_backward with
    # gradx = special_i0e(safe_self) - result * (safe_self.sgn() + safe_self.reciprocal())
    keep, eps = _not_tiny(self)
    safe = L.where(keep, self, _c(eps, self))
    gradx = L.sub(special_i0e(safe), L.mul(ans, L.add(sign(safe), reciprocal(safe))))
    return L.mul(g, L.where(keep, gradx, _c(0.5, self)))


defvjp(special_i1, _i1_vjp)
defvjp(special_i1e, _i1e_vjp)
# self: grad * (M_PI_2 * M_SQRT2 * M_2_SQRTPI) * (result.square() * 0.5).exp()
defvjp(special_ndtri, lambda g, ans, self: L.mul(
    L.mul(g, _c(math.pi / 2 * math.sqrt(2.0) * _M_2_SQRTPI, g)),
    L.exp(L.mul(pow_tensor_scalar(ans, exponent=2), _c(0.5, ans)))))


# -- fmax, fmin: NaN loses to a number (maximum and minimum's forward, np.fmax / np.fmin) -----------------
fmax = _extremum("fmax", "FmaxBackward0", np.fmax)
fmin = _extremum("fmin", "FminBackward0", np.fmin)


def _unbroadcast(g, like):
    return L.unbroadcast(g, tuple(like.shape))


def _pick(g, self, other, wins, to_self):
    # PyTorch 2.13: self: grad.masked_fill(((self >= other) | other.isnan()).logical_not(), 0);
    # other: grad.masked_fill((self >= other) | other.isnan(), 0) (<= for fmin)
    s, o = _value(self), _value(other)
    with np.errstate(invalid="ignore"):
        chosen = np.broadcast_to(wins(s, o) | np.isnan(o), tuple(g.shape))
    return _unbroadcast(masked_fill(g, ~chosen if to_self else chosen, value=0), self if to_self else other)


defvjp(fmax, lambda g, ans, self, other: _pick(g, self, other, np.greater_equal, True),
       lambda g, ans, self, other: _pick(g, self, other, np.greater_equal, False))
defvjp(fmin, lambda g, ans, self, other: _pick(g, self, other, np.less_equal, True),
       lambda g, ans, self, other: _pick(g, self, other, np.less_equal, False))


# -- signbit (no gradient), nextafter ------------------------------------------------------------------------
@aten("signbit(Tensor self) -> Tensor", None, saves=False, meta=ELEMENTWISE)
def signbit(self):
    return as_dtype(np.signbit(self) if np.dtype(self.dtype).kind != "b" else np.zeros(np.shape(self), bool),
                    np.dtype(bool))


not_differentiable(signbit)


@aten("nextafter(Tensor self, Tensor other) -> Tensor", "NextafterBackward0", meta=ELEMENTWISE)
def nextafter(self, other):
    dt = result_type(self, other)
    check_dtype("nextafter", np.empty(0, dt))
    return as_dtype(np.nextafter(cast(self, dt), cast(other, dt)), dt)


# self: at::where(self != other, grad, 0); other: zeros_like(other)
defvjp(nextafter, lambda g, ans, self, other: _unbroadcast(
    L.where(np.broadcast_to(_value(self) != _value(other), tuple(g.shape)), g, _c(0, g)), self),
    lambda g, ans, self, other: zeros(other.shape, g))
