"""2-D pooling kernels: ``max_pool2d_with_indices``, ``avg_pool2d``,
``_adaptive_avg_pool2d`` and their backwards, as array functions.

Inputs are ``(N, C, H, W)`` or unbatched ``(C, H, W)``; every leading dim is
a batch of planes. Windows are strided views (no copy until the reduction);
backwards fold with one strided add per kernel offset or scatter-add by the
saved indices: no loop over pixels."""
import itertools

import numpy as np

from ...devices import to_host
from ._common import array_module, check_dtype, expand_param, scatter_add, window_slice, windows


def _pool_out(size, k, s, p, d, ceil_mode):
    """PyTorch's ``pooling_output_shape`` (with its ceil-mode rule that the
    last window must start inside the input or its left padding)."""
    o = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= size + p:
        o -= 1
    return o


def pool_params(op, shape, n, kernel_size, stride, padding, dilation, ceil_mode):
    """(kernel, stride, padding, dilation, out, padded extent) of an ``n``-D pooling (2 or 3
    spatial dims) of an input of ``shape``, checked as PyTorch checks them: one checker for
    every pooling, so the 2-D and 3-D ops refuse alike.

    >>> pool_params("max_pool2d", (1, 2, 5, 5), 2, [2, 2], [], 0, 1, False)[4:]
    ((2, 2), (5, 5))
    """
    if len(shape) not in (n + 1, n + 2):
        raise ValueError(f"{op}: expected a {n + 1}-D or {n + 2}-D input, got shape {list(shape)}")
    k = expand_param(kernel_size, n, "kernel_size")
    s = k if stride is None or len(stride) == 0 else expand_param(stride, n, "stride")
    p = expand_param(padding, n, "padding")
    d = expand_param(dilation, n, "dilation")
    if max(k + s + p + d) > 2 ** 31 - 1:
        # the CPU pooling kernels take these as 32-bit ints
        raise ValueError(f"{op}: kernel_size, stride, padding and dilation must fit in 32 bits, got "
                         f"{list(k)}, {list(s)}, {list(p)}, {list(d)}")
    if min(k) <= 0 or min(s) <= 0 or min(d) <= 0 or min(p) < 0:
        raise ValueError(f"{op}: kernel_size, stride and dilation must be positive and "
                         f"padding non-negative, got {list(k)}, {list(s)}, {list(d)}, {list(p)}")
    if any(pp > kk // 2 for pp, kk in zip(p, k)):
        raise ValueError(f"{op}: pad should be at most half of effective kernel size, "
                         f"got padding {list(p)} for kernel_size {list(k)}")
    spatial = tuple(shape[-n:])
    out = tuple(_pool_out(i, kk, ss, pp, dd, ceil_mode)
                for i, kk, ss, pp, dd in zip(spatial, k, s, p, d))
    if min(out) <= 0 or min(spatial) <= 0:
        raise ValueError(f"{op}: output size {list(out)} is too small for input {list(shape)}")
    # padded extent: left pad p, right pad enough for the last (ceil-mode) window
    ext = tuple(max(i + 2 * pp, (o - 1) * ss + dd * (kk - 1) + 1)
                for i, pp, o, ss, dd, kk in zip(spatial, p, out, s, d, k))
    return k, s, p, d, out, ext


def _padded(xp, x3, p, ext, fill):
    b, h, w = x3.shape
    xpad = xp.full((b,) + ext, fill, dtype=x3.dtype)
    xpad[:, p[0]:p[0] + h, p[1]:p[1] + w] = x3
    return xpad


def max_pool2d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    """``aten.max_pool2d_with_indices(Tensor self, int[2] kernel_size,
    int[2] stride=[], int[2] padding=0, int[2] dilation=1,
    bool ceil_mode=False) -> (Tensor, Tensor)``.

    Returns ``(output, indices)``: the window maxima and, as int64, the
    position of each maximum in the flattened ``H*W`` input plane. Ties
    pick the first position in window order and a NaN wins (the last NaN
    of the window), as PyTorch's CPU kernel; an empty ``stride`` means
    ``kernel_size``; padding is ``-inf``."""
    xp = array_module(self)
    k, s, p, d, out, ext = pool_params("max_pool2d_with_indices", tuple(self.shape), 2, kernel_size,
                                       stride, padding, dilation, ceil_mode)
    h, w = self.shape[-2:]
    x3 = self.reshape(-1, h, w)
    xpad = _padded(xp, x3, p, ext, -np.inf)
    # Note [max pool as a scan over kernel offsets]: PyTorch's CPU kernel
    # walks each window in row-major order and takes a value when
    # ``val > max or isnan(val)`` (ties keep the first, NaN the last). The
    # same scan runs here over the kernel offsets, each step on every window
    # at once; padding is -inf so it is never taken.
    ipad = xp.full(ext, -1, dtype=xp.int64)
    ipad[p[0]:p[0] + h, p[1]:p[1] + w] = xp.arange(h * w, dtype=xp.int64).reshape(h, w)
    output = xp.full((x3.shape[0],) + out, -np.inf, dtype=self.dtype)
    idx = xp.full((x3.shape[0],) + out, -1, dtype=xp.int64)
    for i, j in itertools.product(range(k[0]), range(k[1])):
        region = (window_slice(i * d[0], out[0], s[0]), window_slice(j * d[1], out[1], s[1]))
        val = xpad[(slice(None),) + region]
        take = (val > output) | xp.isnan(val)
        output = xp.where(take, val, output)
        idx = xp.where(take, ipad[region], idx)
    untaken = idx < 0
    if bool(untaken.any()):
        # Every value of the window is -inf: PyTorch reports the window's
        # first in-bounds position.
        iwin = windows(xp, ipad, 0, out, k, s, d).reshape(out[0], out[1], k[0] * k[1])
        first_arg = xp.argmax(iwin >= 0, axis=-1)[..., None]
        first = xp.take_along_axis(iwin, first_arg, axis=-1)[..., 0]
        idx = xp.where(untaken, first, idx)
    shape = tuple(self.shape[:-2]) + out
    return output.reshape(shape), idx.reshape(shape)


def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
                                     dilation, ceil_mode, indices):
    """``aten.max_pool2d_with_indices_backward(Tensor grad_output,
    Tensor self, int[2] kernel_size, int[2] stride, int[2] padding,
    int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor``.

    Scatter-adds ``grad_output`` into a zero array shaped like ``self`` at
    ``indices`` (positions in each flattened ``H*W`` plane); overlapping
    windows accumulate."""
    xp = array_module(grad_output, self)
    h, w = self.shape[-2:]
    planes = 1
    for v in self.shape[:-2]:
        planes *= v
    gi = xp.zeros(planes * h * w, dtype=grad_output.dtype)
    flat = (indices.reshape(planes, -1)
            + (xp.arange(planes, dtype=xp.int64) * (h * w))[:, None]).ravel()
    scatter_add(xp, gi, flat, grad_output.reshape(-1))
    return gi.reshape(self.shape)


def _avg_divisors(xp, size, k, s, p, out, count_include_pad, dtype):
    """Per-axis divisor factors of PyTorch's CPU avg_pool2d (the 2-D divisor
    is their product)."""
    div = np.empty(out, dtype=np.float64)
    for o in range(out):                     # output positions of one axis
        start = o * s - p
        end = min(start + k, size + p)
        pool = end - start
        start, end = max(start, 0), min(end, size)
        div[o] = pool if count_include_pad else end - start
    return xp.asarray(div.astype(dtype))


def check_avg_pool_dtype(op, x):
    """PyTorch's CPU avg pooling takes floating point and int64 (not the other integers, nor bool)."""
    check_dtype(op, x, "f" if np.dtype(x.dtype) != np.int64 else "i", "a floating point or int64")


def _divide(xp, a, b):
    """``a / b`` as PyTorch's avg pooling divides: an integer quotient truncates toward
    zero (C++ ``/`` on int64), where NumPy's ``//`` floors."""
    if a.dtype.kind != "i":
        return a / b
    return (a - xp.fmod(a, b)) // b        # exact: a - fmod(a, b) is a multiple of b


def _avg_setup(op, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
               divisor_override):
    xp = array_module(self)
    check_avg_pool_dtype(op, self)
    k, s, p, d, out, ext = pool_params(op, tuple(self.shape), 2, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError(f"{op}: divisor must be not zero")
        div = xp.asarray(np.full(out, float(divisor_override)).astype(self.dtype))
    else:
        hw = self.shape[-2:]
        dh = _avg_divisors(xp, hw[0], k[0], s[0], p[0], out[0], count_include_pad, self.dtype)
        dw = _avg_divisors(xp, hw[1], k[1], s[1], p[1], out[1], count_include_pad, self.dtype)
        div = dh[:, None] * dw[None, :]
    return xp, k, s, p, out, ext, div


def avg_pool2d(self, kernel_size, stride=(), padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """``aten.avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[],
    int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True,
    int? divisor_override=None) -> Tensor``.

    Window sums divided by ``divisor_override`` or, as PyTorch, by the
    window's area clipped to the padded input (``count_include_pad``) or to
    the input itself. Floating point or int64 input; int64 sums wrap and
    their quotient truncates toward zero, as PyTorch's CPU kernel."""
    xp, k, s, p, out, ext, div = _avg_setup("avg_pool2d", self, kernel_size, stride, padding,
                                            ceil_mode, count_include_pad, divisor_override)
    h, w = self.shape[-2:]
    x3 = self.reshape(-1, h, w)
    xpad = _padded(xp, x3, p, ext, 0)
    sums = xp.zeros((x3.shape[0],) + out, dtype=self.dtype)
    for i, j in itertools.product(range(k[0]), range(k[1])):   # kernel offsets
        sums += xpad[:, window_slice(i, out[0], s[0]), window_slice(j, out[1], s[1])]
    return _divide(xp, sums, div).reshape(tuple(self.shape[:-2]) + out)


def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override):
    """``aten.avg_pool2d_backward(Tensor grad_output, Tensor self,
    int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode,
    bool count_include_pad, int? divisor_override) -> Tensor``.

    Each output's gradient divided by its divisor, spread over its window;
    padding positions are dropped."""
    xp, k, s, p, out, ext, div = _avg_setup("avg_pool2d_backward", self, kernel_size, stride,
                                            padding, ceil_mode, count_include_pad,
                                            divisor_override)
    h, w = self.shape[-2:]
    g = _divide(xp, grad_output, div).reshape(-1, out[0], out[1])
    gpad = xp.zeros((g.shape[0],) + ext, dtype=g.dtype)
    for i, j in itertools.product(range(k[0]), range(k[1])):
        gpad[:, window_slice(i, out[0], s[0]), window_slice(j, out[1], s[1])] += g
    return xp.ascontiguousarray(gpad[:, p[0]:p[0] + h, p[1]:p[1] + w]).reshape(self.shape)


def _adaptive_matrix(xp, size, out, dtype):
    """``(out, size)``: row ``o`` averages PyTorch's adaptive window
    ``[floor(o*size/out), ceil((o+1)*size/out))``."""
    m = np.zeros((out, size), dtype=np.float64)
    for o in range(out):
        start = (o * size) // out
        end = -((-(o + 1) * size) // out)
        m[o, start:end] = 1.0 / (end - start)
    return xp.asarray(m.astype(dtype))


def adaptive_output_size(op, self, output_size, backward=False):
    """The checked ``(OH, OW)``: a 3-D or 4-D float input with non-empty spatial dims; the
    forward takes an output size of 0 (an empty result), its backward (PyTorch's, which
    checks grad_output) does not."""
    check_dtype(op, self, "f")
    if self.ndim not in (3, 4):
        raise ValueError(f"{op}: expected a 3-D or 4-D input, got shape {list(self.shape)}")
    if not isinstance(output_size, (int, np.integer)) and len(output_size) != 2:
        raise ValueError("adaptive_avg_pool2d: output_size must be 2")     # PyTorch's check
    out = expand_param(output_size, 2, "output_size")
    if min(self.shape[-2:]) <= 0 or min(out) < (1 if backward else 0):
        what = "grad_output" if backward else "output_size"
        raise ValueError(f"{op}: input {list(self.shape)} must have non-empty spatial dims and "
                         f"{what} {list(out)} must be {'positive' if backward else 'non-negative'}")
    return out


def _adaptive_setup(op, self, output_size, backward=False):
    out = adaptive_output_size(op, self, output_size, backward)
    xp = array_module(self)
    h, w = self.shape[-2:]
    return (xp, _adaptive_matrix(xp, h, out[0], self.dtype),
            _adaptive_matrix(xp, w, out[1], self.dtype))


def _adaptive_avg_pool2d(self, output_size):
    """``aten._adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor``.

    Output ``(oh, ow)`` is the mean of rows ``[floor(oh*H/OH),
    ceil((oh+1)*H/OH))`` and the columns likewise (windows may overlap)."""
    xp, ph, pw = _adaptive_setup("_adaptive_avg_pool2d", self, output_size)
    return xp.matmul(xp.matmul(ph, self), pw.T)


def _adaptive_avg_pool2d_backward(grad_output, self):
    """``aten._adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self)
    -> Tensor``: each output's gradient spread evenly over its window."""
    xp, ph, pw = _adaptive_setup("_adaptive_avg_pool2d_backward", self,
                                 grad_output.shape[-2:], backward=True)
    return xp.matmul(xp.matmul(ph.T, grad_output), pw)


def adaptive_max_pool2d(self, output_size):
    """``aten.adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)``.

    Output ``(oh, ow)`` is the maximum over PyTorch's adaptive window (rows
    ``[floor(oh*H/OH), ceil((oh+1)*H/OH))``, the columns likewise) and its position in
    the flattened ``H*W`` plane; ties keep the first position in row-major order and a
    NaN wins (the last NaN), as PyTorch's CPU kernel, whose scan this repeats window by
    window, every plane at once."""
    out = adaptive_output_size("adaptive_max_pool2d", self, output_size)
    if min(out) < 1:
        raise ValueError(f"adaptive_max_pool2d: output_size {list(out)} must be positive")
    xp = array_module(self)
    h, w = self.shape[-2:]
    x3 = self.reshape(-1, h, w)
    planes = x3.shape[0]
    values = xp.empty((planes,) + tuple(out), dtype=self.dtype)
    indices = xp.empty((planes,) + tuple(out), dtype=xp.int64)
    for i in range(out[0]):
        r0, r1 = (i * h) // out[0], -((-(i + 1) * h) // out[0])
        for j in range(out[1]):
            c0, c1 = (j * w) // out[1], -((-(j + 1) * w) // out[1])
            best = xp.full(planes, -np.inf, dtype=self.dtype)
            where = xp.full(planes, r0 * w + c0, dtype=xp.int64)
            for r in range(r0, r1):
                for c in range(c0, c1):
                    v = x3[:, r, c]
                    take = (v > best) | xp.isnan(v)
                    best = xp.where(take, v, best)
                    where = xp.where(take, r * w + c, where)
            values[:, i, j] = best
            indices[:, i, j] = where
    shape = tuple(self.shape[:-2]) + tuple(out)
    return values.reshape(shape), indices.reshape(shape)


def adaptive_max_pool2d_backward(grad_output, self, indices):
    """``aten.adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices)
    -> Tensor``: ``grad_output`` scatter-added into ``self``'s shape at ``indices``."""
    return max_pool2d_with_indices_backward(grad_output, self, None, None, None, None, None, indices)


def _fractional_intervals(samples, size, out, pool, dtype):
    """PyTorch's ``generate_intervals`` for every plane at once: the window starts along
    one axis, from each plane's sample ``u`` in [0, 1), in the input's dtype
    (``alpha = (size - pool) / (out - 1)``, start ``i`` is ``int((i + u) * alpha) -
    int(u * alpha)``, the last one ``size - pool``)."""
    starts = np.empty((samples.shape[0], out), dtype=np.int64)
    if out > 1:
        alpha = dtype.type(size - pool) / dtype.type(out - 1)
        base = (samples * alpha).astype(dtype).astype(np.int64)
        for i in range(out - 1):
            starts[:, i] = ((dtype.type(i) + samples) * alpha).astype(dtype).astype(np.int64) - base
    starts[:, out - 1] = size - pool
    return starts


def fractional_params(self, kernel_size, output_size, random_samples):
    """fractional_max_pool2d's checks (the kernel's and the load-time shape rule's):
    ``(kh, kw, oh, ow)``."""
    check_dtype("fractional_max_pool2d", self, "f")
    if self.ndim not in (3, 4) or 0 in self.shape[-3:]:
        raise ValueError(f"fractional_max_pool2d: expected a non-empty 3D or 4D input, got shape "
                         f"{list(self.shape)}")
    kh, kw = expand_param(kernel_size, 2, "kernel_size")
    oh, ow = expand_param(output_size, 2, "output_size")
    h, w = self.shape[-2:]
    if oh + kh - 1 > h:
        raise ValueError(f"fractional_max_pool2d: kernel height {kh} is too large relative to input "
                         f"height {h} for output height {oh}")
    if ow + kw - 1 > w:
        raise ValueError(f"fractional_max_pool2d: kernel width {kw} is too large relative to input "
                         f"width {w} for output width {ow}")
    lead = tuple(self.shape[:-2]) if self.ndim == 4 else (1,) + tuple(self.shape[:-2])
    if tuple(random_samples.shape) != lead + (2,):
        raise ValueError(f"fractional_max_pool2d: random_samples of shape {list(random_samples.shape)}, "
                         f"expected {list(lead) + [2]}")
    if np.dtype(random_samples.dtype) != np.dtype(self.dtype):
        raise ValueError(f"fractional_max_pool2d: random_samples must have the input's dtype "
                         f"{np.dtype(self.dtype)}, got {np.dtype(random_samples.dtype)}")
    return kh, kw, oh, ow


def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    """``aten.fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size,
    Tensor random_samples) -> (Tensor, Tensor)``.

    Each plane ``(n, c)`` pools windows of ``kernel_size`` whose starts come from its
    samples ``random_samples[n, c] = (u_w, u_h)`` (``_fractional_intervals``); the value
    and its position in the flattened ``H*W`` plane, ties keeping the first position in
    row-major order and a NaN winning (the last NaN), as PyTorch's CPU kernel scans."""
    kh, kw, oh, ow = fractional_params(self, kernel_size, output_size, random_samples)
    xp = array_module(self)
    dt = np.dtype(self.dtype)
    h, w = self.shape[-2:]
    x3 = self.reshape(-1, h, w)
    planes = x3.shape[0]
    samples = np.asarray(to_host(random_samples), dtype=dt).reshape(planes, 2)   # a few numbers
    cols = _fractional_intervals(samples[:, 0], w, ow, kw, dt)
    rows = _fractional_intervals(samples[:, 1], h, oh, kh, dt)
    plane = xp.asarray(np.arange(planes)[:, None, None])
    r0, c0 = rows[:, :, None], cols[:, None, :]                  # (planes, oh, 1), (planes, 1, ow)
    best = xp.full((planes, oh, ow), -np.inf, dtype=self.dtype)
    where = xp.asarray(r0 * w + c0)
    for dr in range(kh):
        for dc in range(kw):
            r, c = r0 + dr, c0 + dc
            v = x3[plane, xp.asarray(r), xp.asarray(c)]
            take = (v > best) | xp.isnan(v)
            best = xp.where(take, v, best)
            where = xp.where(take, xp.asarray(r * w + c), where)
    shape = tuple(self.shape[:-2]) + (oh, ow)
    return best.reshape(shape), where.astype(xp.int64).reshape(shape)


def fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    """``aten.fractional_max_pool2d_backward(Tensor grad_output, Tensor self, int[2]
    kernel_size, int[2] output_size, Tensor indices) -> Tensor``: ``grad_output``
    scatter-added into ``self``'s shape at ``indices``."""
    return max_pool2d_with_indices_backward(grad_output, self, None, None, None, None, None, indices)
