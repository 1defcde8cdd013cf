"""2-D upsampling as array functions: ``upsample_nearest2d`` and ``upsample_bilinear2d``
(the ``.vec`` overloads' arguments), on the input's array module.

Note [upsampling is separable]: both modes treat H and W independently. Nearest reads
one input row and column per output row and column (``nearest_positions``, a gather);
bilinear mixes two neighbours per axis with weights PyTorch computes
(``area_pixel_compute_source_index``), which is a small (out, in) matrix per axis
(``bilinear_matrix``): the output is ``Mh @ x @ Mw.T`` and the gradient
``Mh.T @ g @ Mw``, two matrix products, exact in the same order of terms as
PyTorch's kernel (W first, then H).
"""
import math

import numpy as np

from ._common import array_module


def output_size(name, shape, output_size, scale_factors):
    """(out_h, out_w, scale_h, scale_w) of the ``.vec`` overloads: exactly one of
    ``output_size`` and ``scale_factors``; the scales are passed on (None with a size)."""
    if len(shape) != 4:
        raise ValueError(f"{name}: Expected a 4-D input (N, C, H, W), got shape {list(shape)}")
    if (output_size is None) == (scale_factors is None):
        raise ValueError(f"{name}: Must specify exactly one of output_size and scale_factors")
    if output_size is not None:
        if len(output_size) != 2:
            raise ValueError(f"{name}: output_size must have 2 elements, got {list(output_size)}")
        oh, ow = (int(s) for s in output_size)
        sh = sw = None
    else:
        if len(scale_factors) != 2:
            raise ValueError(f"{name}: scale_factors must have 2 elements, got {list(scale_factors)}")
        sh, sw = (float(s) for s in scale_factors)
        if not all(math.isfinite(s) and abs(s) < 2 ** 62 for s in (sh, sw)):
            raise ValueError(f"{name}: scale_factors must be finite, got {list(scale_factors)}")
        oh, ow = int(math.floor(shape[2] * sh)), int(math.floor(shape[3] * sw))
    if shape[2] <= 0 or shape[3] <= 0 or oh <= 0 or ow <= 0:
        raise ValueError(f"{name}: Input and output sizes should be greater than 0, but got input "
                         f"(H: {shape[2]}, W: {shape[3]}) output (H: {oh}, W: {ow})")
    return oh, ow, sh, sw


def _scale(in_size, out_size, scale, align_corners=False):
    # area_pixel_compute_scale / compute_scales_value: a given scale factor counts as 1/scale
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else in_size / out_size


def nearest_positions(xp, in_size, out_size, scale):
    """The input row read by each output row (``nearest_idx``: float32 arithmetic, as
    PyTorch's CPU kernel)."""
    if out_size == in_size:
        return xp.arange(out_size, dtype=np.int64)
    if out_size == 2 * in_size:
        return xp.arange(out_size, dtype=np.int64) >> 1
    s = np.float32(_scale(in_size, out_size, scale))
    src = xp.floor(xp.arange(out_size, dtype=np.float32) * s).astype(np.int64)
    return xp.minimum(src, in_size - 1)


def bilinear_matrix(xp, in_size, out_size, align_corners, scale, dtype):
    """The (out_size, in_size) interpolation matrix of one axis, in ``dtype`` (PyTorch
    computes the weights in the input's opmath type: float32 for float32)."""
    dt = np.dtype(dtype)
    s = dt.type(_scale(in_size, out_size, scale, align_corners))
    dst = xp.arange(out_size, dtype=dt)
    if align_corners:
        src = s * dst
    else:
        src = xp.maximum(s * (dst + dt.type(0.5)) - dt.type(0.5), dt.type(0))
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < in_size - 1)
    l1 = src - i0.astype(dt)
    l0 = dt.type(1) - l1
    m = xp.zeros((out_size, in_size), dtype=dt)
    rows = xp.arange(out_size)
    m[rows, i0] = l0
    m[rows, i1] += l1
    return m


def upsample_nearest2d(input, out_h, out_w, scale_h, scale_w):
    """``aten.upsample_nearest2d.vec`` once its size is known (``output_size``).

    >>> import numpy as np
    >>> upsample_nearest2d(np.arange(2.0).reshape(1, 1, 1, 2), 1, 4, None, None).tolist()
    [[[[0.0, 0.0, 1.0, 1.0]]]]
    """
    xp = array_module(input)
    rows = nearest_positions(xp, input.shape[2], out_h, scale_h)
    cols = nearest_positions(xp, input.shape[3], out_w, scale_w)
    return xp.ascontiguousarray(input[:, :, rows[:, None], cols[None, :]])


def upsample_bilinear2d(input, out_h, out_w, align_corners, scale_h, scale_w):
    """``aten.upsample_bilinear2d.vec`` once its size is known (Note [upsampling is separable])."""
    xp = array_module(input)
    mh = bilinear_matrix(xp, input.shape[2], out_h, align_corners, scale_h, input.dtype)
    mw = bilinear_matrix(xp, input.shape[3], out_w, align_corners, scale_w, input.dtype)
    return xp.ascontiguousarray(xp.matmul(mh, xp.matmul(input, mw.T)))


def bilinear_aa_matrix(xp, in_size, out_size, align_corners, scale, dtype, skip_same=True):
    """The (out_size, in_size) antialiased interpolation matrix of one axis (PyTorch's
    ``_compute_indices_min_size_weights_aa`` with the triangle filter): output ``i`` centred at
    ``scale * (i + 0.5)``, the triangle widened to the scale when downsampling, each row's weights
    normalized to sum to one, in the input's opmath type (float32 for float32); an axis whose size
    does not change is copied, as PyTorch's separable forward skips it (``skip_same``; its backward
    does not skip it: with a scale given there, its weights are not the identity's)."""
    dt = np.dtype(dtype)
    if out_size == in_size and skip_same:
        return xp.asarray(np.eye(in_size, dtype=dt))
    s = float(dt.type(_scale(in_size, out_size, scale, align_corners)))
    support = dt.type(s if s >= 1.0 else 1.0)
    invscale = dt.type(1.0 / s if s >= 1.0 else 1.0)
    half = dt.type(0.5)
    m = np.zeros((out_size, in_size), dtype=dt)
    for i in range(out_size):
        center = dt.type(s) * (dt.type(i) + half)
        lo = max(int(center - support + half), 0)
        hi = min(int(center + support + half), in_size)
        x = np.abs((np.arange(lo, hi).astype(dt) - center + half) * invscale)
        w = np.where(x < 1, dt.type(1) - x, dt.type(0)).astype(dt)
        total = w.sum(dtype=dt)
        m[i, lo:hi] = w / total if total != 0 else w
    return xp.asarray(m)


def upsample_bilinear2d_aa(input, out_h, out_w, align_corners, scale_h, scale_w):
    """``aten._upsample_bilinear2d_aa`` (Note [upsampling is separable]): the antialiased matrices."""
    xp = array_module(input)
    mh = bilinear_aa_matrix(xp, input.shape[2], out_h, align_corners, scale_h, input.dtype)
    mw = bilinear_aa_matrix(xp, input.shape[3], out_w, align_corners, scale_w, input.dtype)
    return xp.ascontiguousarray(xp.matmul(mh, xp.matmul(input, mw.T)))
