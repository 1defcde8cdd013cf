"""``_embedding_bag`` and its backward ops as array functions, with the bookkeeping outputs
PyTorch's CPU kernel returns (``offset2bag``, ``bag_size``, ``max_indices``) exactly as it
returns them, since its backward reads them.

Note [bags]: with B bags (``len(offsets)``, one less with ``include_last_offset``), bag ``b``
holds the indices from ``offsets[b]`` to ``offsets[b + 1]``, and the last bag runs to the end of
``indices`` (with ``include_last_offset``, whose last offset must then be ``len(indices)``). An index equal to ``padding_idx`` counts for nothing (no row, no size); an
empty bag gives zeros. ``mode``: 0 sum (``per_sample_weights`` scale the rows), 1 mean, 2 max.
"""
import numpy as np

from ...devices import to_host
from ._common import array_module, check_dtype, scatter_add

MODES = {0: "sum", 1: "mean", 2: "max"}


def _no_offset2bag(dtype, mode, padding_idx):
    """Note [no offset2bag on the fast path]: for a sum in float32 or float16 without padding,
    PyTorch's CPU kernel takes its index-select fast path and returns an empty ``offset2bag``
    (its backward makes one from the offsets again); gradcli returns what it returns."""
    return mode == 0 and int(padding_idx) < 0 and np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float16))


def bags_of(xp, offset2bag, offsets, n, n_bags):
    """``offset2bag`` as the backward reads it: made from the offsets where the forward's fast
    path left it empty (Note [no offset2bag on the fast path]); the last bag runs to the end."""
    if offset2bag.shape[0] == n:
        return offset2bag.astype(np.int64)
    bag = xp.searchsorted(offsets.astype(np.int64), xp.arange(n), side="right") - 1
    return xp.minimum(bag, n_bags - 1)


def check(weight, indices, offsets, mode, per_sample_weights, include_last_offset, sparse=False, padding_idx=-1):
    """The checks PyTorch makes that need no values; the shapes and dtypes of the four outputs."""
    check_dtype("embedding_bag", weight, "f")
    if len(weight.shape) != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {len(weight.shape)}")
    for name, t in (("indices", indices), ("offsets", offsets)):
        if np.dtype(t.dtype) not in (np.dtype(np.int64), np.dtype(np.int32)):
            raise TypeError(f"embedding_bag: {name} must be an int64 or int32 tensor, got {np.dtype(t.dtype)}")
    if len(indices.shape) != 1:
        # gradcli refuses what PyTorch's kernel reads as its first dim only (F.embedding_bag
        # flattens a 2-D input and makes its offsets before it records the op)
        raise ValueError(f"embedding_bag: input has to be a 1D Tensor, but got Tensor of dimension "
                         f"{len(indices.shape)}")
    if len(offsets.shape) != 1:
        raise ValueError(f"offsets has to be a 1D Tensor, but got Tensor of dimension {len(offsets.shape)}")
    if mode not in MODES:
        raise ValueError("`mode` must be sum, mean, or max.")
    if sparse:
        raise ValueError("embedding_bag: sparse=True (a sparse weight gradient) is not supported: gradcli's "
                         "gradients are dense")
    n_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    if n_bags < 1:
        # PyTorch 2.13 crashes the process on no offsets (and on one with include_last_offset)
        raise ValueError(f"embedding_bag: offsets must name at least one bag, got {offsets.shape[0]} offsets"
                         f"{' with include_last_offset' if include_last_offset else ''}")
    if per_sample_weights is not None:
        if mode != 0:
            raise ValueError("embedding_bag: per_sample_weights only supported with mode='sum'")
        if np.dtype(per_sample_weights.dtype) != np.dtype(weight.dtype):
            raise TypeError(f"embedding_bag: per_sample_weights ({np.dtype(per_sample_weights.dtype)}) must have "
                            f"weight's dtype ({np.dtype(weight.dtype)})")
        if tuple(per_sample_weights.shape) != tuple(indices.shape):
            raise ValueError(f"embedding_bag: per_sample_weights has shape {list(per_sample_weights.shape)}, "
                             f"indices {list(indices.shape)} (one weight per index)")
    both32 = np.dtype(indices.dtype) == np.dtype(offsets.dtype) == np.dtype(np.int32)
    idt = np.dtype(np.int32) if both32 else np.dtype(np.int64)
    d = weight.shape[1]
    n2b = 0 if _no_offset2bag(weight.dtype, mode, padding_idx) else indices.shape[0]
    return [((n_bags, d), np.dtype(weight.dtype)), ((n2b,), idt), ((n_bags,), idt),
            ((n_bags, d) if mode == 2 else (n_bags,), idt)]


def _offset2bag(xp, indices, offsets, n_bags, num_weights):
    """Each index's bag (Note [bags]), the offsets checked first as PyTorch checks them."""
    n = indices.shape[0]
    off = offsets[:n_bags].astype(np.int64)
    if int(offsets[0]) != 0:
        raise ValueError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                         f"position 0. However, got {int(offsets[0])}")
    if int(offsets[-1]) > n:
        raise ValueError(f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of "
                         f"{int(offsets[-1])}")
    if offsets.shape[0] > n_bags and int(offsets[-1]) != n:
        # PyTorch's float64 kernel runs the last bag to the end of the indices, its float32 backward
        # reads memory it never wrote: gradcli asks for the documented last offset
        raise ValueError(f"embedding_bag: with include_last_offset, offsets[-1] must be the number of indices "
                         f"({n}), got {int(offsets[-1])}")
    if n_bags > 1 and bool((off[1:] < off[:-1]).any()):
        raise ValueError(f"embedding_bag: offsets must not decrease, got {offsets.tolist()}")
    if n and (int(indices.min()) < 0 or int(indices.max()) >= num_weights):
        bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
        raise ValueError(f"embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be {bad}")
    # the last bag whose offset is at most the position (searchsorted, right side)
    return xp.searchsorted(off, xp.arange(n), side="right") - 1


def _bag_sums(xp, rows, offsets, n_bags):
    """Each bag's sum of its rows: the bags are runs of consecutive rows (Note [bags]), so one
    ``add.reduceat`` sums them all (an empty bag, which reduceat would give one row, is zero)."""
    n, d = rows.shape
    out = xp.zeros((n_bags, d), rows.dtype)
    if n == 0:
        return out
    starts = offsets[:n_bags].astype(np.int64)
    ends = xp.concatenate([starts[1:], xp.asarray([n], dtype=np.int64)])
    filled = ends > starts
    sums = xp.add.reduceat(rows, xp.minimum(starts, n - 1), axis=0)
    out[filled] = sums[filled]
    return out


def _bag_max(xp, weight, idx, bag, n_bags):
    """Each bag's column-wise maximum of its rows and the row index it came from.

    Note [the bag maximum's scan]: PyTorch's kernel scans a bag's rows in order and keeps a
    value only when it is greater than the kept one: the first maximum wins a tie, a NaN
    met later never wins, and a NaN met first is never replaced. So: the first row's value
    where it is NaN, else the largest non-NaN value at its first position; an empty bag
    gives zeros and index 0."""
    if xp is not np:         # ufunc.at of minimum and fmax: computed on the host (CuPy has neither)
        out, arg = _bag_max(np, to_host(weight), to_host(idx), to_host(bag), n_bags)
        return xp.asarray(out), xp.asarray(arg)
    d = weight.shape[1]
    out = xp.zeros((n_bags, d), weight.dtype)
    arg = xp.zeros((n_bags, d), np.int64)
    if idx.size == 0:
        return out, arg
    rows = weight[idx]                                        # (n, d), in the bag's order
    pos = xp.arange(idx.size)
    first = xp.full(n_bags, idx.size, np.int64)
    xp.minimum.at(first, bag, pos)
    filled = first < idx.size
    best = xp.full((n_bags, d), -np.inf, weight.dtype)
    xp.fmax.at(best, bag, rows)                               # the largest non-NaN value
    is_best = (rows == best[bag]) & ~xp.isnan(rows)
    where = xp.full((n_bags, d), idx.size, np.int64)
    bags = xp.broadcast_to(bag[:, None], rows.shape)[is_best]
    cols = xp.broadcast_to(xp.arange(d), rows.shape)[is_best]
    xp.minimum.at(where, (bags, cols), xp.broadcast_to(pos[:, None], rows.shape)[is_best])
    start = rows[xp.minimum(first, idx.size - 1)]             # each bag's first row
    nan_first = xp.isnan(start) & filled[:, None]
    found = where < idx.size
    chosen = xp.where(nan_first, xp.minimum(first, idx.size - 1)[:, None], xp.minimum(where, idx.size - 1))
    keep = nan_first | found
    out = xp.where(keep, rows[chosen, xp.arange(d)], 0).astype(weight.dtype)
    arg = xp.where(keep, idx[chosen], 0)
    return out, arg


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """``aten._embedding_bag(...)`` -> [output, offset2bag, bag_size, max_indices] (Note [bags]).

    >>> import numpy as np
    >>> out = embedding_bag(np.arange(6.0).reshape(3, 2), np.array([0, 2, 1]), np.array([0, 2]), mode=1)
    >>> out[0].tolist(), out[1].tolist(), out[2].tolist()
    ([[2.0, 3.0], [2.0, 3.0]], [0, 0, 1], [2, 1])
    """
    xp = array_module(weight, indices, offsets)
    shapes = check(weight, indices, offsets, mode, per_sample_weights, include_last_offset, sparse, padding_idx)
    (n_bags, d), dt = shapes[0]
    idt = shapes[1][1]
    bag = _offset2bag(xp, indices, offsets, n_bags, weight.shape[0])
    idx = indices.astype(np.int64)
    keep = idx != int(padding_idx)
    rows = weight[idx]
    if not bool(keep.all()):
        rows = rows * keep[:, None]
    counts = xp.bincount(bag[keep], minlength=n_bags).astype(np.int64) if idx.size else xp.zeros(n_bags, np.int64)
    if mode == 2:
        out, arg = _bag_max(xp, weight, idx[keep], bag[keep], n_bags)
        return [out, bag.astype(idt), counts.astype(idt), arg.astype(idt)]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None]
    out = _bag_sums(xp, rows.astype(dt, copy=False), offsets, n_bags)
    if mode == 1:
        out = xp.where(counts[:, None] > 0, out / xp.maximum(counts, 1)[:, None].astype(dt), 0).astype(dt)
        return [out, bag.astype(idt), counts.astype(idt), counts.astype(idt)]
    zeros = xp.zeros(n_bags, idt)
    if _no_offset2bag(dt, mode, padding_idx):
        bag = xp.zeros(0, idt)
    return [out, bag.astype(idt), zeros, zeros.copy()]


def _frequency_scale(xp, idx, num_weights):
    """Note [embedding_bag's frequency scale]: PyTorch 2.13's CPU backward (sum and mean) groups
    the sorted indices by value and divides group ``i``'s rows by the count of the value at
    *position* ``i`` of the sorted indices, not of the group's own value; gradcli divides as it
    does, so that its gradients are PyTorch's."""
    order = np.sort(to_host(idx))
    uniq = np.unique(order)
    counts = np.bincount(order, minlength=num_weights)
    scale = np.ones(num_weights)
    for i, value in enumerate(uniq):
        scale[value] = 1.0 / counts[order[i]]
    return xp.asarray(scale)[idx]


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, per_sample_weights, padding_idx):
    """``aten._embedding_bag_backward(...)`` (dense): the weight's gradient."""
    xp = array_module(grad, indices)
    num_weights = int(num_weights)
    d = grad.shape[1]
    out = xp.zeros((num_weights, d), grad.dtype)
    if mode == 2:
        sizes = bag_size.astype(np.int64)
        b = xp.flatnonzero(sizes > 0)
        cols = xp.broadcast_to(xp.arange(d), (b.size, d))
        scatter_add(xp, out, (maximum_indices[b].astype(np.int64), cols), grad[b])
        return out
    idx = indices.astype(np.int64)
    bag = bags_of(xp, offset2bag, offsets, idx.shape[0], grad.shape[0])
    keep = idx != int(padding_idx)
    rows = grad[bag]
    if mode == 1:
        sizes = bag_size.astype(np.int64)[bag]
        rows = rows / xp.maximum(sizes, 1)[:, None].astype(grad.dtype)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None]
    if scale_grad_by_freq and idx.size:
        rows = rows * _frequency_scale(xp, idx, num_weights)[:, None].astype(grad.dtype)
    scatter_add(xp, out, idx[keep], rows[keep].astype(grad.dtype, copy=False))
    return out


def per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx):
    """``aten._embedding_bag_per_sample_weights_backward(...)``: each index's weight's gradient,
    the dot product of its bag's gradient and its row (zero for padding)."""
    if mode != 0:
        raise ValueError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    idx = indices.astype(np.int64)
    bag = bags_of(array_module(grad, indices), offset2bag, offsets, idx.shape[0], grad.shape[0])
    out = (grad[bag] * weight[idx]).sum(-1)
    return (out * (idx != int(padding_idx))).astype(grad.dtype, copy=False)
