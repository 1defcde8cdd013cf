"""Padding as array functions: ``constant_pad_nd`` and the reflection and replication pads.

Note [padding as a gather]: a reflection or replication pad reads, along each padded
dim, the input position that the output position maps to (reflected about the edge,
or clamped to it). So it is ``take`` along each dim with one small index vector
(``pad_positions``), and its backward adds the gradient back along the same vector
(an accumulating index_put), with no loop over elements.
"""
import numpy as np

from ._common import array_module


def constant_pad_shape(shape, pad):
    """The output shape of ``constant_pad_nd`` (``pad`` from the last dim backwards), checked."""
    pad = [int(p) for p in pad]
    if len(pad) % 2:
        raise ValueError(f"constant_pad_nd: Length of pad must be even but instead it equals {len(pad)}")
    if len(pad) // 2 > len(shape):
        raise ValueError(f"constant_pad_nd: Length of pad should be no more than twice the number of dimensions "
                         f"of the input. Pad length is {len(pad)} while the input has {len(shape)} dimensions.")
    out = list(shape)
    for k in range(len(pad) // 2):
        d = len(shape) - 1 - k
        n = shape[d] + pad[2 * k] + pad[2 * k + 1]
        if n < 0:
            raise ValueError(f"constant_pad_nd: The input size {shape[d]}, plus negative padding {pad[2 * k]} and "
                             f"{pad[2 * k + 1]} resulted in a negative output size, which is invalid. Check "
                             f"dimension {d} of your input.")
        out[d] = n
    return tuple(out)


def constant_pad_nd(self, pad, value=0):
    """``aten.constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor``: ``pad``
    lists (before, after) for the last dim, then the one before it, ...; negative amounts crop.

    >>> import numpy as np
    >>> constant_pad_nd(np.ones((1, 2)), [1, -1], 5.0).tolist()
    [[5.0, 1.0]]
    """
    xp = array_module(self)
    out_shape = constant_pad_shape(tuple(self.shape), pad)
    crop, widths = [slice(None)] * self.ndim, [(0, 0)] * self.ndim
    for k in range(len(pad) // 2):
        d = self.ndim - 1 - k
        lo, hi = int(pad[2 * k]), int(pad[2 * k + 1])
        crop[d] = slice(max(-lo, 0), self.shape[d] - max(-hi, 0))
        widths[d] = (max(lo, 0), max(hi, 0))
    out = xp.full(out_shape, value, dtype=self.dtype) if self.dtype.kind != "b" else xp.full(out_shape, bool(value))
    if 0 in out_shape:
        return out
    part = self[tuple(crop)]
    if 0 in part.shape:
        return out
    out[tuple(slice(w[0], w[0] + part.shape[d]) for d, w in enumerate(widths))] = part
    return out


def pad_positions(xp, n, lo, hi, mode):
    """The input positions (along a dim of size ``n``) that the ``n + lo + hi`` output positions
    read: reflected about the edges (``"reflect"``) or clamped to them (``"replicate"``)."""
    p = xp.arange(-lo, n + hi, dtype=np.int64)
    if mode == "reflect":
        p = xp.abs(p)
        return xp.where(p >= n, 2 * (n - 1) - p, p)
    return xp.clip(p, 0, n - 1)


def check_pad(name, shape, padding, mode):
    """The checks and output shape of ``reflection_padNd`` / ``replication_padNd``."""
    k = len(padding) // 2
    rest = shape[1:] if len(shape) == k + 2 else shape       # every dim but the batch
    if len(shape) not in (k + 1, k + 2) or 0 in rest:
        raise ValueError(f"{name}: Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 batch size and "
                         f"other non-zero dimensions for input, but got: {list(shape)}")
    out = list(shape)
    for j in range(k):
        d = len(shape) - 1 - j
        lo, hi = int(padding[2 * j]), int(padding[2 * j + 1])
        if mode == "reflect" and (lo >= shape[d] or hi >= shape[d]):
            raise ValueError(f"{name}: Argument #4: Padding size should be less than the corresponding input "
                             f"dimension, but got: padding ({lo}, {hi}) at dimension {d} of input {list(shape)}")
        out[d] = shape[d] + lo + hi
        # reflection needs one output position at least; replication may make none
        if out[d] < (1 if mode == "reflect" else 0):
            raise ValueError(f"{name}: input (size {shape[d]} at dimension {d}) is too small. Calculated output "
                             f"size: {out[d]}")
    return tuple(out)


def pad_by_positions(self, padding, mode, name):
    """``reflection_padNd`` / ``replication_padNd`` (Note [padding as a gather])."""
    xp = array_module(self)
    check_pad(name, tuple(self.shape), padding, mode)
    out = self
    for j in range(len(padding) // 2):
        d = self.ndim - 1 - j
        out = xp.take(out, pad_positions(xp, self.shape[d], int(padding[2 * j]), int(padding[2 * j + 1]), mode),
                      axis=d)
    return xp.ascontiguousarray(out)
