"""ATen elementwise ops: arithmetic, activations, ``where``.

Formulas follow PyTorch 2.13's ``tools/autograd/derivatives.yaml``; the
comment above each VJP names the formula there.
"""
from __future__ import annotations

import math

import numpy as np

from .. import aten_kernels as K
from ..aten_kernels._common import check_dtype
from .. import library as L
from ...devices import device as parse_device, device_of, scalar as _scalar
from ..library import _value
from .promotion import cast, result_type, to_float
from ..core import defbranch
from .registry import ELEMENTWISE, aten, defvjp


def as_dtype(x, dt):
    """The result as an array of dtype ``dt`` (NumPy may hand back a scalar)."""
    if not hasattr(x, "astype"):
        return np.asarray(x, dtype=dt)
    return x.astype(dt, copy=False)


def zeros(like_shape, like):
    """Zeros of ``like_shape`` with the dtype (and array type) of ``like`` (an array or a
    Tensor: zeros are a constant, they record nothing)."""
    return np.zeros_like(_value(like), shape=tuple(like_shape))


def scalar(value, like):
    """``value`` as a NumPy scalar of the dtype of ``like`` (an array, a Tensor or a dtype):
    keeps VJPs in the gradient's dtype, and is the constant operand that CuPy takes too
    (devices.scalar)."""
    return _scalar(value, getattr(like, "dtype", like))


def _check_alpha(name, dt, alpha):
    """``alpha_check``: a bool alpha only for a bool result, a float alpha not for integers."""
    if isinstance(alpha, (bool, np.bool_)) and dt.kind != "b":
        raise TypeError(f"{name}: Boolean alpha only supported for Boolean results (got alpha={alpha!r} "
                        f"for a {dt} result)")
    if dt.kind in "biu" and isinstance(alpha, (float, np.floating)):
        raise TypeError(f"{name}: for integral input tensors, argument alpha must not be a floating "
                        f"point number (got alpha={alpha!r})")


def _check_sub_bool(name, self, other):
    """``sub_check``: no subtraction with a bool operand (tensor or number)."""
    if any(result_type(x).kind == "b" for x in (self, other)):
        raise TypeError(f"{name}: subtraction with a bool tensor is not supported "
                        "(use logical_not or logical_xor)")


# -- arithmetic -------------------------------------------------------------------
@aten("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", "AddBackward0", saves=False,
      meta=ELEMENTWISE)
def add(self, other, alpha=1):
    dt = result_type(self, other)
    _check_alpha("add", dt, alpha)
    a, b = cast(self, dt), cast(other, dt)
    return as_dtype(np.add(a, b) if alpha == 1 else np.add(a, np.multiply(b, alpha)), dt)


# self: handle_r_to_c(self.scalar_type(), grad); other: maybe_multiply(grad, alpha)
defvjp(add, lambda g, ans, self, other, alpha=1: L.unbroadcast(g, self.shape),
       lambda g, ans, self, other, alpha=1: L.unbroadcast(g if alpha == 1 else L.mul(g, alpha),
                                                           other.shape))


@aten("sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", "SubBackward0", saves=False,
      meta=ELEMENTWISE)
def sub(self, other, alpha=1):
    _check_sub_bool("sub", self, other)
    dt = result_type(self, other)
    _check_alpha("sub", dt, alpha)
    a, b = cast(self, dt), cast(other, dt)
    return as_dtype(np.subtract(a, b) if alpha == 1 else np.subtract(a, np.multiply(b, alpha)), dt)


# self: handle_r_to_c(self.scalar_type(), grad); other: handle_r_to_c(other.scalar_type(), maybe_multiply(-grad, alpha))
defvjp(sub, lambda g, ans, self, other, alpha=1: L.unbroadcast(g, self.shape),
       lambda g, ans, self, other, alpha=1: L.unbroadcast(
           L.neg(g) if alpha == 1 else L.mul(L.neg(g), alpha), other.shape))


@aten("mul.Tensor(Tensor self, Tensor other) -> Tensor", "MulBackward0", meta=ELEMENTWISE)
def mul(self, other):
    dt = result_type(self, other)
    return as_dtype(np.multiply(cast(self, dt), cast(other, dt)), dt)


# self: mul_tensor_backward(grad, other, self.scalar_type()); other: mul_tensor_backward(grad, self, ...)
defvjp(mul, lambda g, ans, self, other: L.unbroadcast(L.mul(g, other), self.shape),
       lambda g, ans, self, other: L.unbroadcast(L.mul(g, self), other.shape))


@aten("mul.Scalar(Tensor self, Scalar other) -> Tensor", "MulBackward1", saves=False, meta=ELEMENTWISE)
def mul_scalar(self, other):
    dt = result_type(self, other)
    return as_dtype(np.multiply(cast(self, dt), other), dt)


# self: mul_tensor_backward(grad, other, self.scalar_type())
defvjp(mul_scalar, lambda g, ans, self, other: mul_scalar(g, other=other))


@aten("div.Tensor(Tensor self, Tensor other) -> Tensor", "DivBackward0", meta=ELEMENTWISE)
def div(self, other):
    dt = to_float(result_type(self, other))
    return as_dtype(np.true_divide(cast(self, dt), cast(other, dt)), dt)


# self: div_tensor_self_backward(grad, other, self.scalar_type()) = grad / other
# other: div_tensor_other_backward(grad, self, other) = -grad * ((self / other) / other)
defvjp(div, lambda g, ans, self, other: L.unbroadcast(L.div(g, other), self.shape),
       lambda g, ans, self, other: L.unbroadcast(
           L.mul(L.neg(g), L.div(L.div(self, other), other)), other.shape))


@aten("pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor", "PowBackward0", meta=ELEMENTWISE)
def pow_tensor_scalar(self, exponent):
    dt = result_type(self, exponent)
    return as_dtype(np.power(cast(self, dt), exponent), dt)


def _pow_vjp(g, ans, self, exponent):
    # pow_backward(grad, self, exponent): zero for exponent 0, else grad * (exponent * self.pow(exponent - 1))
    if exponent == 0:
        return zeros(self.shape, g)
    return L.mul(g, L.mul(pow_tensor_scalar(self, exponent=exponent - 1), exponent))


defvjp(pow_tensor_scalar, _pow_vjp)


@aten("rsqrt(Tensor self) -> Tensor", "RsqrtBackward0", meta=ELEMENTWISE)
def rsqrt(self):
    dt = to_float(self.dtype)
    x = cast(self, dt)
    return as_dtype(np.reciprocal(np.sqrt(x)), dt)


# self: -0.5 * grad * result.pow(3).conj()
defvjp(rsqrt, lambda g, ans, self: L.mul(L.mul(g, -0.5), pow_tensor_scalar(ans, exponent=3)))


# -- activations ---------------------------------------------------------------------
@aten("relu(Tensor self) -> Tensor", "ReluBackward0", meta=ELEMENTWISE)
def relu(self):
    check_dtype("relu", self, "iufc", "a non-bool")
    return np.maximum(self, scalar(0, self.dtype))


# self: threshold_backward(grad, result, 0): zero where result <= 0 (Note [Differentiable VJPs]
# in library.py: masks read values, gradients flow through ops)
defvjp(relu, lambda g, ans, self: threshold_backward(g, ans, threshold=0))
defbranch(relu, lambda self: self > 0)             # Note [Branches] in ops/core.py


# Note [activation backwards as ops]: each activation's backward is an ATen op of its own
# (its forward the one copy of the formula, its VJPs PyTorch's double-backward formulas), so
# a create_graph backward records PyTorch's node (ThresholdBackwardBackward0, ...).
@aten("threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor",
      "ThresholdBackwardBackward0", meta=ELEMENTWISE, iterator_order=(1, 0))
def threshold_backward(grad_output, self, threshold):
    dt = result_type(grad_output, self)
    check_dtype("threshold_backward", np.empty(0, dt), "iufc", "a non-bool")
    return as_dtype(np.where(self <= threshold, scalar(0, dt), grad_output), dt)


# grad_output: threshold_backward(grad, self, threshold); self: zeros_like(grad)
defvjp(threshold_backward,
       lambda gg, ans, go, self, threshold: threshold_backward(gg, self, threshold=threshold),
       lambda gg, ans, go, self, threshold: zeros(self.shape, gg))


@aten("sigmoid(Tensor self) -> Tensor", "SigmoidBackward0", meta=ELEMENTWISE)
def sigmoid(self):
    dt = to_float(self.dtype)
    x = cast(self, dt)
    return as_dtype(np.reciprocal(np.add(np.exp(np.negative(x)), 1)), dt)


@aten("sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor", "SigmoidBackwardBackward0",
      meta=ELEMENTWISE)
def sigmoid_backward(grad_output, output):
    dt = result_type(grad_output, output)
    check_dtype("sigmoid_backward", np.empty(0, dt))
    return as_dtype(grad_output * (1 - output) * output, dt)


# self: sigmoid_backward(grad, result) = grad * (1 - result) * result
defvjp(sigmoid, lambda g, ans, self: sigmoid_backward(g, ans))
# grad_output: sigmoid_backward(grad, output); output: grad * grad_output * (-2 * output + 1)
defvjp(sigmoid_backward,
       lambda gg, ans, go, y: sigmoid_backward(gg, y),
       lambda gg, ans, go, y: L.mul(L.mul(gg, go), L.add(L.mul(y, scalar(-2, y)), scalar(1, y))))


@aten("tanh(Tensor self) -> Tensor", "TanhBackward0", meta=ELEMENTWISE)
def tanh(self):
    dt = to_float(self.dtype)
    return as_dtype(np.tanh(cast(self, dt)), dt)


@aten("tanh_backward(Tensor grad_output, Tensor output) -> Tensor", "TanhBackwardBackward0", meta=ELEMENTWISE)
def tanh_backward(grad_output, output):
    dt = result_type(grad_output, output)
    check_dtype("tanh_backward", np.empty(0, dt))
    return as_dtype(grad_output * (1 - output * output), dt)


# self: tanh_backward(grad, result) = grad * (1 - result * result)
defvjp(tanh, lambda g, ans, self: tanh_backward(g, ans))
# grad_output: tanh_backward(grad, output); output: grad * (-2 * output * grad_output)
defvjp(tanh_backward,
       lambda gg, ans, go, y: tanh_backward(gg, y),
       lambda gg, ans, go, y: L.mul(gg, L.mul(L.mul(y, scalar(-2, y)), go)))


@aten("hardsigmoid(Tensor self) -> Tensor", "HardsigmoidBackward0", meta=ELEMENTWISE)
def hardsigmoid(self):
    check_dtype("hardsigmoid", self)
    return as_dtype(np.clip(self + 3, 0, 6) * (1 / 6), self.dtype)   # times 1/6, as the CPU kernel


# self: hardsigmoid_backward(grad, self): grad * one_sixth strictly inside (-3, 3), else 0;
# the CPU kernel's one_sixth is the float constant 1.0f / 6.0f, in every dtype
_ONE_SIXTH_F32 = float(np.float32(1.0) / np.float32(6.0))
defvjp(hardsigmoid, lambda g, ans, self: L.where(
    (_value(self) > -3) & (_value(self) < 3), L.mul(g, scalar(_ONE_SIXTH_F32, g)), scalar(0, g)),
    first_order_only="hardsigmoid_backward")
defbranch(hardsigmoid, lambda self: (self > -3) & (self < 3))


@aten("hardswish(Tensor self) -> Tensor", "HardswishBackward0", meta=ELEMENTWISE)
def hardswish(self):
    check_dtype("hardswish", self)
    return as_dtype(self * np.clip(self + 3, 0, 6) / 6, self.dtype)


# Note [hardswish boundaries] below: three pieces, -3 on the first and 3 on the last
defbranch(hardswish, lambda self: (self > -3).astype(np.int8) + (self >= 3))


@aten("hardswish_backward(Tensor grad_output, Tensor self) -> Tensor", "HardswishBackwardBackward0",
      meta=ELEMENTWISE)
def hardswish_backward(grad_output, self):
    # Note [hardswish boundaries]: as PyTorch 2.13's CPU kernel, 0 for x <= -3, grad * (x / 3 + 0.5)
    # strictly inside (-3, 3), grad for x >= 3 (so -3 gives 0 and 3 gives grad, not the
    # inner formula's -0.5 grad and 1.5 grad); tests/test_aten_ops.py has rows at +-3
    dt = result_type(grad_output, self)
    check_dtype("hardswish_backward", np.empty(0, dt))
    inner = grad_output * (self / 3 + 0.5)
    return as_dtype(np.where(self <= -3, scalar(0, dt), np.where(self < 3, inner, grad_output)), dt)


# self: hardswish_backward(grad, self)
defvjp(hardswish, lambda g, ans, self: hardswish_backward(g, self))
# grad_output: hardswish_backward(grad, self)
# self: at::where(at::logical_and(-3.0 < self, self < 3.0), grad * grad_output / 3.0, at::zeros({}, ...))
defvjp(hardswish_backward,
       lambda gg, ans, go, self: hardswish_backward(gg, self),
       lambda gg, ans, go, self: L.where((_value(self) > -3) & (_value(self) < 3),
                                         L.div(L.mul(gg, go), scalar(3, _value(gg))), scalar(0, _value(gg))))


@aten('gelu(Tensor self, *, str approximate="none") -> Tensor', "GeluBackward0", meta=ELEMENTWISE)
def gelu(self, approximate="none"):
    check_dtype("gelu", self)
    return K.gelu(self, approximate)


@aten('gelu_backward(Tensor grad_output, Tensor self, *, str approximate="none") -> Tensor',
      "GeluBackwardBackward0", meta=ELEMENTWISE)
def gelu_backward(grad_output, self, approximate="none"):
    check_dtype("gelu_backward", np.empty(0, result_type(grad_output, self)))
    return K.gelu_backward(grad_output, self, approximate)


# self: gelu_backward(grad, self, approximate)
defvjp(gelu, lambda g, ans, self, approximate="none": gelu_backward(g, self, approximate=approximate))

_SQRT1_2 = math.sqrt(0.5)
_KBETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
_KKAPPA = 0.044715
_KALPHA = (2.0 / math.sqrt(math.pi)) * _SQRT1_2 * 0.5


def _gelu_double_backward(gg, ans, go, self, approximate="none"):
    # gelu_double_backward(ggI, gO, self, approximate): ggI * gO * gelu''(self), written with
    # ops so that it records itself (a third derivative)
    x = self
    c = lambda v: scalar(v, x)  # noqa: E731
    if approximate == "tanh":
        # gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u), u = kBeta (x + kKappa x^3),
        # u' = kBeta (1 + 3 kKappa x^2); gelu'' = (1 - t^2) u' + 0.5 x (1 - t^2) (6 kBeta kKappa x - 2 t u'^2)
        x_sq = L.mul(x, x)
        t = L.tanh(L.mul(L.add(x, L.mul(c(_KKAPPA), L.mul(x_sq, x))), c(_KBETA)))
        du = L.mul(c(_KBETA), L.add(c(1), L.mul(c(3 * _KKAPPA), x_sq)))
        sech2 = L.sub(c(1), L.mul(t, t))
        inner = L.sub(L.mul(c(6 * _KBETA * _KKAPPA), x), L.mul(L.mul(c(2), t), L.mul(du, du)))
        d2 = L.add(L.mul(sech2, du), L.mul(L.mul(c(0.5), x), L.mul(sech2, inner)))
    else:
        # gelu' = cdf + x pdf, pdf = kAlpha exp(-x^2 / 2): gelu'' = pdf (2 - x^2)
        x_sq = L.mul(x, x)
        pdf = L.mul(c(_KALPHA), L.exp(L.mul(x_sq, c(-0.5))))
        d2 = L.mul(pdf, L.sub(c(2), x_sq))
    return L.mul(L.mul(gg, go), d2)


# grad_output: gelu_backward(grad, self, approximate); self: gelu_double_backward(grad, grad_output, self, ...)
defvjp(gelu_backward,
       lambda gg, ans, go, self, approximate="none": gelu_backward(gg, self, approximate=approximate),
       _gelu_double_backward)


# -- selection and copies ------------------------------------------------------------------
@aten("where.self(Tensor condition, Tensor self, Tensor other) -> Tensor", "WhereBackward0", meta=ELEMENTWISE)
def where(condition, self, other):
    # where expects a bool condition (uint8 is still accepted, deprecated, as PyTorch)
    cdt = np.asarray(condition).dtype if not hasattr(condition, "dtype") else np.dtype(condition.dtype)
    if cdt.kind != "b" and cdt != np.uint8:
        raise TypeError(f"where: expected condition to be a boolean tensor, but got a tensor with dtype {cdt}")
    dt = result_type(self, other)
    return as_dtype(np.where(condition, cast(self, dt), cast(other, dt)), dt)


# condition: non_differentiable; self: where(condition, grad, 0); other: where(condition, 0, grad)
defvjp(where, None,
       lambda g, ans, c, self, other: L.unbroadcast(L.where(c, g, scalar(0, g)), self.shape),
       lambda g, ans, c, self, other: L.unbroadcast(L.where(c, scalar(0, g), g), other.shape))


@aten("clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor", "CloneBackward0", saves=False,
      meta=ELEMENTWISE, own_layout=True)
def clone(self, memory_format=None):
    # preserve_format (the default) keeps the input's stride order, as ``copy(order="K")``
    # does; it matters to a later ``view`` (Note [view strides] in shape.py)
    if memory_format in (None, "preserve_format"):
        return self.copy(order="K")
    return self.copy()


defvjp(clone, lambda g, ans, self, memory_format=None: g)


@aten("alias(Tensor(a) self) -> Tensor(a)", "AliasBackward0", saves=False)
def alias(self):
    return self.view()


defvjp(alias, lambda g, ans, self: g)


# Note [detach in graphs]: `x.detach()` on the gradient path (iterative refinement,
# stop-gradient targets) records no node in PyTorch: its result is a new leaf that
# does not require grad, so the gradient stops there. gradcli's op does the same.
@aten("detach(Tensor(a) self) -> Tensor(a)", "DetachBackward0", saves=False,
      differentiable_outputs=[False])
def detach(self):
    return self.view()


defvjp(detach, None)


# -- more unary and scalar-operand ops seen in traced models --------------------------------
def _unary_float(fn):
    def forward(self):
        dt = to_float(self.dtype)
        return as_dtype(fn(cast(self, dt)), dt)
    forward.__doc__ = fn.__doc__
    return forward


def _neg(self):
    check_dtype("neg", self, "iufc", "a non-bool")
    return np.negative(self)


def _abs(self):
    check_dtype("abs", self, "iufc", "a non-bool")
    return np.abs(self)


neg = aten("neg(Tensor self) -> Tensor", "NegBackward0", saves=False,
           meta=ELEMENTWISE)(_neg)
exp = aten("exp(Tensor self) -> Tensor", "ExpBackward0", meta=ELEMENTWISE)(_unary_float(np.exp))
log = aten("log(Tensor self) -> Tensor", "LogBackward0", meta=ELEMENTWISE)(_unary_float(np.log))
sqrt = aten("sqrt(Tensor self) -> Tensor", "SqrtBackward0", meta=ELEMENTWISE)(_unary_float(np.sqrt))
abs_ = aten("abs(Tensor self) -> Tensor", "AbsBackward0", meta=ELEMENTWISE)(_abs)
defvjp(neg, lambda g, ans, self: L.neg(g))                                   # -grad
defvjp(exp, lambda g, ans, self: L.mul(g, ans))                              # grad * result
defvjp(log, lambda g, ans, self: L.div(g, self))                             # grad.div(self)
defvjp(sqrt, lambda g, ans, self: L.div(g, L.mul(ans, scalar(2, ans))))      # grad / (2 * result)
defvjp(abs_, lambda g, ans, self: L.mul(g, np.sign(_value(self)).astype(g.dtype)))  # grad * self.sgn()
defbranch(abs_, np.sign)


@aten("silu(Tensor self) -> Tensor", "SiluBackward0", meta=ELEMENTWISE)
def silu(self):
    check_dtype("silu", self)
    return as_dtype(self / (1 + np.exp(-self)), self.dtype)


def _silu_vjp(g, ans, self):
    # silu_backward(grad, self): grad * sigmoid(x) * (1 + x * (1 - sigmoid(x))), with ops
    s = L.sigmoid(self)
    one = scalar(1, s)
    return L.mul(g, L.mul(s, L.add(one, L.mul(self, L.sub(one, s)))))


defvjp(silu, _silu_vjp)


@aten("hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor", "HardtanhBackward0",
      meta=ELEMENTWISE)
def hardtanh(self, min_val=-1, max_val=1):
    check_dtype("hardtanh", self, "iufc", "a non-bool")
    return as_dtype(np.minimum(np.maximum(self, min_val), max_val), self.dtype)


@aten("hardtanh_backward(Tensor grad_output, Tensor self, Scalar min_val, Scalar max_val) -> Tensor",
      "HardtanhBackwardBackward0", meta=ELEMENTWISE)
def hardtanh_backward(grad_output, self, min_val, max_val):
    # 0 where x <= min_val or x >= max_val
    dt = result_type(grad_output, self)
    check_dtype("hardtanh_backward", np.empty(0, dt))
    return as_dtype(np.where((self <= min_val) | (self >= max_val), scalar(0, dt), grad_output), dt)


# self: hardtanh_backward(grad, self, min_val, max_val)
defvjp(hardtanh, lambda g, ans, self, min_val=-1, max_val=1: hardtanh_backward(
    g, self, min_val=min_val, max_val=max_val))
defbranch(hardtanh, lambda self, min_val=-1, max_val=1: (self > min_val) & (self < max_val))
# grad_output: hardtanh_backward(grad, self, min_val, max_val); self: zeros_like(grad)
defvjp(hardtanh_backward,
       lambda gg, ans, go, self, min_val, max_val: hardtanh_backward(gg, self, min_val=min_val,
                                                                     max_val=max_val),
       lambda gg, ans, go, self, min_val, max_val: zeros(self.shape, gg))


@aten("add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", "AddBackward1", saves=False,
      meta=ELEMENTWISE)
def add_scalar(self, other, alpha=1):
    return add.forward(self, other, alpha=alpha)


@aten("sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", "SubBackward1", saves=False,
      meta=ELEMENTWISE)
def sub_scalar(self, other, alpha=1):
    return sub.forward(self, other, alpha=alpha)


@aten("rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", "RsubBackward1", saves=False,
      meta=ELEMENTWISE)
def rsub_scalar(self, other, alpha=1):
    _check_sub_bool("rsub", self, other)
    dt = result_type(self, other)
    _check_alpha("rsub", dt, alpha)
    return as_dtype(np.subtract(other, cast(self, dt) if alpha == 1 else np.multiply(cast(self, dt), alpha)), dt)


@aten("div.Scalar(Tensor self, Scalar other) -> Tensor", "DivBackward1", saves=False, meta=ELEMENTWISE)
def div_scalar(self, other):
    return div.forward(self, other)


defvjp(add_scalar, lambda g, ans, self, other, alpha=1: g)                   # self: grad
defvjp(sub_scalar, lambda g, ans, self, other, alpha=1: g)                   # self: grad
defvjp(rsub_scalar, lambda g, ans, self, other, alpha=1: neg(g) if alpha == 1 else mul_scalar(neg(g), other=alpha))
defvjp(div_scalar, lambda g, ans, self, other: div_scalar(g, other=other))   # grad / other


@aten("masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor", "MaskedFillBackward0",
      meta=ELEMENTWISE, own_layout=True)
def masked_fill(self, mask, value):
    mdt = np.asarray(mask).dtype if not hasattr(mask, "dtype") else np.dtype(mask.dtype)
    if mdt.kind != "b":
        raise TypeError(f"masked_fill: only boolean masks are supported, but got a mask with dtype {mdt}")
    # PyTorch clones self contiguous, then fills in place (a view then sees its strides)
    out = np.where(mask, scalar(value, self.dtype), self)
    return out if out.flags.c_contiguous else out.copy(order="C")


def _masked_fill_vjp(g, ans, self, mask, value):
    # self: grad.masked_fill(mask, 0), summed to self's shape; mask: non_differentiable
    return L.unbroadcast(masked_fill(g, _value(mask), value=0), tuple(self.shape))


defvjp(masked_fill, _masked_fill_vjp, None)


@aten("_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
      "bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
      "ToCopyBackward0", saves=False, meta=ELEMENTWISE)
def to_copy(self, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    # Note [No-op device moves]: `.to(x.device)`, `type_as` and `.to(dtype)` trace as
    # _to_copy with device='cpu' on a CPU model; PyTorch records ToCopyBackward0 for it
    # all the same, so a move to the tensor's own device is a copy (a cast at most).
    if device is not None and not _same_device(self, device):
        raise ValueError(f"_to_copy: a move to device={device!r} of a tensor on "
                         f"{device_of(self)} is not supported as an ATen op; place the "
                         "graph's tensors with `device` (or use the `to` op) instead")
    return self.astype(np.dtype(dtype) if dtype is not None else self.dtype, copy=True)


def _same_device(array, spec) -> bool:
    """Whether device ``spec`` (a name such as ``cpu``) is where ``array`` lives."""
    try:
        return parse_device(str(spec)) is device_of(array)
    except ValueError:
        return False


# self: _to_copy_backward(grad, self.options()): back to self's dtype
defvjp(to_copy, lambda g, ans, self, **args: g if g.dtype == self.dtype else L.cast(g, dtype=self.dtype.name))
