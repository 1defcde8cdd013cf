"""ATen layout entries: ``flip``, ``repeat``, ``diagonal``, ``as_strided``,
``split_with_sizes``, ``slice_scatter``, ``select_scatter`` and ``nonzero``.

``diagonal``, ``as_strided`` and ``split_with_sizes`` are views (their schemas say
so); the others make fresh arrays. Each VJP is derivatives.yaml's formula written
with ops, so it records under create_graph.
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import layout as K
from ..aten_kernels._common import array_module
from ..library import _value
from .index import index_put
from .pointwise import zeros
from .promotion import cast
from .registry import aten, defvjp
from .shape import _as_strided, _dim, _dims_once, _index, _split_vjp, permute, select, slice_


def _same(self, *_, **__):
    return [(tuple(self.shape), self.dtype)]


# -- flip ---------------------------------------------------------------------------------------
def _flip_dims(self, dims):
    return sorted(_dims_once(dims, self.ndim)) if self.ndim else []


def _flip_meta(self, dims):
    _flip_dims(self, dims)
    return _same(self)


@aten("flip(Tensor self, int[] dims) -> Tensor", "FlipBackward0", saves=False, meta=_flip_meta)
def flip(self, dims):
    return K.flip(self, _flip_dims(self, dims))


# self: grad.flip(dims)
defvjp(flip, lambda g, ans, self, dims: flip(g, dims=dims))


# -- repeat -------------------------------------------------------------------------------------
@aten("repeat(Tensor self, SymInt[] repeats) -> Tensor", "RepeatBackward0", saves=False,
      meta=lambda self, repeats: [(K.repeat_shape(tuple(self.shape), repeats), self.dtype)])
def repeat(self, repeats):
    return K.repeat(self, repeats)


def _repeat_vjp(g, ans, self, repeats):
    # self: repeat_backward(grad, repeats, self.sym_sizes()): the gradient seen as (r0, s0, r1, s1, ...)
    # and summed over the repeat axes
    shape = tuple(self.shape)
    repeats = [int(r) for r in repeats]
    padded = (1,) * (len(repeats) - len(shape)) + shape
    split = []
    for r, s in zip(repeats, padded):
        split += [r, s]
    lead = len(repeats) - len(shape)           # the leading dims self lacks (size 1 in ``padded``)
    axes = tuple(range(0, 2 * len(repeats), 2)) + tuple(range(1, 2 * lead, 2))
    return L.sum_(L.reshape(g, shape=tuple(split)), axis=tuple(sorted(axes)))


defvjp(repeat, _repeat_vjp)


# -- diagonal -----------------------------------------------------------------------------------
def _diagonal_geometry(shape, offset, dim1, dim2):
    n = len(shape)
    d1, d2 = _dim(dim1, n), _dim(dim2, n)
    if d1 == d2:
        raise ValueError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    length = max(min(shape[d1] + min(offset, 0), shape[d2] - max(offset, 0)), 0)
    return d1, d2, length


def _diagonal_meta(self, offset=0, dim1=0, dim2=1):
    d1, d2, length = _diagonal_geometry(tuple(self.shape), offset, dim1, dim2)
    rest = tuple(s for k, s in enumerate(self.shape) if k not in (d1, d2))
    return [(rest + (length,), self.dtype)]


@aten("diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)", "DiagonalBackward0",
      saves=False, meta=_diagonal_meta)
def diagonal(self, offset=0, dim1=0, dim2=1):
    # a writable strided view (NumPy's diagonal is read-only), PyTorch's geometry: the other
    # dims in order, then the diagonal stepping both dims at once
    d1, d2, length = _diagonal_geometry(tuple(self.shape), offset, dim1, dim2)
    if length:
        start = self[_index(self.ndim, d2, slice(offset, None))] if offset >= 0 else \
            self[_index(self.ndim, d1, slice(-offset, None))]
    else:
        start = self
    rest = [k for k in range(self.ndim) if k not in (d1, d2)]
    return _as_strided(start, tuple(self.shape[k] for k in rest) + (length,),
                       tuple(self.strides[k] for k in rest) + (self.strides[d1] + self.strides[d2],))


def _diagonal_vjp(g, ans, self, offset=0, dim1=0, dim2=1):
    # self: diagonal_backward_symint(grad, self.sym_sizes(), offset, dim1, dim2): zeros with grad on
    # the diagonal. dims d1, d2 are moved to the front, the diagonal written with one index_put
    shape = tuple(self.shape)
    n = len(shape)
    d1, d2, length = _diagonal_geometry(shape, offset, dim1, dim2)
    order = [d1, d2] + [k for k in range(n) if k not in (d1, d2)]
    moved = tuple(shape[k] for k in order)
    xp = array_module(_value(g))
    rows = xp.arange(length, dtype=np.int64) + max(-offset, 0)
    cols = xp.arange(length, dtype=np.int64) + max(offset, 0)
    values = permute(g, dims=[n - 2] + list(range(n - 2)))          # the diagonal axis first
    out = index_put(zeros(moved, g), [rows, cols], values)
    inverse = [0] * n
    for i, k in enumerate(order):
        inverse[k] = i
    return permute(out, dims=inverse)


defvjp(diagonal, _diagonal_vjp)


# -- as_strided ---------------------------------------------------------------------------------
# Note [as_strided reads the input row-major]: PyTorch's as_strided indexes the input's
# storage. A graph's tensors are row-major and start their storage (what eager code that
# calls as_strided, such as adaptive pooling, hands it), so gradcli indexes the input's
# elements in row-major order: the same elements there. On an input that is itself a
# strided view of a larger tensor PyTorch would reach past it into the base; gradcli
# refuses positions outside the input instead (never reads past it).
def _as_strided_meta(self, size, stride, storage_offset=None):
    numel = int(np.prod(self.shape, dtype=np.int64))
    size, _, _ = K.check_as_strided(numel, size, stride, storage_offset)
    return [(tuple(size), self.dtype)]


@aten("as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
      "AsStridedBackward0", saves=False, meta=_as_strided_meta)
def as_strided(self, size, stride, storage_offset=None):
    size, stride, offset = K.check_as_strided(self.size, size, stride, storage_offset)
    flat = self.reshape(-1) if self.flags.c_contiguous else array_module(self).ascontiguousarray(self).reshape(-1)
    if 0 in size:
        return flat[:0].reshape(size)
    return _as_strided(flat[offset:], tuple(size), tuple(s * flat.itemsize for s in stride))


def _as_strided_vjp(g, ans, self, size, stride, storage_offset=None):
    # self: as_strided_backward(grad, TensorGeometry(self), size, stride, storage_offset): each
    # element's gradient added to the storage position it read (overlaps add up), then viewed
    # with the input's geometry (row-major: Note [as_strided reads the input row-major])
    shape = tuple(self.shape)
    numel = int(np.prod(shape, dtype=np.int64))
    size, stride, offset = K.check_as_strided(numel, size, stride, storage_offset)
    positions = K.as_strided_positions(array_module(_value(g)), size, stride, offset).reshape(-1)
    flat = index_put(zeros((numel,), g), [positions], L.reshape(g, shape=(positions.size,)), accumulate=True)
    return L.reshape(flat, shape=shape)


defvjp(as_strided, _as_strided_vjp)


# -- split_with_sizes -----------------------------------------------------------------------------
def _split_sizes(self, split_sizes, dim):
    if self.ndim == 0:
        raise ValueError("split_with_sizes expects at least a 1-dimensional tensor")
    d = _dim(dim, self.ndim)
    sizes = [int(s) for s in split_sizes]
    if any(s < 0 for s in sizes):
        raise ValueError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                         f"split_sizes={sizes}")
    if sum(sizes) != self.shape[d]:
        raise ValueError(f"split_with_sizes expects split_sizes to sum exactly to {self.shape[d]} (input tensor's "
                         f"size at dimension {d}), but got split_sizes={sizes}")
    return d, sizes


def _split_with_sizes_meta(self, split_sizes, dim=0):
    d, sizes = _split_sizes(self, split_sizes, dim)
    return [(tuple(self.shape[:d]) + (s,) + tuple(self.shape[d + 1:]), self.dtype) for s in sizes]


@aten("split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
      "SplitWithSizesBackward0", saves=False, meta=_split_with_sizes_meta)
def split_with_sizes(self, split_sizes, dim=0):
    d, sizes = _split_sizes(self, split_sizes, dim)
    bounds = np.cumsum([0] + sizes)
    return [self[_index(self.ndim, d, slice(int(a), int(b)))] for a, b in zip(bounds[:-1], bounds[1:])]


# self: split_with_sizes_backward(grads, split_sizes, dim, ...): unused outputs as zeros, then cat
defvjp(split_with_sizes, lambda gs, ans, self, split_sizes, dim=0: _split_vjp(gs, ans, self, None, dim))


# -- slice_scatter / select_scatter ---------------------------------------------------------------
def _slice_key(shape, dim, start, end, step):
    if step <= 0:
        raise ValueError("slice_scatter: slice step must be positive")
    d = _dim(dim, len(shape))
    return _index(len(shape), d, slice(start, end, step)), d


def _check_src(shape, key, src_shape):
    part = np.broadcast_to(np.zeros(()), shape)[key].shape
    if tuple(src_shape) != tuple(part):
        raise ValueError(f"expected src to have a size equal to the slice of self. src size = {list(src_shape)}, "
                         f"slice size = {list(part)}")


def _slice_scatter_meta(self, src, dim=0, start=None, end=None, step=1):
    key, _ = _slice_key(tuple(self.shape), dim, start, end, step)
    _check_src(tuple(self.shape), key, src.shape)
    return _same(self)


@aten("slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) "
      "-> Tensor", "SliceScatterBackward0", saves=False, meta=_slice_scatter_meta)
def slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    key, _ = _slice_key(tuple(self.shape), dim, start, end, step)
    _check_src(tuple(self.shape), key, src.shape)
    out = self.copy(order="C")
    out[key] = cast(src, self.dtype)
    return out


# self: slice_scatter_symint(grad, zeros_like(src), dim, start, end, step);
# src: grad.slice_symint(dim, start, end, step)
defvjp(slice_scatter,
       lambda g, ans, self, src, dim=0, start=None, end=None, step=1: slice_scatter(
           g, zeros(src.shape, g), dim=dim, start=start, end=end, step=step),
       lambda g, ans, self, src, dim=0, start=None, end=None, step=1: slice_(
           g, dim=dim, start=start, end=end, step=step))


def _select_key(shape, dim, index):
    if not shape:
        raise IndexError("select_scatter: select() cannot be applied to a 0-dim tensor")
    d = _dim(dim, len(shape))
    if not -shape[d] <= index < shape[d]:
        raise IndexError(f"select_scatter: index {index} out of range for tensor of size {list(shape)} at "
                         f"dimension {dim}")
    return _index(len(shape), d, index % shape[d])


def _select_scatter_meta(self, src, dim, index):
    key = _select_key(tuple(self.shape), dim, index)
    _check_src(tuple(self.shape), key, src.shape)
    return _same(self)


@aten("select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor", "SelectScatterBackward0",
      saves=False, meta=_select_scatter_meta)
def select_scatter(self, src, dim, index):
    key = _select_key(tuple(self.shape), dim, index)
    _check_src(tuple(self.shape), key, src.shape)
    out = self.copy(order="C")
    out[key] = cast(src, self.dtype)
    return out


# self: select_scatter_symint(grad, zeros_like(src), dim, index); src: grad.select_symint(dim, index)
defvjp(select_scatter,
       lambda g, ans, self, src, dim, index: select_scatter(g, zeros(src.shape, g), dim=dim, index=index),
       lambda g, ans, self, src, dim, index: select(g, dim=dim, index=index))


# -- nonzero ------------------------------------------------------------------------------------
# Its result's length depends on the values: the loader's rule says unknown (None).
@aten("nonzero(Tensor self) -> Tensor", "NonzeroBackward0", meta=lambda self: None)
def nonzero(self):
    return K.nonzero(self)
