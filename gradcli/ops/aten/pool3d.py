"""ATen 3-D pooling entries: ``max_pool3d_with_indices``, ``avg_pool3d``, ``_adaptive_avg_pool3d``,
``adaptive_max_pool3d`` and ``fractional_max_pool3d`` with their backward ops (forwards in
``gradcli.ops.aten_kernels.pool3d``).

Their VJPs are written with ops, so a second derivative follows: max pooling adds the
gradient at the saved indices and average pooling at every window position (one
accumulating ``index_put`` each, then the padding cropped), adaptive pooling applies
the transposed averaging matrices.
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import pool3d as K
from ..aten_kernels._common import array_module, check_dtype
from ..aten_kernels.pool import check_avg_pool_dtype, pool_params
from ..core import ChosenBy, defbranch
from ..library import _value
from .conv_pool import _shaped, _zeros_for
from .index import index_put
from .pad import constant_pad_nd
from .pointwise import zeros
from .nn import embedding
from .registry import aten, defvjp
from .shape import view


def _planes(shape):
    return int(np.prod(shape[:-3], dtype=np.int64))


def _max_meta(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    out = pool_params("max_pool3d_with_indices", tuple(self.shape), 3, kernel_size, stride, padding, dilation,
                      ceil_mode)[4]
    shape = tuple(self.shape[:-3]) + out
    return [(shape, self.dtype), (shape, np.dtype(np.int64))]


@aten("max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, "
      "int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)", "MaxPool3DWithIndicesBackward0",
      differentiable_outputs=(True, False), meta=_max_meta)
def max_pool3d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return list(K.max_pool3d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode))


def _max_vjp(gs, ans, self, **args):
    # self: max_pool3d_with_indices_backward(grad, self, ..., result1): the gradient added at
    # each window's saved position
    shape = tuple(self.shape)
    planes = _planes(shape)
    idx = _value(ans[1])
    idx = idx.reshape(planes, int(np.prod(idx.shape[-3:], dtype=np.int64)))
    rows = array_module(idx).arange(planes, dtype=np.int64)[:, None]
    flat = index_put(zeros((planes, int(np.prod(shape[-3:]))), gs[0]), [rows, idx],
                     L.reshape(gs[0], shape=idx.shape), accumulate=True)
    return L.reshape(flat, shape=shape)


defvjp(max_pool3d_with_indices, _max_vjp)


def _avg_meta(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    check_avg_pool_dtype("avg_pool3d", self)
    out = pool_params("avg_pool3d", tuple(self.shape), 3, kernel_size, stride, padding, 1, ceil_mode)[4]
    if divisor_override == 0:
        raise ValueError("avg_pool3d: divisor must be not zero")
    return [(tuple(self.shape[:-3]) + out, self.dtype)]


@aten("avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, "
      "bool count_include_pad=True, int? divisor_override=None) -> Tensor", "AvgPool3DBackward0", saves=False,
      meta=_avg_meta)
def avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return K.avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _avg_vjp(g, ans, self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    # self: avg_pool3d_backward(grad, self, ...): each output's gradient, divided by its
    # divisor, added to every position of its window; the padding then cropped
    shape = tuple(self.shape)
    gv = _value(g)
    xp = array_module(gv)
    k, s, p, _, out, ext = pool_params("avg_pool3d", shape, 3, kernel_size, stride, padding, 1, ceil_mode)
    div = K.avg_divisor(xp, shape, k, s, p, out, count_include_pad, divisor_override, gv.dtype)
    planes = _planes(shape)
    pos = K.window_positions(xp, k, s, out, ext).reshape(1, -1)
    share = L.div(L.reshape(g, shape=(planes,) + out), div)
    values = L.reshape(L.expand(L.reshape(share, shape=(planes,) + out + (1,)),
                                shape=(planes,) + out + (int(np.prod(k)),)), shape=(planes, pos.size))
    rows = xp.arange(planes, dtype=np.int64)[:, None]
    padded = L.reshape(index_put(zeros((planes, int(np.prod(ext))), g), [rows, pos], values, accumulate=True),
                       shape=(planes,) + ext)
    crop = []
    for a in (2, 1, 0):
        crop += [-p[a], -(ext[a] - p[a] - shape[-3 + a])]
    return L.reshape(constant_pad_nd(padded, pad=crop), shape=shape)


defvjp(avg_pool3d, _avg_vjp)


def _adaptive_meta(self, output_size):
    out = K.adaptive3d_output_size("_adaptive_avg_pool3d", tuple(self.shape), self.dtype, output_size)
    return [(tuple(self.shape[:-3]) + out, self.dtype)]


@aten("_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor", "AdaptiveAvgPool3DBackward0",
      saves=False, meta=_adaptive_meta)
def adaptive_avg_pool3d(self, output_size):
    return K._adaptive_avg_pool3d(self, output_size)


def _adaptive_vjp(g, ans, self, output_size):
    # self: _adaptive_avg_pool3d_backward(grad, self): the transposed averaging, axis by axis
    shape = tuple(self.shape)
    gv = _value(g)
    out = K.adaptive3d_output_size("_adaptive_avg_pool3d", shape, gv.dtype, output_size)
    mats = K.adaptive_matrices(array_module(gv), shape, out, gv.dtype)
    return K.apply_separable(L.matmul, lambda a, sh: L.reshape(a, shape=sh), g, tuple(g.shape),
                             [m.T.copy() for m in mats])


defvjp(adaptive_avg_pool3d, _adaptive_vjp)


# -- adaptive_max_pool3d and its backward (as adaptive_max_pool2d's, in conv_pool.py) ---------------------------
def _adaptive_max_meta(self, output_size):
    out = K.adaptive_max3d_output_size(tuple(self.shape), self.dtype, output_size)
    shape = tuple(self.shape[:-3]) + out
    return [(shape, self.dtype), (shape, np.dtype(np.int64))]


@aten("adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)", "AdaptiveMaxPool3DBackward0",
      differentiable_outputs=(True, False), meta=_adaptive_max_meta)
def adaptive_max_pool3d(self, output_size):
    return K.adaptive_max_pool3d(self, output_size)


def _adaptive_max_backward_meta(grad_output, self, indices, name="adaptive_max_pool3d_backward"):
    check_dtype(name, self, "f")
    if np.dtype(indices.dtype) != np.int64:
        raise ValueError(f"{name}: indices must be int64, got {indices.dtype}")
    if tuple(grad_output.shape) != tuple(indices.shape) or grad_output.ndim != self.ndim or self.ndim not in (4, 5) \
            or tuple(grad_output.shape[:-3]) != tuple(self.shape[:-3]):
        raise ValueError(f"{name}: grad_output {list(grad_output.shape)} and indices {list(indices.shape)} must "
                         f"have one shape, with the leading dims of self {list(self.shape)}")
    return [(tuple(self.shape), np.dtype(grad_output.dtype))]


@aten("adaptive_max_pool3d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
      "AdaptiveMaxPool3DBackwardBackward0", meta=_adaptive_max_backward_meta)
def adaptive_max_pool3d_backward(grad_output, self, indices):
    _adaptive_max_backward_meta(grad_output, self, indices)
    return K.adaptive_max_pool3d_backward(grad_output, self, indices)


def _max_pool3d_double_backward(gg, ans, go, self, indices, **args):
    # grad_output: max_pool_double_backward(grad, indices, 3): grad gathered at each window's
    # argmax, written with ops (view + embedding) so that it records itself
    vol = int(np.prod(self.shape[-3:], dtype=np.int64))
    idx = _value(indices)
    xp = array_module(idx)
    offsets = (xp.arange(_planes(idx.shape), dtype=np.int64) * vol).reshape(idx.shape[:-3] + (1, 1, 1))
    return view(embedding(view(gg, size=[-1, 1]), idx + offsets), size=list(idx.shape))


defbranch(adaptive_max_pool3d, ChosenBy(1))   # Note [Branches] in ops/core.py
# self: adaptive_max_pool3d_backward(grad, self, result1)
defvjp(adaptive_max_pool3d, lambda gs, ans, self, output_size: adaptive_max_pool3d_backward(
    gs[0], _shaped(self.shape, gs[0]), _value(ans[1])))
# grad_output: max_pool_double_backward(grad, indices, 3); self: zeros_like(self)
defvjp(adaptive_max_pool3d_backward, _max_pool3d_double_backward,
       lambda gg, ans, go, self, indices, **args: _zeros_for(self, gg), None)


# -- fractional_max_pool3d and its backward (as fractional_max_pool2d's, in conv_pool.py) -----------------------
def _fractional_meta(self, random_samples, kernel_size, output_size):
    _, out = K.fractional3d_params(self, kernel_size, output_size, random_samples)
    shape = tuple(self.shape[:-3]) + tuple(out)
    return [(shape, self.dtype), (shape, np.dtype(np.int64))]


@aten("fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size, Tensor random_samples) "
      "-> (Tensor, Tensor)", "FractionalMaxPool3DBackward0", differentiable_outputs=(True, False),
      meta=_fractional_meta)
def fractional_max_pool3d(self, random_samples, kernel_size, output_size):
    return K.fractional_max_pool3d(self, kernel_size, output_size, random_samples)


def _fractional_backward_meta(grad_output, self, indices, kernel_size, output_size):
    return _adaptive_max_backward_meta(grad_output, self, indices, "fractional_max_pool3d_backward")


@aten("fractional_max_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] output_size, "
      "Tensor indices) -> Tensor", "FractionalMaxPool3DBackwardBackward0", meta=_fractional_backward_meta)
def fractional_max_pool3d_backward(grad_output, self, indices, kernel_size, output_size):
    _fractional_backward_meta(grad_output, self, indices, kernel_size, output_size)
    return K.adaptive_max_pool3d_backward(grad_output, self, indices)


defbranch(fractional_max_pool3d, ChosenBy(1))    # a near tie picks either element
# self: fractional_max_pool3d_backward(grad, self, kernel_size, output_size, result1); random_samples: none
defvjp(fractional_max_pool3d,
       lambda gs, ans, self, random_samples, kernel_size, output_size: fractional_max_pool3d_backward(
           gs[0], _shaped(self.shape, gs[0]), _value(ans[1]), kernel_size=kernel_size, output_size=output_size),
       None)
# grad_output: max_pool_double_backward(grad, indices, 3); self: zeros_like(self)
defvjp(fractional_max_pool3d_backward, _max_pool3d_double_backward,
       lambda gg, ans, go, self, indices, **args: _zeros_for(self, gg), None)
