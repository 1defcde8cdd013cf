"""ATen selections beyond the core opset: ``kthvalue`` and ``mode``, each a value and its index
along a dim, ``addbmm``, ``index_reduce`` and ``put``.

Formulas follow PyTorch's ``tools/autograd/derivatives.yaml``; the comment above each VJP names
the formula there. Each entry carries its shape rule (``meta``).

Note [kthvalue's index]: PyTorch's CPU kernel runs Sedgewick's quickselect
(``quick_select_template`` in ATen/native/SortingUtils.h: median-of-three pivot, NaN above every
number) on a copy of each slice with its indices; the index of the k-th value among equal ones is
the one that algorithm leaves at position k - 1. gradcli runs the same algorithm, so the index
is PyTorch's, ties and NaN included.

Note [mode's index]: PyTorch's CPU kernel sorts (value, index) pairs of each slice by value with
``std::sort`` (not stable), then keeps the first run of equal values that is longer than every
run before it, and the index of the run's last pair. gradcli runs libstdc++'s ``std::sort``
(introsort: median-of-three partitions down to 16 elements, then insertion sort), so the index
among equal values is PyTorch's; a NaN equals nothing, so it is the mode only of a slice where
no value repeats and it sorts first. Where introsort's depth limit would switch to heapsort
(adversarial orders, never random ones) gradcli keeps partitioning: the value is the same, the
index may differ (docs/deviations.md).

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.kthvalue.default"](np.array([[3.0, 1.0, 2.0]]), 2, dim=1)
    [array([2.]), array([2])]
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import index as K_index
from ..aten_kernels._common import check_dtype
from ..library import _value
from .index import _scatter_reduce_grads, index_select
from .nn import bmm
from .pointwise import mul_scalar, zeros
from .reduce_core import _check_nonempty_dims, _contiguous, _kept
from .reduce_more import _value_selecting_backward
from .registry import aten, defvjp
from .shape import _dim, expand, transpose, unsqueeze

_LONG = np.dtype(np.int64)


def _gt_or_nan(x, y):
    """PyTorch's order for kthvalue: NaN above every number, NaN not above NaN."""
    return (x != x and y == y) or x > y


def _quick_select(values, indices, k):
    """``quick_select_template`` (Note [kthvalue's index]) on lists, in place."""
    def swap(i, j):
        values[i], values[j] = values[j], values[i]
        indices[i], indices[j] = indices[j], indices[i]
    lo, hi = 0, len(values) - 1
    while True:
        if hi <= lo:
            return
        if hi == lo + 1:
            if _gt_or_nan(values[lo], values[hi]):
                swap(lo, hi)
            return
        swap(lo + (hi - lo) // 2, lo + 1)
        if _gt_or_nan(values[lo + 1], values[hi]):
            swap(lo + 1, hi)
        if _gt_or_nan(values[lo], values[hi]):
            swap(lo, hi)
        if _gt_or_nan(values[lo + 1], values[lo]):
            swap(lo + 1, lo)
        i, j, piv = lo + 1, hi, values[lo]
        while True:
            i += 1
            while _gt_or_nan(piv, values[i]):
                i += 1
            j -= 1
            while _gt_or_nan(values[j], piv):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1


def _slices(x, d, pick):
    """``pick(list of the slice's values) -> (value, index)`` over every slice of ``x`` along
    ``d``: the values and indices with ``d`` kept (size 1)."""
    moved = np.moveaxis(np.asarray(x), d, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    values = np.empty(flat.shape[0], x.dtype)
    indices = np.empty(flat.shape[0], _LONG)
    for r, row in enumerate(flat.tolist()):
        values[r], indices[r] = pick(row)
    shape = moved.shape[:-1] + (1,)
    return np.moveaxis(values.reshape(shape), -1, d), np.moveaxis(indices.reshape(shape), -1, d)


def _selection(name, pick, dtypes):
    def rule(self, *k_dim_keepdim):
        check_dtype(name, self, dtypes, "a non-bool" if "b" not in dtypes else "a")
        *k, dim, keepdim = k_dim_keepdim
        d = _dim(dim, self.ndim)
        if self.ndim:
            _check_nonempty_dims(name, self.shape, (d,))
        if k:
            n = self.shape[d] if self.ndim else 1
            if not 1 <= k[0] <= n:
                raise ValueError(f"{name}(): selected number k out of range for dimension {d} "
                                 f"(k={k[0]}, {n} elements)")
        shape = _kept(self.shape, (d,) if self.ndim else (), keepdim)
        return [(shape, np.dtype(self.dtype)), (shape, _LONG)]

    def forward(self, *k_dim_keepdim):
        rule(self, *k_dim_keepdim)
        *k, dim, keepdim = k_dim_keepdim
        if not self.ndim:
            return [np.array(self, copy=True), np.zeros((), _LONG)]
        d = _dim(dim, self.ndim)
        values, idx = _slices(self, d, (lambda row: pick(row, k[0])) if k else pick)
        if not keepdim:
            idx, values = np.squeeze(idx, d), np.squeeze(values, d)
        return [_contiguous(values), _contiguous(idx, _LONG)]
    forward.__name__ = name
    return rule, forward


def _kth(row, k):
    indices = list(range(len(row)))
    _quick_select(row, indices, k - 1)
    return row[k - 1], indices[k - 1]


_kth_rule, _kth_forward = _selection("kthvalue", _kth, "iuf")


def _kth_meta(self, k, dim=-1, keepdim=False):
    return _kth_rule(self, k, dim, keepdim)


def _kthvalue(self, k, dim=-1, keepdim=False):
    return _kth_forward(self, k, dim, keepdim)


kthvalue = aten("kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)",
                "KthvalueBackward0", differentiable_outputs=[True, False], meta=_kth_meta)(_kthvalue)

# self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), keepdim)
defvjp(kthvalue, lambda g, ans, self, k, dim=-1, keepdim=False: _value_selecting_backward(
    g[0], self.shape, dim, ans[1], keepdim))


# -- mode: libstdc++'s std::sort (Note [mode's index]) ------------------------------------------------------------
_THRESHOLD = 16                   # libstdc++'s _S_threshold


def _lt(a, b):
    return a[0] < b[0]            # PyTorch's comparator: the values alone


def _insertion_sort(a, lo, hi):
    for i in range(lo + 1, hi):
        val = a[i]
        if _lt(val, a[lo]):
            a[lo + 1:i + 1] = a[lo:i]
            a[lo] = val
        else:
            j = i
            while _lt(val, a[j - 1]):
                a[j] = a[j - 1]
                j -= 1
            a[j] = val


def _unguarded_insertion_sort(a, lo, hi):
    for i in range(lo, hi):
        val, j = a[i], i
        while _lt(val, a[j - 1]):
            a[j] = a[j - 1]
            j -= 1
        a[j] = val


def _move_median_to_first(a, result, x, y, z):
    if _lt(a[x], a[y]):
        m = y if _lt(a[y], a[z]) else (z if _lt(a[x], a[z]) else x)
    elif _lt(a[x], a[z]):
        m = x
    elif _lt(a[y], a[z]):
        m = z
    else:
        m = y
    a[result], a[m] = a[m], a[result]


def _unguarded_partition(a, first, last, pivot):
    while True:
        while _lt(a[first], a[pivot]):
            first += 1
        last -= 1
        while _lt(a[pivot], a[last]):
            last -= 1
        if not first < last:
            return first
        a[first], a[last] = a[last], a[first]
        first += 1


def _introsort_loop(a, first, last):
    while last - first > _THRESHOLD:
        mid = first + (last - first) // 2
        _move_median_to_first(a, first, first + 1, mid, last - 1)
        cut = _unguarded_partition(a, first + 1, last, first)
        _introsort_loop(a, cut, last)
        last = cut


def _std_sort(a):
    n = len(a)
    if n < 2:
        return
    _introsort_loop(a, 0, n)
    if n > _THRESHOLD:
        _insertion_sort(a, 0, _THRESHOLD)
        _unguarded_insertion_sort(a, _THRESHOLD, n)
    else:
        _insertion_sort(a, 0, n)


def _mode(row):
    pairs = [(v, i) for i, v in enumerate(row)]
    _std_sort(pairs)
    mode, at, run, best = 0, 0, 0, 0
    for i, (v, idx) in enumerate(pairs):
        run += 1
        if i == len(pairs) - 1 or v != pairs[i + 1][0]:
            if run > best:
                mode, at, best = v, idx, run
            run = 0
    return mode, at


_mode_rule, _mode_forward = _selection("mode", _mode, "biuf")


def _mode_meta(self, dim=-1, keepdim=False):
    return _mode_rule(self, dim, keepdim)


def _mode_op(self, dim=-1, keepdim=False):
    return _mode_forward(self, dim, keepdim)


_mode_op.__name__ = "mode"
mode = aten("mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)",
            "ModeBackward0", differentiable_outputs=[True, False], meta=_mode_meta)(_mode_op)

# self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), keepdim)
defvjp(mode, lambda g, ans, self, dim=-1, keepdim=False: _value_selecting_backward(
    g[0], self.shape, dim, ans[1], keepdim))


# -- addbmm: beta * self + alpha * the sum over the batch of batch1[b] @ batch2[b] -------------------------------
def _addbmm_meta(self, batch1, batch2, beta=1, alpha=1):
    for name, b in (("batch1", batch1), ("batch2", batch2)):
        if b.ndim != 3:
            raise ValueError(f"addbmm: {name} must be a 3D tensor, got {b.ndim}-D")
    if batch1.shape[0] != batch2.shape[0]:
        raise ValueError(f"addbmm: batch1 and batch2 must have same number of batches, got "
                         f"{batch1.shape[0]} and {batch2.shape[0]}")
    if batch1.shape[2] != batch2.shape[1]:
        raise ValueError(f"addbmm: incompatible matrix sizes for bmm ({batch1.shape[1]}x{batch1.shape[2]} and "
                         f"{batch2.shape[1]}x{batch2.shape[2]})")
    for b in (batch1, batch2):
        if self.dtype != b.dtype:
            raise TypeError(f"addbmm: self and mat2 must have the same dtype, but got {self.dtype} and {b.dtype}")
    check_dtype("addbmm", self, "iuf", "a non-bool")
    shape = (batch1.shape[1], batch2.shape[2])
    try:
        if np.broadcast_shapes(self.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"addbmm: self of shape {list(self.shape)} cannot be expanded to the product's shape "
                         f"{list(shape)}") from None
    return [(shape, np.dtype(self.dtype))]


@aten("addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
      "AddbmmBackward0", meta=_addbmm_meta)
def addbmm(self, batch1, batch2, beta=1, alpha=1):
    ((shape, dt),) = _addbmm_meta(self, batch1, batch2, beta, alpha)
    # PyTorch's CPU kernel: self expanded, then one addmm_ per batch (beta on the first only);
    # no batch: self * beta (zeros when beta is 0, self's NaNs ignored as BLAS does)
    out = np.zeros(shape, dt) if beta == 0 else (np.broadcast_to(self, shape) * np.asarray(beta).astype(dt)).astype(dt)
    for b in range(batch1.shape[0]):
        prod = np.matmul(batch1[b], batch2[b])
        out = (out + (prod if alpha == 1 else prod * np.asarray(alpha).astype(dt))).astype(dt)
    return np.ascontiguousarray(out)


def _batches_grad(g, batch1, batch2):
    # grad.unsqueeze(0).expand_symint({ batch1.sym_size(0), batch1.sym_size(1), batch2.sym_size(2) })
    return expand(unsqueeze(g, dim=0), size=[batch1.shape[0], batch1.shape[1], batch2.shape[2]])


def _times(x, alpha):
    return x if alpha == 1 else mul_scalar(x, other=alpha)


# self: maybe_multiply(grad, beta.conj()) (summed to self's shape)
# batch1: maybe_multiply(grad.unsqueeze(0).expand(...).bmm(batch2.transpose(1, 2).conj()), alpha.conj())
# batch2: maybe_multiply(batch1.transpose(1, 2).conj().bmm(grad.unsqueeze(0).expand(...)), alpha.conj())
defvjp(addbmm,
       lambda g, ans, self, batch1, batch2, beta=1, alpha=1: L.unbroadcast(_times(g, beta), self.shape),
       lambda g, ans, self, batch1, batch2, beta=1, alpha=1: _times(
           bmm(_batches_grad(g, batch1, batch2), transpose(batch2, dim0=1, dim1=2)), alpha),
       lambda g, ans, self, batch1, batch2, beta=1, alpha=1: _times(
           bmm(transpose(batch1, dim0=1, dim1=2), _batches_grad(g, batch1, batch2)), alpha))


# -- index_reduce: scatter_reduce along one dim with one index per source slice ---------------------------------
# Note [index_reduce as scatter_reduce]: index_reduce(self, dim, index, source) sends slice i of
# source along dim to slice index[i] of self: scatter_reduce with the index expanded to source's
# shape (every element of slice i pointing at index[i]). The forward and derivatives.yaml's
# index_reduce_backward (scatter_reduce_backward's formulas with index_select for gather and
# index_add for scatter_add) are then scatter_reduce's, on that index.
_INDEX_REDUCTIONS = ("prod", "mean", "amax", "amin")


def _index_reduce_meta(self, index, source, dim, reduce, include_self=True):
    name = "index_reduce"
    if reduce not in _INDEX_REDUCTIONS:
        raise ValueError(f"{name}(): expected reduce to be one of prod, mean, amax or amin but got {reduce}")
    d = _dim(dim, self.ndim)
    if np.dtype(index.dtype) not in (np.dtype(np.int32), _LONG):
        raise TypeError(f"{name}(): expected dtype int32/int64 for index but got {index.dtype}")
    if index.ndim > 1:
        raise ValueError(f"{name}(): index is supposed to be a vector, but got dim: {index.ndim}")
    if self.dtype != source.dtype:
        raise TypeError(f"{name}(): self ({self.dtype}) and source ({source.dtype}) must have the same scalar type")
    check_dtype(name, self, "iuf", "a non-bool")
    n = int(np.prod(index.shape, dtype=np.int64))
    if max(source.ndim, 1) != max(self.ndim, 1) or any(
            a != b for k, (a, b) in enumerate(zip(self.shape, source.shape)) if k != d):
        raise ValueError(f"{name}(): source tensor shape must match self tensor shape, excluding the specified "
                         f"dimension. Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    if n != (source.shape[d] if source.ndim else 1):
        raise ValueError(f"{name}(): number of indices ({n}) should be equal to source.size(dim): "
                         f"({source.shape[d] if source.ndim else 1}), for dim: {d}")
    return [(tuple(self.shape), np.dtype(self.dtype))]


def _expanded_index(index, source_shape, d):
    """``index`` (one per slice of source along d) as scatter_reduce's index: source's shape."""
    idx = np.asarray(_value(index)).astype(np.int64).reshape(-1)
    if not source_shape:
        return idx.reshape(())
    shape = [1] * len(source_shape)
    shape[d] = idx.size
    return np.ascontiguousarray(np.broadcast_to(idx.reshape(shape), tuple(source_shape)))


@aten("index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) "
      "-> Tensor", "IndexReduceBackward0", meta=_index_reduce_meta)
def index_reduce(self, index, source, dim, reduce, include_self=True):
    _index_reduce_meta(self, index, source, dim, reduce, include_self)
    d = _dim(dim, self.ndim)
    idx = _expanded_index(index, tuple(source.shape), d)
    if idx.size and (idx.min() < 0 or idx.max() >= (self.shape[d] if self.ndim else 1)):
        raise IndexError(f"index_reduce(): index out of range in self (dim {d} of size "
                         f"{self.shape[d] if self.ndim else 1})")
    if not self.ndim:
        return np.array(K_index.scatter_reduce(np.reshape(self, 1), 0, idx.reshape(1), np.reshape(source, 1), reduce,
                                               include_self)[0], self.dtype)
    return K_index.scatter_reduce(self, d, idx, source, reduce, include_self)


def _index_reduce_vjp(k):
    # self, source: index_reduce_backward(grad, self, dim, index, source, reduce, include_self, result)
    # (Note [index_reduce as scatter_reduce]: scatter_reduce_backward on the expanded index)
    def vjp(g, ans, self, index, source, dim, reduce, include_self=True):
        shape = tuple(self.shape)
        if not shape:
            flat = [L.reshape(x, shape=(1,)) for x in (g, ans, self, source)]
            out = _scatter_reduce_grads(*flat[:3], _expanded_index(index, (1,), 0), flat[3], 0, reduce,
                                        include_self)[k]
            return L.reshape(out, shape=())
        d = _dim(dim, len(shape))
        idx = _expanded_index(index, tuple(source.shape), d)
        return _scatter_reduce_grads(g, ans, self, idx, source, d, reduce, include_self)[k]
    return vjp


defvjp(index_reduce, _index_reduce_vjp(0), None, _index_reduce_vjp(1))


# -- put: self's elements, in row-major order, at index set to (or added) source's ---------------------------------
def _put_meta(self, index, source, accumulate=False):
    if np.dtype(index.dtype) != _LONG:
        raise TypeError(f"put(): expected a long tensor for index, but got {index.dtype}")
    if self.dtype != source.dtype:
        raise TypeError(f"put(): self and source expected to have the same dtype, but got self.dtype = {self.dtype} "
                        f"and source.dtype = {source.dtype}")
    n_idx, n_src = (int(np.prod(t.shape, dtype=np.int64)) for t in (index, source))
    if n_idx != n_src:
        raise ValueError(f"put(): expected source and index to have the same number of elements, but got "
                         f"source.numel() = {n_src}, index.numel() = {n_idx}")
    if n_idx and not int(np.prod(self.shape, dtype=np.int64)):
        raise ValueError("put(): tried to put into an empty tensor")
    return [(tuple(self.shape), np.dtype(self.dtype))]


def _put_positions(index, numel):
    """The flat positions ``index`` names (negative ones from the end); one out of range is refused."""
    idx = np.asarray(_value(index)).reshape(-1)
    if idx.size and (idx.min() < -numel or idx.max() >= numel):
        bad = idx[(idx < -numel) | (idx >= numel)][0]
        raise IndexError(f"put(): out of range: tried to access index {bad} on a tensor of {numel} elements")
    return np.where(idx < 0, idx + numel, idx)


@aten("put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor", "PutBackward0",
      meta=_put_meta)
def put(self, index, source, accumulate=False):
    _put_meta(self, index, source, accumulate)
    out = np.array(self, copy=True, order="C")
    pos = _put_positions(index, out.size)
    flat, vals = out.reshape(-1), np.asarray(source).reshape(-1)
    if accumulate:
        np.add.at(flat, pos, vals)
    else:
        flat[pos] = vals                    # a repeated position takes its last value, as PyTorch's CPU loop
    return out


def _take(g, index, shape):
    # grad.take(index).reshape_as(source): the flat gradient at the (wrapped) positions
    pos = _put_positions(index, int(np.prod(g.shape, dtype=np.int64)))
    return L.reshape(index_select(L.reshape(g, shape=(-1,)), pos, dim=0), shape=tuple(shape))


# self: accumulate ? grad : grad.put(index, zeros_like(source), false)
# source: grad.take(index).reshape_as(source)
defvjp(put,
       lambda g, ans, self, index, source, accumulate=False: g if accumulate else put(
           g, np.asarray(_value(index)), zeros(source.shape, g), accumulate=False),
       None,
       lambda g, ans, self, index, source, accumulate=False: _take(g, index, source.shape))
