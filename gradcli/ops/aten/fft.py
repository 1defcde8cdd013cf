"""The real FFTs PyTorch records for ``torch.fft.rfft``/``irfft`` (and ``fft`` of a real
signal, ``rfft2``, ``rfftn``, ...): ``_fft_r2c`` (``FftR2CBackward0``) and ``_fft_c2r``
(``FftC2RBackward0``), with ``view_as_real`` and ``view_as_complex`` between them. Complex
values are held in their real view (Note [complex as its real view] in
``gradcli.ops.aten_kernels.fft``), so ``view_as_real`` and ``view_as_complex`` are the
identity on the values gradcli holds, with PyTorch's nodes.

The VJPs are derivatives.yaml's ``fft_r2c_backward`` and ``fft_c2r_backward`` written with
these same ops (Note [real FFT gradients as real FFTs]), so a second derivative follows.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten._fft_r2c.default"](np.array([1.0, 2.0, 3.0, 4.0]), dim=[0], normalization=0,
    ...                               onesided=True).tolist()
    [[10.0, 0.0], [-2.0, 2.0], [-2.0, 0.0]]
"""
from __future__ import annotations

import numpy as np

from ..aten_kernels import fft as K
from ..aten_kernels._common import array_module, check_dtype
from ..library import _value
from .index import index_select
from .pointwise import add, mul
from .registry import aten, defvjp


def _check_float(name, x):
    check_dtype(name, x, "f", "a floating point (or, as its real view, complex)")


def _r2c_meta(self, dim, normalization, onesided):
    _check_float("_fft_r2c", self)
    return [(K.r2c_shape("_fft_r2c", tuple(self.shape), dim, normalization, onesided), self.dtype)]


@aten("_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor", "FftR2CBackward0",
      saves=False, meta=_r2c_meta)
def fft_r2c(self, dim, normalization, onesided):
    _check_float("_fft_r2c", self)
    return K.fft_r2c(self, dim, normalization, onesided)


def _c2r_meta(self, dim, normalization, last_dim_size):
    _check_float("_fft_c2r", self)
    return [(K.c2r_shape("_fft_c2r", tuple(self.shape), dim, normalization, last_dim_size), self.dtype)]


@aten("_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor", "FftC2RBackward0",
      saves=False, meta=_c2r_meta)
def fft_c2r(self, dim, normalization, last_dim_size):
    _check_float("_fft_c2r", self)
    return K.fft_c2r(self, dim, normalization, last_dim_size)


def _along(xp, values, axis, ndim, dtype):
    """``values`` (1-D) shaped to broadcast along ``axis`` of a real view with ``ndim`` dims."""
    return xp.asarray(values, dtype=dtype).reshape((-1,) + (1,) * (ndim - 1 - axis))


# Note [real FFT gradients as real FFTs]: derivatives.yaml's formulas go through a complex
# ``_fft_c2c``; on real views the same gradients are real FFTs:
# - fft_c2r_backward(grad, dim, normalization) is ``_fft_r2c(grad, onesided=True)`` with the
#   frequencies 1 .. N - (N // 2 + 1) doubled (the conjugate ones that c2r folded in);
# - fft_r2c_backward for onesided=True is ``real(_fft_c2c(pad(grad), inverse))``, the sum of each
#   onesided frequency's wave once; c2r sums the doubled ones twice, so it is ``_fft_c2r`` of the
#   gradient with those frequencies halved (the zero and Nyquist ones are summed once by both,
#   and only their real parts count in both);
# - for onesided=False the gradient holds every frequency: the real part of its inverse is the
#   inverse of its Hermitian part (G + conj(G reflected)) / 2, which c2r computes from its half.
def _c2r_vjp(g, ans, self, dim, normalization, last_dim_size):
    # self: fft_c2r_backward(grad, dim, normalization)
    gv = _value(g)
    xp = array_module(gv)
    gi = fft_r2c(g, dim=dim, normalization=normalization, onesided=True)
    n, half = int(last_dim_size), int(last_dim_size) // 2 + 1
    if n - half <= 0:
        return gi
    factor = np.ones(half)
    factor[1:n - half + 1] = 2
    return mul(gi, _along(xp, factor, dim[-1], gi.ndim, gv.dtype))


def _r2c_vjp(g, ans, self, dim, normalization, onesided):
    # self: fft_r2c_backward(grad, dim, normalization, onesided, self.sym_size(dim.back()))
    gv = _value(g)
    xp = array_module(gv)
    last = dim[-1]
    n = self.shape[last]
    half = n // 2 + 1
    if not onesided:
        conj = _along(xp, [1.0, -1.0], gv.ndim - 1, gv.ndim, gv.dtype)
        reflected = g
        for d in dim:
            size = self.shape[d]
            reflected = index_select(reflected, xp.asarray((-np.arange(size)) % size), dim=d)
        g = mul(add(g, mul(reflected, conj)), _along(xp, [0.5], 0, 1, gv.dtype))
        g = index_select(g, xp.arange(half), dim=last)
    else:
        factor = np.ones(half)
        factor[1:n - half + 1] = 0.5
        g = mul(g, _along(xp, factor, last, gv.ndim, gv.dtype))
    return fft_c2r(g, dim=dim, normalization=normalization, last_dim_size=n)


defvjp(fft_c2r, _c2r_vjp)
defvjp(fft_r2c, _r2c_vjp)


# -- the real view's two names ---------------------------------------------------------------
def _view_meta(name):
    def rule(self):
        _check_float(name, self)
        if self.ndim < 1 or self.shape[-1] != 2:
            raise ValueError(f"{name}: expected a last dimension of size 2 (a complex tensor's real view), "
                             f"got shape {list(self.shape)}")
        return [(tuple(self.shape), self.dtype)]
    return rule


@aten("view_as_real(Tensor(a) self) -> Tensor(a)", "ViewAsRealBackward0", saves=False,
      meta=_view_meta("view_as_real"))
def view_as_real(self):
    # Note [complex as its real view]: the complex tensor is already held as its real view
    _view_meta("view_as_real")(self)
    return self.view()


@aten("view_as_complex(Tensor(a) self) -> Tensor(a)", "ViewAsComplexBackward0", saves=False,
      meta=_view_meta("view_as_complex"))
def view_as_complex(self):
    _view_meta("view_as_complex")(self)
    return self.view()


defvjp(view_as_real, lambda g, ans, self: g)
defvjp(view_as_complex, lambda g, ans, self: g)

# Note [complex as its real view]: the ops whose input PyTorch holds as a complex tensor; any other
# op reading one would compute on the real view as if it were real numbers (the exporter asks)
for _op in (fft_c2r, view_as_real):
    _op.reads_complex = True
