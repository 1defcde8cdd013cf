"""3-D pooling as array functions: ``max_pool3d_with_indices``, ``avg_pool3d`` and
``_adaptive_avg_pool3d``, on inputs ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``.

They follow the 2-D kernels of ``pool.py`` one axis further: windows are strided
slices of the padded input, one step per kernel offset over every window at once
(Note [max pool as a scan over kernel offsets]), and adaptive pooling is one averaging
matrix per axis. ``window_positions`` gives, for the backwards, the padded position
each window element reads."""
import itertools

import numpy as np

from ...devices import to_host
from ._common import array_module, check_dtype, expand_param, scatter_add, window_slice
from .pool import _adaptive_matrix, _avg_divisors, _divide, _fractional_intervals, check_avg_pool_dtype, pool_params


def _padded(xp, x4, p, ext, fill):
    out = xp.full((x4.shape[0],) + ext, fill, dtype=x4.dtype)
    out[(slice(None),) + tuple(slice(pp, pp + n) for pp, n in zip(p, x4.shape[1:]))] = x4
    return out


def _region(offset, out, s, d):
    return tuple(window_slice(o * dd, n, ss) for o, n, ss, dd in zip(offset, out, s, d))


def max_pool3d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``aten.max_pool3d_with_indices``: (window maxima, int64 positions in each flattened
    ``D*H*W`` plane); ties keep the first, a NaN wins, padding is ``-inf``."""
    xp = array_module(self)
    k, s, p, d, out, ext = pool_params("max_pool3d_with_indices", tuple(self.shape), 3, kernel_size, stride,
                                         padding, dilation, ceil_mode)
    dhw = tuple(self.shape[-3:])
    x4 = self.reshape((-1,) + dhw)
    xpad = _padded(xp, x4, p, ext, -np.inf)
    ipad = xp.full(ext, -1, dtype=np.int64)
    ipad[tuple(slice(pp, pp + n) for pp, n in zip(p, dhw))] = xp.arange(int(np.prod(dhw)), dtype=np.int64).reshape(dhw)
    output = xp.full((x4.shape[0],) + out, -np.inf, dtype=self.dtype)
    idx = xp.full((x4.shape[0],) + out, -1, dtype=np.int64)
    for offset in itertools.product(*(range(kk) for kk in k)):
        region = _region(offset, out, s, d)
        val = xpad[(slice(None),) + region]
        take = (val > output) | xp.isnan(val)
        output = xp.where(take, val, output)
        idx = xp.where(take, ipad[region], idx)
    untaken = idx < 0
    if bool(untaken.any()):      # an all -inf window: its first in-bounds position
        first = xp.full(out, -1, dtype=np.int64)
        for offset in itertools.product(*(range(kk) for kk in k)):
            cand = ipad[_region(offset, out, s, d)]
            first = xp.where((first < 0) & (cand >= 0), cand, first)
        idx = xp.where(untaken, first, idx)
    shape = tuple(self.shape[:-3]) + out
    return output.reshape(shape), idx.reshape(shape)


def avg_divisor(xp, shape, k, s, p, out, count_include_pad, divisor_override, dtype):
    """The divisor of each output window, shaped ``out`` (PyTorch's CPU rule, as 2-D)."""
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError("avg_pool3d: divisor must be not zero")
        return xp.asarray(np.full(out, float(divisor_override)).astype(dtype))
    f = [_avg_divisors(xp, shape[-3 + a], k[a], s[a], p[a], out[a], count_include_pad, dtype) for a in range(3)]
    return f[0][:, None, None] * f[1][None, :, None] * f[2][None, None, :]


def avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """``aten.avg_pool3d``: window sums divided as PyTorch's CPU kernel divides them."""
    xp = array_module(self)
    check_avg_pool_dtype("avg_pool3d", self)
    k, s, p, d, out, ext = pool_params("avg_pool3d", tuple(self.shape), 3, kernel_size, stride, padding, 1,
                                         ceil_mode)
    div = avg_divisor(xp, tuple(self.shape), k, s, p, out, count_include_pad, divisor_override, self.dtype)
    x4 = self.reshape((-1,) + tuple(self.shape[-3:]))
    xpad = _padded(xp, x4, p, ext, 0)
    sums = xp.zeros((x4.shape[0],) + out, dtype=self.dtype)
    for offset in itertools.product(*(range(kk) for kk in k)):
        sums += xpad[(slice(None),) + _region(offset, out, s, d)]
    return _divide(xp, sums, div).reshape(tuple(self.shape[:-3]) + out)


def window_positions(xp, k, s, out, ext):
    """``out + (prod(k),)``: the linear position in the padded ``ext`` volume that each
    element of each window reads (no dilation: avg_pool3d has none)."""
    step = (ext[1] * ext[2], ext[2], 1)
    origin = xp.zeros(tuple(out), dtype=np.int64)
    offset = xp.zeros(tuple(k), dtype=np.int64)
    for a in range(3):
        shape = [1, 1, 1]
        shape[a] = out[a]
        origin = origin + (xp.arange(out[a], dtype=np.int64) * (s[a] * step[a])).reshape(shape)
        shape = [1, 1, 1]
        shape[a] = k[a]
        offset = offset + (xp.arange(k[a], dtype=np.int64) * step[a]).reshape(shape)
    return origin[..., None] + offset.reshape(-1)


def adaptive3d_output_size(op, shape, dtype, output_size):
    check_dtype(op, np.empty(0, dtype), "f")
    if len(shape) not in (4, 5):
        raise ValueError(f"{op}: expected a 4-D or 5-D input, got shape {list(shape)}")
    if len(output_size) != 3:
        raise ValueError("adaptive_avg_pool3d: output_size must be 3")
    out = tuple(int(o) for o in output_size)
    if min(shape[-3:]) <= 0 or min(out) < 0:
        raise ValueError(f"{op}: input {list(shape)} must have non-empty spatial dims and output_size {list(out)} "
                         "must be non-negative")
    return out


def adaptive_matrices(xp, shape, out, dtype):
    """The averaging matrix of each spatial axis (``(out, size)``)."""
    return [_adaptive_matrix(xp, shape[-3 + a], out[a], dtype) for a in range(3)]


def apply_separable(matmul, reshape, x, shape, mats):
    """``x`` (spatial dims last three) contracted with one matrix per spatial axis:
    ``W``, then ``H``, then ``D``; ``matmul``/``reshape`` are array functions or ops."""
    lead = tuple(shape[:-3])
    dd, hh, ww = shape[-3:]
    md, mh, mw = mats
    y = matmul(x, mw.T.copy())                                   # (..., D, H, ow)
    y = matmul(mh, y)                                            # (..., D, oh, ow)
    oh, ow = mh.shape[0], mw.shape[0]
    y = reshape(y, lead + (dd, oh * ow))
    y = matmul(md, y)                                            # (..., od, oh*ow)
    return reshape(y, lead + (md.shape[0], oh, ow))


def _adaptive_avg_pool3d(self, output_size):
    """``aten._adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor``."""
    xp = array_module(self)
    out = adaptive3d_output_size("_adaptive_avg_pool3d", tuple(self.shape), self.dtype, output_size)
    mats = adaptive_matrices(xp, tuple(self.shape), out, self.dtype)
    return xp.ascontiguousarray(apply_separable(xp.matmul, lambda a, s: a.reshape(s), self, tuple(self.shape),
                                                mats))


def adaptive_max3d_output_size(shape, dtype, output_size):
    """adaptive_max_pool3d's checks: a 4-D or 5-D float input, empty only in its batch dim,
    and three output sizes (0 gives an empty result)."""
    op = "adaptive_max_pool3d"
    check_dtype(op, np.empty(0, dtype), "f")
    if len(shape) not in (4, 5):
        raise ValueError(f"{op}(): expected a 4D or 5D tensor, got shape {list(shape)}")
    for a in range(len(shape) - 4, len(shape)):
        if shape[a] == 0:
            raise ValueError(f"{op}(): expected input to have non-zero size for non-batch dimensions, but input "
                             f"has sizes {list(shape)} with dimension {a} being empty")
    if isinstance(output_size, (int, np.integer)) or len(output_size) != 3:
        raise ValueError(f"{op}(): output_size must have 3 elements, got {output_size}")
    out = tuple(int(o) for o in output_size)
    if min(out) < 0:
        raise ValueError(f"{op}(): output_size {list(out)} must be non-negative")
    return out


def adaptive_max_pool3d(self, output_size):
    """``aten.adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)``.

    Output ``(od, oh, ow)`` is the maximum over PyTorch's adaptive window (``[floor(o*I/O),
    ceil((o+1)*I/O))`` on each axis) and its position in the flattened ``D*H*W`` volume; the scan
    is PyTorch's CPU kernel's (depth, then rows, then columns; a value greater than the running
    one or a NaN takes over), window by window, every plane at once."""
    shape = tuple(self.shape)
    out = adaptive_max3d_output_size(shape, self.dtype, output_size)
    xp = array_module(self)
    d, h, w = shape[-3:]
    x = self.reshape(-1, d * h * w)
    planes = x.shape[0]
    values = xp.empty((planes,) + out, dtype=self.dtype)
    indices = xp.empty((planes,) + out, dtype=xp.int64)

    def bounds(o, size, n):
        return (o * size) // n, -((-(o + 1) * size) // n)
    for i, j, k in itertools.product(*(range(o) for o in out)):
        (d0, d1), (h0, h1), (w0, w1) = bounds(i, d, out[0]), bounds(j, h, out[1]), bounds(k, w, out[2])
        best = xp.full(planes, -np.inf, dtype=self.dtype)
        where = xp.full(planes, (d0 * h + h0) * w + w0, dtype=xp.int64)
        for a, b, c in itertools.product(range(d0, d1), range(h0, h1), range(w0, w1)):
            pos = (a * h + b) * w + c
            v = x[:, pos]
            take = (v > best) | xp.isnan(v)
            best = xp.where(take, v, best)
            where = xp.where(take, pos, where)
        values[:, i, j, k] = best
        indices[:, i, j, k] = where
    lead = shape[:-3]
    return [values.reshape(lead + out), indices.reshape(lead + out)]


def adaptive_max_pool3d_backward(grad_output, self, indices):
    """``aten.adaptive_max_pool3d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor``:
    ``grad_output`` added into zeros of ``self``'s shape at ``indices`` (positions in each flattened
    ``D*H*W`` volume)."""
    xp = array_module(grad_output, self)
    shape = tuple(self.shape)
    vol = int(np.prod(shape[-3:], dtype=np.int64))
    planes = int(np.prod(shape[:-3], dtype=np.int64))
    gi = xp.zeros((planes, vol), dtype=grad_output.dtype)
    flat = (xp.asarray(indices).reshape(planes, int(np.prod(indices.shape[-3:], dtype=np.int64)))
            + (xp.arange(planes, dtype=xp.int64) * vol)[:, None]).ravel()
    gi = scatter_add(xp, gi.reshape(-1), flat, grad_output.reshape(-1))
    return gi.reshape(shape)


def fractional3d_params(self, kernel_size, output_size, random_samples):
    """fractional_max_pool3d's checks (the kernel's and the load-time shape rule's): the kernel
    and output sizes, (T, H, W) each."""
    op = "fractional_max_pool3d"
    check_dtype(op, self, "f")
    shape = tuple(self.shape)
    if len(shape) not in (4, 5):
        raise ValueError(f"{op}(): expected a 4D or 5D input, got shape {list(shape)}")
    for a in range(len(shape) - 4, len(shape)):
        if shape[a] == 0:
            raise ValueError(f"{op}(): expected input to have non-zero size for non-batch dimensions, but got "
                             f"{list(shape)} with dimension {a} being empty")
    k = expand_param(kernel_size, 3, "kernel_size")
    out = expand_param(output_size, 3, "output_size")
    for name, kk, o, size in zip(("time", "height", "width"), k, out, shape[-3:]):
        if o + kk - 1 >= size:          # PyTorch's 3-D check is strict (the 2-D one is not)
            raise ValueError(f"{op}(): pool {name} {kk} too large relative to input {name} {size} for output "
                             f"{name} {o}")
    lead = shape[:-3] if len(shape) == 5 else (1,) + shape[:-3]
    if tuple(random_samples.shape) != lead + (3,):
        raise ValueError(f"{op}(): random_samples of shape {list(random_samples.shape)}, expected "
                         f"{list(lead) + [3]}")
    if np.dtype(random_samples.dtype) != np.dtype(self.dtype):
        raise ValueError(f"{op}(): random_samples must have the input's dtype {np.dtype(self.dtype)}, got "
                         f"{np.dtype(random_samples.dtype)}")
    return k, out


def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    """``aten.fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size, Tensor
    random_samples) -> (Tensor, Tensor)``: as fractional_max_pool2d, on (T, H, W) with each plane's
    samples ``(u_t, u_h, u_w)``; the position in the flattened ``T*H*W`` volume, PyTorch's scan (time,
    rows, columns; a greater value or a NaN takes over)."""
    k, out = fractional3d_params(self, kernel_size, output_size, random_samples)
    xp = array_module(self)
    dt = np.dtype(self.dtype)
    t, h, w = self.shape[-3:]
    x = self.reshape(-1, t * h * w)
    planes = x.shape[0]
    samples = np.asarray(to_host(random_samples), dtype=dt).reshape(planes, 3)
    starts = [_fractional_intervals(samples[:, a], (t, h, w)[a], out[a], k[a], dt) for a in range(3)]
    s0 = starts[0][:, :, None, None]
    s1 = starts[1][:, None, :, None]
    s2 = starts[2][:, None, None, :]
    plane = np.arange(planes)[:, None, None, None]
    best = xp.full((planes,) + out, -np.inf, dtype=self.dtype)
    where = xp.asarray(np.broadcast_to((s0 * h + s1) * w + s2, (planes,) + out))
    for a, b, c in itertools.product(range(k[0]), range(k[1]), range(k[2])):
        pos = ((s0 + a) * h + (s1 + b)) * w + (s2 + c)
        v = x[plane, xp.asarray(pos)]
        take = (v > best) | xp.isnan(v)
        best = xp.where(take, v, best)
        where = xp.where(take, xp.asarray(pos), where)
    shape = tuple(self.shape[:-3]) + out
    return [best.reshape(shape), where.astype(xp.int64).reshape(shape)]
