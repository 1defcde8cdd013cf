"""Layout ops as array functions: ``flip``, ``repeat``, ``as_strided`` (its element
positions) and ``nonzero``, on the input's array module."""
import numpy as np

from ._common import array_module


def flip(self, dims):
    """``aten.flip(Tensor self, int[] dims) -> Tensor`` (``dims`` wrapped), as a fresh array."""
    xp = array_module(self)
    return xp.ascontiguousarray(xp.flip(self, axis=tuple(dims))) if dims else self.copy(order="C")


def repeat_shape(shape, repeats):
    """The shape of ``repeat``: ``repeats`` (at least ``len(shape)`` of them) times the
    input's shape padded with leading ones."""
    repeats = [int(r) for r in repeats]
    if len(repeats) < len(shape):
        raise ValueError("repeat: Number of dimensions of repeat dims can not be smaller than number of "
                         "dimensions of tensor")
    padded = (1,) * (len(repeats) - len(shape)) + tuple(shape)
    out = tuple(r * s for r, s in zip(repeats, padded))
    if any(r < 0 for r in repeats):
        raise ValueError(f"repeat: Trying to create tensor with negative dimension: {list(out)}")
    return out


def repeat(self, repeats):
    """``aten.repeat(Tensor self, SymInt[] repeats) -> Tensor``: tiles of ``self``.

    >>> import numpy as np
    >>> repeat(np.array([1.0, 2.0]), [2, 2]).tolist()
    [[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]]
    """
    xp = array_module(self)
    repeat_shape(tuple(self.shape), repeats)
    padded = self.reshape((1,) * (len(repeats) - self.ndim) + tuple(self.shape))
    return xp.ascontiguousarray(xp.tile(padded, tuple(int(r) for r in repeats)))


def check_as_strided(numel, size, stride, storage_offset):
    """as_strided's checks: non-negative sizes and strides, every element read in bounds."""
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    offset = int(storage_offset or 0)
    if len(size) != len(stride):
        raise ValueError(f"as_strided: mismatch in length of strides and shape ({len(stride)} strides, "
                         f"{len(size)} sizes)")
    if any(s < 0 for s in stride):
        raise ValueError(f"as_strided: Negative strides are not supported at the moment, got strides: {stride}")
    if any(s < 0 for s in size):
        raise ValueError(f"as_strided: Trying to create tensor with negative dimension: {size}")
    if offset < 0:
        raise ValueError(f"as_strided: Tensor: invalid storage offset {offset}")
    if 0 in size:
        return size, stride, offset
    need = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
    if need > numel:
        raise ValueError(f"as_strided: setStorage: sizes {size}, strides {stride}, storage offset {offset} "
                         f"requiring a storage of {need} elements are out of bounds for storage of {numel}")
    return size, stride, offset


def as_strided_positions(xp, size, stride, offset):
    """The storage position each element of an ``as_strided(size, stride, offset)`` view reads."""
    pos = xp.full(tuple(size), offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        pos = pos + (xp.arange(n, dtype=np.int64) * s).reshape((n,) + (1,) * (len(size) - d - 1))
    return pos


def nonzero(self):
    """``aten.nonzero(Tensor self) -> Tensor``: the (count, ndim) int64 indices of the nonzero
    elements in row-major order."""
    xp = array_module(self)
    if self.ndim == 0:
        return xp.zeros((1 if bool(self) else 0, 0), dtype=np.int64)
    return xp.ascontiguousarray(xp.stack(xp.nonzero(self), axis=1).astype(np.int64, copy=False))
