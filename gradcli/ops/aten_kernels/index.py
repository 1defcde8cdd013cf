"""Indexing as array functions: ``index.Tensor``, ``index_put``, ``index_select``,
``gather`` and the ``scatter`` family, on the array module of their input.

Note [indices are checked before use]: every index value is compared with the size
of the dim it indexes before any array is read or written, and refused with
PyTorch's message, so that an index tensor from a hostile file can never read or
write out of bounds (NumPy would wrap a negative index where PyTorch's gather and
scatter refuse it). Accumulation (repeated indices adding up) goes through
``accumulate_at``: one ``bincount`` over linear positions, no Python loop and no
``ufunc.at``.
"""
import numpy as np

from ._common import array_module, scatter_add

INDEX_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))


def _is_mask(i):
    return np.dtype(i.dtype) in (np.dtype(bool), np.dtype(np.uint8))


def check_index_dtypes(indices):
    """index.Tensor's index dtypes (arrays or ``Meta``): long, int, byte or bool."""
    for i in indices:
        if i is not None and np.dtype(i.dtype) not in INDEX_DTYPES and not _is_mask(i):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")


def accumulate_at(xp, out, positions, values):
    """``out.flat[positions] += values`` with repeated positions adding up (``out`` row-major,
    ``positions`` and ``values`` of one shape). Floats go through one ``bincount``
    (summed in float64); integer and complex dtypes through ``scatter_add``."""
    flat = out.reshape(-1)
    pos = positions.reshape(-1)
    if out.dtype.kind == "f" and pos.size:
        sums = xp.bincount(pos, weights=values.reshape(-1).astype(xp.float64, copy=False), minlength=flat.size)
        flat += sums.astype(out.dtype, copy=False)
    elif pos.size:
        scatter_add(xp, flat, pos, values.reshape(-1))
    return out


# -- index.Tensor / index_put -------------------------------------------------------------
def _expand_masks(self, indices):
    """``indices`` with each bool mask replaced by the long indices of its True entries
    (one per dim it covers), checked against the indexed shape as PyTorch does."""
    xp = array_module(self)
    out, d = [], 0
    for k, i in enumerate(indices):
        if i is not None and _is_mask(i):
            for j, n in enumerate(i.shape):
                if d + j >= self.ndim or self.shape[d + j] != n:
                    raise IndexError(f"The shape of the mask {list(i.shape)} at index {j} does not match the shape "
                                     f"of the indexed tensor {list(self.shape)} at index {d + j}")
            out.extend(xp.nonzero(i.astype(bool, copy=False)))
            d += i.ndim
        else:
            out.append(i)
            d += 1
    return out


def _check_count(ndim, indices):
    n = sum(i.ndim if i is not None and _is_mask(i) else 1 for i in indices)
    if n > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim} (got {n})")


def _key(self, indices):
    """The NumPy index tuple of ``indices`` on ``self``, every value checked (Note [indices are
    checked before use])."""
    check_index_dtypes(indices)
    _check_count(self.ndim, indices)
    longs = _expand_masks(self, indices)
    key = []
    for d, i in enumerate(longs):
        if i is None:
            key.append(slice(None))
            continue
        n = self.shape[d]
        if i.size:
            lo, hi = int(i.min()), int(i.max())
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of bounds for dimension {d} with size {n}")
        key.append(i.astype(np.int64, copy=False))
    shapes = [tuple(i.shape) for i in longs if i is not None]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(str(list(s)) for s in shapes)) from None
    return tuple(key)


def index(self, indices):
    """``aten.index.Tensor(Tensor self, Tensor?[] indices) -> Tensor``: NumPy's advanced
    indexing (None: the whole dim; bool masks: their True positions), as a fresh array.

    >>> import numpy as np
    >>> index(np.arange(6.0).reshape(2, 3), [None, np.array([2, 0])]).tolist()
    [[2.0, 0.0], [5.0, 3.0]]
    """
    xp = array_module(self)
    return xp.ascontiguousarray(self[_key(self, indices)])


def index_put(self, indices, values, accumulate=False):
    """``aten.index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False)
    -> Tensor``: a copy of ``self`` with ``values`` (broadcast) written at ``indices``,
    or added there (repeated indices adding up) with ``accumulate``."""
    xp = array_module(self, values)
    if values.dtype != self.dtype:
        raise TypeError(f"index_put: Index put requires the source and destination dtypes match, got "
                        f"{self.dtype} for the destination and {values.dtype} for the source.")
    key = _key(self, indices)
    out = self.copy(order="C")
    target_shape = out[key].shape if not accumulate else None
    if not accumulate:
        out[key] = _broadcast_values(xp, values, target_shape)
        return out
    positions = xp.arange(out.size).reshape(out.shape)[key]
    return accumulate_at(xp, out, positions, _broadcast_values(xp, values, positions.shape))


def _broadcast_values(xp, values, shape):
    try:
        return xp.broadcast_to(values, shape)
    except ValueError:
        raise ValueError(f"index_put: shape mismatch: value tensor of shape {list(values.shape)} cannot be "
                         f"broadcast to indexing result of shape {list(shape)}") from None


# -- index_select ------------------------------------------------------------------------
def index_select(self, dim, index):
    """``aten.index_select(Tensor self, int dim, Tensor index) -> Tensor``: the slices of
    ``self`` along ``dim`` that ``index`` (0-d or 1-d) names, in its order."""
    xp = array_module(self)
    n = self.shape[dim] if self.ndim else 1
    idx = index.reshape(-1)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise IndexError("index out of range in self")
    if self.ndim == 0:
        return xp.ascontiguousarray(self.reshape(1)[idx].reshape(index.shape))
    return xp.ascontiguousarray(xp.take(self, idx.astype(np.int64, copy=False), axis=dim))


# -- gather / scatter ----------------------------------------------------------------------
def _check_range(index, n, dim):
    if index.size:
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= n:
            raise ValueError(f"index {lo if lo < 0 else hi} is out of bounds for dimension {dim} with size {n}")


def _as_1d(x):
    return x.reshape(1) if x.ndim == 0 else x


def gather(self, dim, index):
    """``aten.gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor``:
    ``out[i][j] = self[index[i][j]][j]`` for ``dim=0`` (index no larger than self apart from ``dim``).

    >>> import numpy as np
    >>> gather(np.array([[1.0, 2.0], [3.0, 4.0]]), 1, np.array([[1, 1], [0, 1]])).tolist()
    [[2.0, 2.0], [3.0, 4.0]]
    """
    xp = array_module(self)
    s, i = _as_1d(self), _as_1d(index)
    _check_range(i, s.shape[dim], dim)
    part = s[tuple(slice(0, n) if d != dim else slice(None) for d, n in enumerate(i.shape))]
    out = xp.take_along_axis(part, i.astype(np.int64, copy=False), axis=dim)
    return xp.ascontiguousarray(out.reshape(index.shape))


def _positions(xp, shape, dim, index):
    """The row-major linear positions in an array of ``shape`` that ``index`` (along ``dim``,
    its own position elsewhere) names, shaped like ``index``."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    pos = index.astype(np.int64) * strides[dim]
    for d, n in enumerate(index.shape):
        if d != dim:
            pos = pos + (xp.arange(n, dtype=np.int64) * strides[d]).reshape((n,) + (1,) * (index.ndim - d - 1))
    return pos


def _src_part(src, index):
    if not hasattr(src, "shape"):
        return src
    return _as_1d(src)[tuple(slice(0, n) for n in _as_1d(index).shape)]


def scatter(self, dim, index, src):
    """``aten.scatter.src`` / ``scatter.value``: a copy of ``self`` with ``src`` (an array no
    smaller than ``index``, or a number) written where ``index`` points along ``dim``."""
    xp = array_module(self)
    out = _as_1d(self).copy(order="C")
    i = _as_1d(index)
    _check_range(i, out.shape[dim], dim)
    if i.size:
        values = _src_part(src, index)
        out.reshape(-1)[_positions(xp, out.shape, dim, i).reshape(-1)] = (
            xp.broadcast_to(xp.asarray(values, dtype=out.dtype), i.shape).reshape(-1))
    return out.reshape(self.shape)


def scatter_add_(self, dim, index, src):
    """``aten.scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor``: a copy of
    ``self`` with ``src`` added where ``index`` points along ``dim`` (repeats add up)."""
    xp = array_module(self, src)
    out = _as_1d(self).copy(order="C")
    i = _as_1d(index)
    _check_range(i, out.shape[dim], dim)
    accumulate_at(xp, out, _positions(xp, out.shape, dim, i), _src_part(src, index))
    return out.reshape(self.shape)


def masked_scatter(self, mask, source):
    """``aten.masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor``: ``self`` and
    ``mask`` broadcast together; where ``mask`` is true, the elements of ``source`` in row-major
    order (it must hold at least as many)."""
    xp = array_module(self, source)
    shape = xp.broadcast_shapes(tuple(self.shape), tuple(mask.shape)) if hasattr(xp, "broadcast_shapes") \
        else np.broadcast_shapes(tuple(self.shape), tuple(mask.shape))
    out = xp.array(xp.broadcast_to(self, shape), order="C")
    m = xp.broadcast_to(mask, shape)
    count = int(m.sum())
    if count > source.size:
        raise ValueError("masked_scatter: Number of elements of source < number of ones in mask")
    out[m] = source.reshape(-1)[:count]
    return out


SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _segments(xp, pos, vals):
    """``pos`` sorted (stable) with ``vals`` in the same order, and where each run of equal
    positions starts: the layout of ``ufunc.reduceat``."""
    order = xp.argsort(pos, kind="stable")
    sp, sv = pos[order], vals[order]
    starts = xp.flatnonzero(xp.concatenate([xp.ones(1, dtype=bool), sp[1:] != sp[:-1]]))
    return sp[starts], sv, starts


def scatter_reduce(self, dim, index, src, reduce, include_self=True):
    """``aten.scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *,
    bool include_self=True) -> Tensor``: each position ``index`` points at (along ``dim``)
    reduced over the ``src`` values sent there, and its own value unless ``include_self`` is
    false; ``mean`` divides by the count (floor division for integers, as PyTorch)."""
    xp = array_module(self, src)
    out = _as_1d(self).copy(order="C")
    i = _as_1d(index)
    _check_range(i, out.shape[dim], dim)
    if not i.size:
        return out.reshape(self.shape)
    flat = out.reshape(-1)
    pos = _positions(xp, out.shape, dim, i).reshape(-1)
    vals = _src_part(src, index).reshape(-1)
    if reduce in ("sum", "mean"):
        touched = xp.zeros(flat.size, dtype=bool)
        touched[pos] = True
        if not include_self:
            flat[touched] = 0
        accumulate_at(xp, out, pos, vals)
        if reduce == "mean":
            counts = xp.bincount(pos, minlength=flat.size)[touched] + (1 if include_self else 0)
            flat[touched] = (flat[touched] / counts if flat.dtype.kind in "fc"
                             else flat[touched] // counts).astype(flat.dtype, copy=False)
        return out.reshape(self.shape)
    ufunc = {"prod": xp.multiply, "amax": xp.maximum, "amin": xp.minimum}[reduce]
    where, sv, starts = _segments(xp, pos, vals)
    reduced = ufunc.reduceat(sv, starts)
    flat[where] = ufunc(flat[where], reduced) if include_self else reduced
    return out.reshape(self.shape)
