"""Core ATen elementwise math: trigonometry, logarithms, rounding, ``elu``/``leaky_relu``,
and the binary ops (``atan2``, ``hypot``, ``maximum``, ``pow``, ``fmod``, ``div`` with a rounding
mode, ``clamp``).

Formulas follow PyTorch 2.13's ``tools/autograd/derivatives.yaml``; the comment above each
VJP names the formula there. Integer and bool inputs follow PyTorch's kernels: the
transcendental ops compute in the default float dtype, the rounding ops keep an integer
dtype and refuse bool.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.atan2.default"](np.array([1.0]), np.array([1.0]))
    array([0.78539816])
"""
from __future__ import annotations

import math

import numpy as np

from .. import library as L
from ..aten_kernels._common import check_dtype, host_erf, host_erfinv
from ..library import _value
from ...autograd.tensor import Tensor
from .pointwise import as_dtype, div_scalar, masked_fill, pow_tensor_scalar, rsqrt, scalar, zeros
from .promotion import cast, result_type, to_float
from ..core import defbranch
from .registry import ELEMENTWISE, aten, defvjp, defvjp_joint, not_differentiable


def _float_unary(name, node, fn, saves=True):
    """``name(Tensor self) -> Tensor`` computing ``fn`` in self's float dtype (the default
    float dtype for integer and bool inputs, as PyTorch's unary float ops)."""
    def forward(self):
        dt = to_float(np.dtype(self.dtype))
        with np.errstate(all="ignore"):       # NaN and inf outside the domain, as PyTorch
            return as_dtype(fn(cast(self, dt)), dt)
    forward.__name__ = name
    return aten(f"{name}(Tensor self) -> Tensor", node, saves=saves, meta=ELEMENTWISE)(forward)


def _c(value, like):
    """A constant in ``like``'s dtype (a gradient or an input, array or Tensor)."""
    return scalar(value, _value(like))


def _erf(x):
    """erf elementwise in x's dtype (math.erf per element: NumPy has no erf ufunc)."""
    return host_erf(x)



acos = _float_unary("acos", "AcosBackward0", np.arccos)
acosh = _float_unary("acosh", "AcoshBackward0", np.arccosh)
asin = _float_unary("asin", "AsinBackward0", np.arcsin)
asinh = _float_unary("asinh", "AsinhBackward0", np.arcsinh)
atan = _float_unary("atan", "AtanBackward0", np.arctan)
atanh = _float_unary("atanh", "AtanhBackward0", np.arctanh)
cos = _float_unary("cos", "CosBackward0", np.cos)
cosh = _float_unary("cosh", "CoshBackward0", np.cosh)
sin = _float_unary("sin", "SinBackward0", np.sin)
sinh = _float_unary("sinh", "SinhBackward0", np.sinh)
tan = _float_unary("tan", "TanBackward0", np.tan)
erf = _float_unary("erf", "ErfBackward0", _erf)
erfinv = _float_unary("erfinv", "ErfinvBackward0", host_erfinv)      # Note [an accurate erfinv]
expm1 = _float_unary("expm1", "Expm1Backward0", np.expm1)
log10 = _float_unary("log10", "Log10Backward0", np.log10)
log1p = _float_unary("log1p", "Log1PBackward0", np.log1p)
log2 = _float_unary("log2", "Log2Backward0", np.log2)
reciprocal = _float_unary("reciprocal", "ReciprocalBackward0", np.reciprocal)


# self: grad * -((-self * self + 1).rsqrt()).conj()
defvjp(acos, lambda g, ans, self: L.mul(g, L.neg(rsqrt(L.add(L.mul(L.neg(self), self), _c(1, self))))))
# self: grad * (self * self - 1).rsqrt() (real inputs)
defvjp(acosh, lambda g, ans, self: L.mul(g, rsqrt(L.sub(L.mul(self, self), _c(1, self)))))
# self: grad * (-self * self + 1).rsqrt().conj()
defvjp(asin, lambda g, ans, self: L.mul(g, rsqrt(L.add(L.mul(L.neg(self), self), _c(1, self)))))
# self: grad * (self.pow(2) + 1).rsqrt().conj()
defvjp(asinh, lambda g, ans, self: L.mul(g, rsqrt(L.add(pow_tensor_scalar(self, exponent=2), _c(1, self)))))
# self: grad / (self * self + 1).conj()
defvjp(atan, lambda g, ans, self: L.div(g, L.add(L.mul(self, self), _c(1, self))))
# self: grad * 1 / (1 - self.pow(2)).conj()
defvjp(atanh, lambda g, ans, self: L.div(g, L.sub(_c(1, self), pow_tensor_scalar(self, exponent=2))))
# self: grad * -self.sin().conj()
defvjp(cos, lambda g, ans, self: L.mul(g, L.neg(sin(self))))
# self: grad * self.sinh().conj()
defvjp(cosh, lambda g, ans, self: L.mul(g, sinh(self)))
# self: grad * self.cos().conj()
defvjp(sin, lambda g, ans, self: L.mul(g, cos(self)))
# self: grad * self.cosh().conj()
defvjp(sinh, lambda g, ans, self: L.mul(g, cosh(self)))
# self: grad * (1 + result.pow(2)).conj()
defvjp(tan, lambda g, ans, self: L.mul(g, L.add(pow_tensor_scalar(ans, exponent=2), _c(1, ans))))
# self: 2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad
defvjp(erf, lambda g, ans, self: L.mul(L.mul(L.exp(L.neg(pow_tensor_scalar(self, exponent=2))),
                                             _c(2.0 / math.sqrt(math.pi), self)), g))
# self: (M_PI_4 * M_2_SQRTPI) * exp(self.erfinv().pow(2)) * grad
defvjp(erfinv, lambda g, ans, self: L.mul(L.mul(_c(0.785398163397448309616 * 1.12837916709551257390, self),
                                                L.exp(pow_tensor_scalar(erfinv(self), exponent=2))), g))
# self: grad * (result.conj() + 1)
defvjp(expm1, lambda g, ans, self: L.mul(g, L.add(ans, _c(1, ans))))
# self: grad / (self.conj() * 2.3025850929940456)
defvjp(log10, lambda g, ans, self: L.div(g, L.mul(self, _c(2.3025850929940456, self))))
# self: log1p_backward(grad, self) = grad / (self + 1)
defvjp(log1p, lambda g, ans, self: L.div(g, L.add(self, _c(1, self))))
# self: grad / (self.conj() * 0.6931471805599453)
defvjp(log2, lambda g, ans, self: L.div(g, L.mul(self, _c(0.6931471805599453, self))))
# self: -grad * (result * result).conj()
defvjp(reciprocal, lambda g, ans, self: L.mul(L.neg(g), L.mul(ans, ans)))


# -- rounding: integer inputs keep their dtype, bool is refused, the gradient is zero ---------------
def _rounding(name, node, fn):
    def forward(self):
        check_dtype(f"{name}", self, "iuf", "a non-bool")
        if np.dtype(self.dtype).kind in "iu":
            return np.array(self, copy=True)
        return as_dtype(fn(self), self.dtype)
    forward.__name__ = name
    op = aten(f"{name}(Tensor self) -> Tensor", node, saves=False, meta=ELEMENTWISE)(forward)
    defvjp(op, lambda g, ans, self: zeros(self.shape, g))       # self: zeros_like(grad)
    return op


ceil = _rounding("ceil", "CeilBackward0", np.ceil)
floor = _rounding("floor", "FloorBackward0", np.floor)
round_ = _rounding("round", "RoundBackward0", np.round)      # half to even, as std::nearbyint
trunc = _rounding("trunc", "TruncBackward0", np.trunc)


@aten("sign(Tensor self) -> Tensor", "SignBackward0", saves=False, meta=ELEMENTWISE)
def sign(self):
    if np.dtype(self.dtype).kind == "b":
        return np.array(self, copy=True)
    out = np.sign(self)
    return as_dtype(np.where(np.isnan(out), 0, out) if out.dtype.kind == "f" else out, self.dtype)  # sign(nan) is 0


defvjp(sign, lambda g, ans, self: zeros(self.shape, g))        # self: zeros_like(grad)


def _angle(x):
    """angle of a real number: pi below zero, 0 at or above it (-0.0 included), NaN kept."""
    return np.where(np.isnan(x), x, np.where(x < 0, np.pi, 0.0))


def _check_real(name, fn):
    def checked(x):
        if np.dtype(x.dtype).kind == "c":
            raise TypeError(f"{name}: not implemented for {x.dtype} inputs (gradcli takes real inputs only)")
        return fn(x)
    return checked


angle = _float_unary("angle", "AngleBackward0", _check_real("angle", _angle))
# self: angle_backward(grad, self): zeros_like(self) for a real self
defvjp(angle, lambda g, ans, self: zeros(self.shape, g))


# -- elu and leaky_relu, with their backward ops (Note [activation backwards as ops]) -------------
@aten("elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor", "EluBackward0",
      meta=ELEMENTWISE)
def elu(self, alpha=1, scale=1, input_scale=1):
    check_dtype("elu", self)
    with np.errstate(over="ignore"):
        neg = np.expm1(self * input_scale) * (alpha * scale)
    return as_dtype(np.where(self <= 0, neg, self * scale), self.dtype)


@aten("elu_backward(Tensor grad_output, Scalar alpha, Scalar scale, Scalar input_scale, bool is_result, "
      "Tensor self_or_result) -> Tensor", "EluBackwardBackward0", meta=ELEMENTWISE)
def elu_backward(grad_output, self_or_result, alpha, scale, input_scale, is_result):
    dt = result_type(grad_output, self_or_result)
    check_dtype("elu_backward", np.empty(0, dt))
    x = self_or_result
    if is_result:      # the result of an in-place elu: grad * input_scale * (result + alpha * scale)
        neg = grad_output * input_scale * (x + alpha * scale)
    else:
        with np.errstate(over="ignore"):
            neg = grad_output * (input_scale * alpha * scale) * np.exp(x * input_scale)
    return as_dtype(np.where(x <= 0, neg, grad_output * scale), dt)


# self: elu_backward(grad, alpha, scale, input_scale, /* is_result */ false, self)
defvjp(elu, lambda g, ans, self, alpha=1, scale=1, input_scale=1: elu_backward(
    g, self, alpha=alpha, scale=scale, input_scale=input_scale, is_result=False))


def _elu_double_backward(gg, ans, go, x, alpha, scale, input_scale, is_result):
    # elu_double_backward(grad, grad_output, alpha, scale, input_scale, is_result, self_or_result):
    # is_result: grad * grad_output * input_scale * (x < 0); else
    # elu_backward(grad * grad_output * input_scale, ..., x) * (x < 0)
    neg = (_value(x) < 0).astype(_value(gg).dtype)
    inner = L.mul(L.mul(gg, go), _c(input_scale, gg))
    if is_result:
        return L.mul(inner, neg)
    return L.mul(elu_backward(inner, x, alpha=alpha, scale=scale, input_scale=input_scale, is_result=False), neg)


# grad_output: elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result)
# self_or_result: elu_double_backward(grad, grad_output, alpha, scale, input_scale, is_result, self_or_result)
defvjp(elu_backward,
       lambda gg, ans, go, x, alpha, scale, input_scale, is_result: elu_backward(
           gg, x, alpha=alpha, scale=scale, input_scale=input_scale, is_result=is_result),
       _elu_double_backward)


@aten("leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor", "LeakyReluBackward0", meta=ELEMENTWISE)
def leaky_relu(self, negative_slope=0.01):
    check_dtype("leaky_relu", self)
    return as_dtype(np.where(self > 0, self, self * negative_slope), self.dtype)


@aten("leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) "
      "-> Tensor", "LeakyReluBackwardBackward0", meta=ELEMENTWISE, iterator_order=(1, 0))
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    dt = result_type(grad_output, self)
    check_dtype("leaky_relu_backward", np.empty(0, dt))
    return as_dtype(np.where(self > 0, grad_output, grad_output * negative_slope), dt)


# self: leaky_relu_backward(grad, self, negative_slope, false)
defvjp(leaky_relu, lambda g, ans, self, negative_slope=0.01: leaky_relu_backward(
    g, self, negative_slope=negative_slope, self_is_result=False))
defbranch(leaky_relu, lambda self, negative_slope=0.01: self > 0)
# grad_output: leaky_relu_backward(grad, self, negative_slope, false); self: zeros_like(grad)
defvjp(leaky_relu_backward,
       lambda gg, ans, go, self, negative_slope, self_is_result: leaky_relu_backward(
           gg, self, negative_slope=negative_slope, self_is_result=False),
       lambda gg, ans, go, self, negative_slope, self_is_result: zeros(self.shape, gg))


# -- binary ops ------------------------------------------------------------------------------------
def _unbroadcast(g, like):
    return L.unbroadcast(g, tuple(like.shape))


def _binary_float(self, other):
    dt = to_float(result_type(self, other))
    return dt, cast(self, dt), cast(other, dt)


@aten("hypot(Tensor self, Tensor other) -> Tensor", "HypotBackward0", meta=ELEMENTWISE)
def hypot(self, other):
    dt = result_type(self, other)
    check_dtype("hypot", np.empty(0, dt))
    with np.errstate(all="ignore"):
        return as_dtype(np.hypot(cast(self, dt), cast(other, dt)), dt)


# self: grad * self / result; other: grad * other / result
defvjp(hypot, lambda g, ans, self, other: _unbroadcast(L.div(L.mul(g, self), ans), self),
       lambda g, ans, self, other: _unbroadcast(L.div(L.mul(g, other), ans), other))


@aten("atan2(Tensor self, Tensor other) -> Tensor", "Atan2Backward0", meta=ELEMENTWISE)
def atan2(self, other):
    dt, a, b = _binary_float(self, other)
    return as_dtype(np.arctan2(a, b), dt)


def _atan2_vjp(g, ans, self, other, output_mask):
    # atan2_backward(grad, self, other, grad_input_mask): recip = (self^2 + other^2).reciprocal();
    # self: grad * other * recip; other: grad * -self * recip
    recip = reciprocal(L.add(L.mul(self, self), L.mul(other, other)))
    return [_unbroadcast(L.mul(L.mul(g, other), recip), self) if output_mask[0] else None,
            _unbroadcast(L.mul(L.mul(g, L.neg(self)), recip), other) if output_mask[1] else None]



defvjp_joint(atan2, _atan2_vjp, (True, True))


def _atan2_out_meta(self, other, out):
    # the result has the inputs' broadcast shape (out's shape is not read) and out's dtype
    atan2_out.forward(np.zeros((), self.dtype), np.zeros((), other.dtype), np.zeros((), out.dtype))
    return [(tuple(np.broadcast_shapes(self.shape, other.shape)), np.dtype(out.dtype))]


@aten("atan2.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)", "Atan2Backward0",
      meta=_atan2_out_meta)
def atan2_out(self, other, out):
    # Note [out= overloads]: gradcli's graphs are functional: the result is a new tensor of out's
    # dtype (PyTorch writes it into out, resized); out's values are never read. As PyTorch,
    # the result's dtype must be one the computed dtype casts to, and no input may require grad.
    dt = to_float(result_type(self, other))
    odt = np.dtype(out.dtype)
    if {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}[odt.kind] < 2:
        raise TypeError(f"atan2.out: result type {dt} can't be cast to the desired output type {odt}")
    return as_dtype(np.arctan2(cast(self, dt), cast(other, dt)), odt)


atan2_out.view = False      # a new tensor (Note [out= overloads]), counted in the memory budget


class _OutOverload(type(atan2_out)):
    """An ``out=`` overload: as PyTorch, it refuses inputs that require grad (in grad mode) when
    called, and records nothing."""

    __slots__ = ()

    def __call__(self, /, *inputs, **args):
        from ...autograd.state import STATE  # noqa: PLC0415

        if STATE.grad_enabled and any(type(x) is Tensor and x.requires_grad for x in inputs):
            raise RuntimeError(f"{self.name}: functions with out=... arguments don't support automatic "
                               "differentiation, but one of the arguments requires grad (as PyTorch)")
        return super().__call__(*inputs, **args)


atan2_out.__class__ = _OutOverload
not_differentiable(atan2_out)


def _extremum(name, node, fn):
    def forward(self, other):
        dt = result_type(self, other)
        return as_dtype(fn(cast(self, dt), cast(other, dt)), dt)
    forward.__name__ = name
    return aten(f"{name}(Tensor self, Tensor other) -> Tensor", node, meta=ELEMENTWISE)(forward)


maximum = _extremum("maximum", "MaximumBackward0", np.maximum)
minimum = _extremum("minimum", "MinimumBackward0", np.minimum)


def _select_extremum(g, self, other, loses):
    # at::where(self == other, grad / 2, grad).masked_fill_(loses, 0)
    s, o = _value(self), _value(other)
    half = L.where(s == o, div_scalar(g, other=2), g)
    return masked_fill(half, np.broadcast_to(loses(s, o), half.shape), value=0)


# self: at::where(self == other, grad / 2, grad).masked_fill_(self < other, 0); other: (self > other)
defvjp(maximum, lambda g, ans, self, other: _unbroadcast(_select_extremum(g, self, other, np.less), self),
       lambda g, ans, self, other: _unbroadcast(_select_extremum(g, self, other, np.greater), other))
# self: ... masked_fill_(self > other, 0); other: ... masked_fill_(self < other, 0)
defvjp(minimum, lambda g, ans, self, other: _unbroadcast(_select_extremum(g, self, other, np.greater), self),
       lambda g, ans, self, other: _unbroadcast(_select_extremum(g, self, other, np.less), other))


def _power(base, exponent, dt):
    """base ** exponent in ``dt``. Note [integer powers]: an integer to a negative integer power
    is, as PyTorch's ``powi``, 1 for base 1, +-1 for base -1 and 0 otherwise (NumPy refuses it)."""
    with np.errstate(all="ignore"):
        if dt.kind not in "iu":
            return as_dtype(np.power(base, exponent), dt)
        base, exponent = np.broadcast_arrays(np.asarray(base, dt), np.asarray(exponent, dt))
        negative = exponent < 0
        out = np.power(base, np.where(negative, 0, exponent))
        odd = (np.abs(exponent) % 2) == 1
        small = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
        return as_dtype(np.where(negative, small, out), dt)


@aten("pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor", "PowBackward1", meta=ELEMENTWISE)
def pow_tensor_tensor(self, exponent):
    dt = result_type(self, exponent)
    return _power(cast(self, dt), cast(exponent, dt), dt)


@aten("pow.Scalar(Scalar self, Tensor exponent) -> Tensor", "PowBackward2", meta=ELEMENTWISE,
      own_layout=True)
def pow_scalar(exponent, self):
    dt = result_type(self, exponent)
    # PyTorch's pow(Scalar, Tensor) gives a row-major result whatever the exponent's layout
    out = _power(np.asarray(self, dt), cast(exponent, dt), dt)
    return out if out.ndim < 2 or out.flags.c_contiguous else out.copy(order="C")


def _pow_self_vjp(g, ans, self, exponent):
    # pow_backward_self(grad, self, exponent):
    # at::where(exponent == 0.0, at::zeros({}, grad.options()), grad * (exponent * at::pow(self, exponent - 1)))
    e = exponent
    inner = L.mul(g, L.mul(e, pow_tensor_tensor(self, L.sub(e, _c(1, e)))))
    return _unbroadcast(L.where(_value(e) == 0, _c(0, g), inner), self)


def _pow_exponent_vjp(g, ans, self, exponent):
    # pow_backward_exponent(grad, self, exponent, result):
    # grad * at::where(exponent >= 0 & self == 0, at::zeros({}), result * self.log())
    s = _value(self)
    zero = (_value(exponent) >= 0) & (s == 0)
    return _unbroadcast(L.mul(g, L.where(zero, _c(0, g), L.mul(ans, L.log(self)))), exponent)


defvjp(pow_tensor_tensor, _pow_self_vjp, _pow_exponent_vjp)


def _pow_scalar_vjp(g, ans, exponent, self):
    # pow_backward_exponent(grad, Scalar base, exponent, result): grad * (result * log(base)),
    # and zero where base == 0 and exponent >= 0
    if self == 0:
        return L.mul(g, L.where(_value(exponent) >= 0, _c(0, g), L.mul(ans, _c(-math.inf, g))))
    return L.mul(g, L.mul(ans, _c(math.log(self) if self > 0 else math.nan, g)))


defvjp(pow_scalar, lambda g, ans, exponent, self: _pow_scalar_vjp(g, ans, exponent, self))


# -- fmod, remainder, div with a rounding mode -------------------------------------------------------
def _check_int_divisor(name, dt, other):
    if dt.kind in "iu" and np.any(np.asarray(_value(other)) == 0):
        raise ValueError(f"{name}: integer division by zero (PyTorch raises ZeroDivisionError)")


def _modulo(name, fn):
    def forward(self, other):
        dt = result_type(self, other)
        check_dtype(name, np.empty(0, dt), "iuf", "a non-bool")
        _check_int_divisor(name, dt, other)
        with np.errstate(all="ignore"):
            return as_dtype(fn(cast(self, dt), cast(other, dt) if hasattr(other, "dtype") else other), dt)
    return forward


def _quotient_meta(name, float_without_mode=False):
    """The shape rule of an op that divides: broadcast shape, promoted dtype (no values read:
    the elementwise rule's zero stand-ins would divide by zero)."""
    def rule(self, other, rounding_mode="floor"):
        dt = result_type(self, other)
        if float_without_mode and rounding_mode is None:
            dt = to_float(dt)
        else:
            check_dtype(name, np.empty(0, dt), "iuf", "a non-bool")
        if float_without_mode and rounding_mode not in (None, "trunc", "floor"):
            _div_mode(np.zeros((), dt), 1, rounding_mode)
        shape = np.broadcast_shapes(tuple(self.shape), tuple(getattr(other, "shape", ())))
        return [(tuple(shape), dt)]
    return rule


_fmod, _remainder = _modulo("fmod", np.fmod), _modulo("remainder", np.remainder)
fmod_tensor = aten("fmod.Tensor(Tensor self, Tensor other) -> Tensor", "FmodBackward1",
                   meta=_quotient_meta("fmod"))(_fmod)
fmod_scalar = aten("fmod.Scalar(Tensor self, Scalar other) -> Tensor", "FmodBackward0", saves=False,
                   meta=_quotient_meta("fmod"))(_fmod)
remainder_tensor = aten("remainder.Tensor(Tensor self, Tensor other) -> Tensor", "RemainderBackward1",
                        meta=_quotient_meta("remainder"))(_remainder)
remainder_scalar = aten("remainder.Scalar(Tensor self, Scalar other) -> Tensor", "RemainderBackward0",
                        saves=False, meta=_quotient_meta("remainder"))(_remainder)
# self: grad (both overloads)
defvjp(fmod_scalar, lambda g, ans, self, other: g)
defvjp(remainder_scalar, lambda g, ans, self, other: g)


def _rounded_quotient(mode):
    def vjp(g, ans, self, other):
        # other: -grad * self.div(other, rounding_mode=mode)
        return _unbroadcast(L.mul(L.neg(g), div_tensor_mode(_value(self), _value(other), rounding_mode=mode)),
                            other)
    return vjp


# self: grad (summed to self's shape); other: -grad * self.div(other, /*rounding_mode=*/"trunc" | "floor")
defvjp(fmod_tensor, lambda g, ans, self, other: _unbroadcast(g, self), _rounded_quotient("trunc"))
defvjp(remainder_tensor, lambda g, ans, self, other: _unbroadcast(g, self), _rounded_quotient("floor"))


def _div_mode(self, other, rounding_mode):
    if rounding_mode not in (None, "trunc", "floor"):
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                         f"'{rounding_mode}'")
    dt = result_type(self, other)
    if rounding_mode is None:
        dt = to_float(dt)
        return as_dtype(np.true_divide(cast(self, dt), cast(other, dt)), dt)
    _check_int_divisor("div", dt, other)
    a = cast(self, dt)
    b = cast(other, dt) if hasattr(other, "dtype") else np.asarray(other, dt)
    with np.errstate(all="ignore"):
        if rounding_mode == "floor":
            return as_dtype(np.floor_divide(a, b), dt)
        if dt.kind in "iub":
            q = np.floor_divide(a, b)
            fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))      # C's truncation
            return as_dtype(np.where(fix, q + 1, q), dt)
        return as_dtype(np.trunc(np.true_divide(a, b)), dt)


@aten("div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor", "DivBackward2",
      meta=_quotient_meta("div", float_without_mode=True))
def div_tensor_mode(self, other, rounding_mode):
    return _div_mode(self, other, rounding_mode)


@aten("div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode) -> Tensor", "DivBackward3",
      saves=False, meta=_quotient_meta("div", float_without_mode=True))
def div_scalar_mode(self, other, rounding_mode):
    return _div_mode(self, other, rounding_mode)


def _div_self_vjp(g, ans, self, other, rounding_mode):
    # div_tensor_self_backward(grad, other, self.scalar_type(), rounding_mode): zeros with a
    # rounding mode (a step function), else grad / other
    if rounding_mode is not None:
        return zeros(self.shape, g)
    return _unbroadcast(L.div(g, other), self)


def _div_other_vjp(g, ans, self, other, rounding_mode):
    # div_tensor_other_backward(grad, self, other, rounding_mode): zeros with a rounding mode,
    # else -grad * ((self / other) / other)
    if rounding_mode is not None:
        return zeros(other.shape, g)
    return _unbroadcast(L.mul(L.neg(g), L.div(L.div(self, other), other)), other)


defvjp(div_tensor_mode, _div_self_vjp, _div_other_vjp)
defvjp(div_scalar_mode, lambda g, ans, self, other, rounding_mode: (
    zeros(self.shape, g) if rounding_mode is not None else div_scalar(g, other=other)))


# -- clamp ----------------------------------------------------------------------------------------------
def _clamp_check(name, lo, hi):
    if lo is None and hi is None:
        raise ValueError(f"{name}: At least one of 'min' or 'max' must not be None")


def _clamp(self, lo, hi, dt):
    out = cast(self, dt)
    if lo is not None:
        out = np.maximum(out, cast(lo, dt) if hasattr(lo, "dtype") else lo)
    if hi is not None:
        out = np.minimum(out, cast(hi, dt) if hasattr(hi, "dtype") else hi)
    return as_dtype(out, dt)


@aten("clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor", "ClampBackward1", meta=ELEMENTWISE)
def clamp(self, min=None, max=None):  # noqa: A002 - PyTorch's names
    _clamp_check("clamp", min, max)
    return _clamp(self, min, max, result_type(self, *[v for v in (min, max) if v is not None]))


def _clamp_scalar_vjp(g, ans, self, min=None, max=None):  # noqa: A002
    # clamp_backward(grad, self, min, max): grad where min <= self <= max, else 0
    s = _value(self)
    keep = np.ones(s.shape, bool)
    if min is not None:
        keep &= s >= min
    if max is not None:
        keep &= s <= max
    return L.where(keep, g, _c(0, g))


defvjp(clamp, _clamp_scalar_vjp)
defbranch(clamp, L.clamp.branch)                    # Note [Branches] in ops/core.py


@aten("clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor", "ClampBackward0",
      meta=ELEMENTWISE)
def clamp_tensor(self, min=None, max=None):  # noqa: A002
    _clamp_check("clamp", min, max)
    return _clamp(self, min, max, result_type(self, min, max))


def _clamp_tensor_vjp(g, ans, self, min, max, output_mask):  # noqa: A002
    s = _value(self)
    lo = None if min is None else _value(min)
    hi = None if max is None else _value(max)
    zero = _c(0, g)
    out = [None, None, None]
    if output_mask[0]:
        # clamp_backward(grad, self, min, max): where(self >= min & self <= max, grad, 0)
        keep = np.ones(np.broadcast_shapes(*[np.shape(v) for v in (s, lo, hi) if v is not None]), bool)
        if lo is not None:
            keep = keep & (s >= lo)
        if hi is not None:
            keep = keep & (s <= hi)
        out[0] = _unbroadcast(L.where(keep, g, zero), self)
    # clamp_backward_min_max: min gets grad where self < min (and min < max when both are given),
    # max where self > max (or max < min)
    if output_mask[1] and lo is not None:
        pick = (s < lo) & (lo < hi) if hi is not None else s < lo
        out[1] = _unbroadcast(L.where(pick, g, zero), min)
    if output_mask[2] and hi is not None:
        pick = (s > hi) | (hi < lo) if lo is not None else s > hi
        out[2] = _unbroadcast(L.where(pick, g, zero), max)
    return out


defvjp_joint(clamp_tensor, _clamp_tensor_vjp, (True, True, True))
