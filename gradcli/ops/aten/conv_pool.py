"""ATen convolution and pooling: entries, and the NumPy kernels behind them.

The kernels are named after the ATen functions they stand for
(``convolution_backward``, ``max_pool2d_with_indices_backward``, ...) and take
their arguments, so a faster implementation can replace one without touching
the entries. All are vectorised: Python loops run over kernel offsets
(``kH * kW`` of them), never over pixels; a convolution is one batched
matmul on an im2col view.
"""
from __future__ import annotations

import itertools

import numpy as np

from .pointwise import array_module, as_dtype
from .registry import aten, defvjp, defvjp_joint


def _tuple(v, n, name="argument"):
    v = tuple(v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"{name} must have 1 or {n} values, got {list(v)}")
    return v


def _offsets(ks):
    return itertools.product(*[range(k) for k in ks])


def _window(offset, stride, dilation, out_size):
    """The strided slices that read kernel position ``offset`` for every output."""
    return tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                 for o, s, d, n in zip(offset, stride, dilation, out_size))


def _pad(x, before, after, value=0):
    if not any(before) and not any(after):
        return x
    width = [(0, 0)] * (x.ndim - len(before)) + list(zip(before, after))
    return np.pad(x, width, constant_values=value)


# -- convolution ----------------------------------------------------------------------
def _conv_geometry(input, weight, stride, padding, dilation, groups):
    nsp = weight.ndim - 2
    if input.ndim != nsp + 2:
        raise ValueError(f"convolution: expected a batched {nsp + 2}-D input for a {weight.ndim}-D weight, "
                         f"got input of shape {list(input.shape)}")
    stride, padding, dilation = (_tuple(stride, nsp, "stride"), _tuple(padding, nsp, "padding"),
                                 _tuple(dilation, nsp, "dilation"))
    ks = weight.shape[2:]
    if input.shape[1] != weight.shape[1] * groups or weight.shape[0] % groups:
        raise ValueError(f"convolution: weight of shape {list(weight.shape)} with groups={groups} does "
                         f"not fit an input with {input.shape[1]} channels")
    out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, p, d, k, s in zip(input.shape[2:], padding, dilation, ks, stride))
    if any(o <= 0 for o in out):
        raise ValueError(f"convolution: input of spatial size {list(input.shape[2:])} is too small for "
                         f"kernel {list(ks)} (padding {list(padding)}, dilation {list(dilation)})")
    return stride, padding, dilation, ks, out


def _im2col(x, ks, stride, padding, dilation, out, groups):
    """(N, G, C/G * prod(ks), prod(out)): the input under every kernel position."""
    xp = _pad(x, padding, padding)
    cols = np.stack([xp[(Ellipsis,) + _window(o, stride, dilation, out)] for o in _offsets(ks)], axis=2)
    n, c = x.shape[:2]
    return cols.reshape(n, groups, (c // groups) * int(np.prod(ks)), int(np.prod(out)))


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise ValueError("convolution: transposed convolution is not supported")
    stride, padding, dilation, ks, out = _conv_geometry(input, weight, stride, padding, dilation, groups)
    cols = _im2col(input, ks, stride, padding, dilation, out, groups)
    w = weight.reshape(groups, weight.shape[0] // groups, -1)
    y = np.matmul(w, cols).reshape((input.shape[0], weight.shape[0]) + out)
    if bias is not None:
        y = y + bias.reshape((-1,) + (1,) * len(out))
    return as_dtype(y, input.dtype)


def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    """(grad_input, grad_weight, grad_bias), each only where ``output_mask`` asks."""
    stride, padding, dilation, ks, out = _conv_geometry(input, weight, stride, padding, dilation, groups)
    n, c = input.shape[:2]
    cout = weight.shape[0]
    g = grad_output.reshape(n, groups, cout // groups, -1)
    grad_input = grad_weight = grad_bias = None
    if output_mask[2]:
        grad_bias = grad_output.sum(axis=(0,) + tuple(range(2, grad_output.ndim)))
    if output_mask[1]:
        cols = _im2col(input, ks, stride, padding, dilation, out, groups)
        gw = np.einsum("ngol,ngkl->gok", g, cols, optimize=True)
        grad_weight = as_dtype(gw.reshape(weight.shape), weight.dtype)
    if output_mask[0]:
        w = weight.reshape(groups, cout // groups, -1)
        dcols = np.matmul(np.swapaxes(w, 1, 2), g).reshape((n, c, int(np.prod(ks))) + out)
        gxp = np.zeros_like(input, shape=(n, c) + tuple(s + 2 * p for s, p in zip(input.shape[2:], padding)))
        for j, o in enumerate(_offsets(ks)):       # col2im: one strided add per kernel position
            gxp[(Ellipsis,) + _window(o, stride, dilation, out)] += dcols[:, :, j]
        grad_input = gxp[(Ellipsis,) + tuple(slice(p, p + s) for s, p in zip(input.shape[2:], padding))]
    return grad_input, grad_weight, grad_bias


@aten("convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
      "SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
      "ConvolutionBackward0")
def convolution_op(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


def _convolution_vjp(g, ans, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                     groups, output_mask):
    # input, weight, bias: "grad.defined() ? convolution_backward_symint(grad, input, weight, bias->sym_sizes(),
    #   stride, padding, dilation, transposed, output_padding, groups, grad_input_mask) : ..."
    mask = list(output_mask[:2]) + [output_mask[2] and bias is not None]
    return convolution_backward(g, input, weight, None if bias is None else bias.shape, stride, padding,
                                dilation, transposed, output_padding, groups, mask)


defvjp_joint(convolution_op, _convolution_vjp, (True, True, True))


# -- pooling ------------------------------------------------------------------------------
def _pool_out(n, k, s, p, d, ceil_mode):
    """pooling_output_shape: a last window must start inside the input or its left padding."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, name):
    if x.ndim not in (3, 4):
        raise ValueError(f"{name}: expected a 3-D or 4-D input, got shape {list(x.shape)}")
    k = _tuple(kernel_size, 2, "kernel_size")
    s = _tuple(stride, 2, "stride") if len(stride) else k
    p = _tuple(padding, 2, "padding")
    d = _tuple(dilation, 2, "dilation")
    if any(pi * 2 > ki for pi, ki in zip(p, k)):
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, got padding "
                         f"{list(p)} for kernel {list(k)}")
    out = tuple(_pool_out(n, ki, si, pi, di, ceil_mode)
                for n, ki, si, pi, di in zip(x.shape[-2:], k, s, p, d))
    # right padding so that every window of the last output exists in the padded array
    after = tuple(max(0, (o - 1) * si + di * (ki - 1) + 1 - n - pi)
                  for o, si, di, ki, n, pi in zip(out, s, d, k, x.shape[-2:], p))
    return k, s, p, d, out, after


def max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode):
    k, s, p, d, out, after = _pool_geometry(self, kernel_size, stride, padding, dilation, ceil_mode,
                                            "max_pool2d")
    fill = -np.inf if self.dtype.kind == "f" else np.iinfo(self.dtype).min
    xp = _pad(self, p, after, fill)
    offsets = list(_offsets(k))
    windows = np.stack([xp[(Ellipsis,) + _window(o, s, d, out)] for o in offsets], axis=-1)
    best = np.argmax(windows, axis=-1)         # the first maximum; a NaN wins (as PyTorch)
    values = np.take_along_axis(windows, best[..., None], axis=-1)[..., 0]
    xp = array_module(self)
    kh = xp.asarray([o[0] for o in offsets])[best]
    kw = xp.asarray([o[1] for o in offsets])[best]
    rows = xp.arange(out[0]).reshape(-1, 1) * s[0] - p[0] + kh * d[0]
    cols = xp.arange(out[1]) * s[1] - p[1] + kw * d[1]
    return values, (rows * self.shape[-1] + cols).astype(np.int64)


def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    h, w = self.shape[-2:]
    planes = int(np.prod(self.shape[:-2]))
    xp = array_module(grad_output)
    flat = (xp.arange(planes).reshape((-1,) + (1,) * 2) * (h * w)
            + indices.reshape((planes,) + indices.shape[-2:])).reshape(-1)
    summed = xp.bincount(flat, weights=grad_output.reshape(-1), minlength=planes * h * w)
    return as_dtype(summed.reshape(self.shape), grad_output.dtype)


@aten("max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
      "int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)", "MaxPool2DWithIndicesBackward0",
      differentiable_outputs=(True, False))
def max_pool2d_with_indices_op(self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    return max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)


# self: max_pool2d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, result1)
defvjp(max_pool2d_with_indices_op,
       lambda gs, ans, self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False:
       max_pool2d_with_indices_backward(gs[0], self, kernel_size, stride, padding, dilation, ceil_mode, ans[1]),
       first_order_only=True)


def _avg_divisors(n, k, s, p, out, count_include_pad):
    """Per output position along one dim: the window's size (with padding, clipped to n + p)
    or its count of real elements."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, n + p)
    if count_include_pad:
        return end - start
    return np.minimum(end, n) - np.maximum(start, 0)


def _avg_setup(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, like):
    k, s, p, d, out, after = _pool_geometry(self, kernel_size, stride, padding, (1, 1), ceil_mode,
                                            "avg_pool2d")
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError("avg_pool2d: divisor must be not zero")
        div = np.full(out, float(divisor_override))
    else:
        div = np.multiply.outer(
            _avg_divisors(self.shape[-2], k[0], s[0], p[0], out[0], count_include_pad),
            _avg_divisors(self.shape[-1], k[1], s[1], p[1], out[1], count_include_pad)).astype(float)
    return k, s, p, out, after, array_module(like).asarray(div.astype(self.dtype))


def avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    k, s, p, out, after, div = _avg_setup(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                          divisor_override, self)
    xp = _pad(self, p, after)
    total = None
    for o in _offsets(k):
        part = xp[(Ellipsis,) + _window(o, s, (1, 1), out)]
        total = part.copy() if total is None else total + part
    return as_dtype(total / div, self.dtype)


def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    k, s, p, out, after, div = _avg_setup(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                          divisor_override, grad_output)
    share = grad_output / div
    h, w = self.shape[-2:]
    gxp = np.zeros_like(grad_output, shape=self.shape[:-2] + (h + p[0] + after[0], w + p[1] + after[1]))
    for o in _offsets(k):
        gxp[(Ellipsis,) + _window(o, s, (1, 1), out)] += share
    return gxp[..., p[0]:p[0] + h, p[1]:p[1] + w]


@aten("avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, "
      "bool count_include_pad=True, int? divisor_override=None) -> Tensor", "AvgPool2DBackward0", saves=False)
def avg_pool2d_op(self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
                  divisor_override=None):
    return avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


# self: avg_pool2d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
defvjp(avg_pool2d_op,
       lambda g, ans, self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
       divisor_override=None: avg_pool2d_backward(g, _Meta(self), kernel_size, stride, padding, ceil_mode,
                                                  count_include_pad, divisor_override),
       first_order_only=True)


class _Meta:
    """Shape and dtype of an input not saved for backward, shaped like an array for the kernels."""

    def __init__(self, meta):
        self.shape, self.dtype, self.ndim = tuple(meta.shape), meta.dtype, len(meta.shape)


def _adaptive_matrix(n, out, dtype):
    """(out, n): row i averages input positions floor(i*n/out) .. ceil((i+1)*n/out) - 1."""
    i = np.arange(out)
    start = (i * n) // out
    end = -((-(i + 1) * n) // out)
    pos = np.arange(n)
    inside = (pos >= start[:, None]) & (pos < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


def _adaptive_avg_pool2d(self, output_size, like):
    if self.ndim not in (3, 4):
        raise ValueError(f"adaptive_avg_pool2d: expected a 3-D or 4-D input, got shape {list(self.shape)}")
    oh, ow = _tuple(output_size, 2, "output_size")
    xp = array_module(like)
    return (xp.asarray(_adaptive_matrix(self.shape[-2], oh, self.dtype)),
            xp.asarray(_adaptive_matrix(self.shape[-1], ow, self.dtype)))


@aten("_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor", "AdaptiveAvgPool2DBackward0",
      saves=False)
def adaptive_avg_pool2d(self, output_size):
    # separable: each output averages a rectangle, rows by mh and columns by mw
    mh, mw = _adaptive_avg_pool2d(self, output_size, self)
    return as_dtype(np.einsum("...hw,ih,jw->...ij", self, mh, mw, optimize=True), self.dtype)


def adaptive_avg_pool2d_backward(grad_output, self):
    mh, mw = _adaptive_avg_pool2d(self, grad_output.shape[-2:], grad_output)
    return as_dtype(np.einsum("...ij,ih,jw->...hw", grad_output, mh, mw, optimize=True), grad_output.dtype)


# self: _adaptive_avg_pool2d_backward(grad, self)
defvjp(adaptive_avg_pool2d, lambda g, ans, self, output_size: adaptive_avg_pool2d_backward(g, _Meta(self)),
       first_order_only=True)
