"""``gelu`` and ``gelu_backward`` (``approximate`` ``"none"`` and ``"tanh"``)
with the constants and formulas of PyTorch's CPU kernels."""
import math

from ._common import array_module, erf

_SQRT1_2 = math.sqrt(0.5)
_ALPHA = (2.0 / math.sqrt(math.pi)) * _SQRT1_2 * 0.5   # 1/sqrt(2*pi)
_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2/pi)
_KAPPA = 0.044715


def _check(approximate):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu(self, approximate="none"):
    """``aten.gelu(Tensor self, *, str approximate='none') -> Tensor``:
    ``x * 0.5 * (1 + erf(x / sqrt(2)))``, or with ``"tanh"``
    ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``."""
    _check(approximate)
    xp = array_module(self)
    if approximate == "tanh":
        inner = _BETA * (self + _KAPPA * self * self * self)
        return 0.5 * self * (1 + xp.tanh(inner))
    return self * 0.5 * (1 + erf(xp, self * _SQRT1_2))


def gelu_backward(grad_output, self, approximate="none"):
    """``aten.gelu_backward(Tensor grad_output, Tensor self, *,
    str approximate='none') -> Tensor``: ``grad_output * gelu'(self)``."""
    _check(approximate)
    xp = array_module(grad_output, self)
    if approximate == "tanh":
        x_sq = self * self
        tanh_inner = xp.tanh(_BETA * (self + _KAPPA * x_sq * self))
        left_derivative = 0.5 * (1 + tanh_inner)
        right_derivative = (0.5 * self * (1 - tanh_inner * tanh_inner)
                            * (_BETA * (1 + 3 * _KAPPA * x_sq)))
        return grad_output * (left_derivative + right_derivative)
    cdf = 0.5 * (1 + erf(xp, self * _SQRT1_2))
    pdf = _ALPHA * xp.exp(-0.5 * self * self)
    return grad_output * (cdf + self * pdf)
