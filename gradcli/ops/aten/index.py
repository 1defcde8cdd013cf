"""ATen indexing entries: ``index.Tensor``, ``index_put``, ``index_select``, ``gather``,
``scatter.src``, ``scatter.value``, ``scatter_add``, ``scatter_reduce.two``, ``masked_scatter`` and
``masked_select``.

The forwards are ``gradcli.ops.aten_kernels.index`` (every index value checked
before use: Note [indices are checked before use]). The VJPs are these ops again
(derivatives.yaml: gather's is a scatter_add into zeros, index's an accumulating
index_put, scatter's a gather), so a create_graph backward records them and a second
derivative follows. Index tensors are never differentiable.
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import index as K
from ..aten_kernels._common import array_module
from ..library import _value
from .pointwise import masked_fill, zeros
from .registry import aten, defvjp
from .shape import _dim


def _nd(x):
    return max(x.ndim, 1)


def _sizes(x):
    return tuple(x.shape) if x.ndim else (1,)


# -- index.Tensor ---------------------------------------------------------------------------
def _index_shape(self, indices):
    """The shape ``self[indices]`` has (NumPy's advanced indexing), or None when a bool mask
    makes it depend on the mask's values."""
    K.check_index_dtypes(indices)
    if any(i is not None and K._is_mask(i) for i in indices):
        n = sum(i.ndim if i is not None and K._is_mask(i) else 1 for i in indices)
        if n > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {n})")
        return None
    if len(indices) > self.ndim:
        raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {len(indices)})")
    used = [d for d, i in enumerate(indices) if i is not None]
    if not used:
        return tuple(self.shape)
    shapes = [tuple(indices[d].shape) for d in used]
    try:
        b = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(str(list(s)) for s in shapes)) from None
    rest = [n for d, n in enumerate(self.shape) if d not in used]
    if used == list(range(used[0], used[-1] + 1)):      # adjacent: the result dims stay in place
        return tuple(self.shape[:used[0]]) + b + tuple(self.shape[used[-1] + 1:])
    return b + tuple(rest)


def _index_meta(self, indices):
    shape = _index_shape(self, indices)
    return None if shape is None else [(shape, self.dtype)]


@aten("index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", "IndexBackward0", meta=_index_meta)
def index(self, indices):
    return K.index(self, indices)


def _index_vjp(g, ans, self, indices):
    # self: index_backward(grad.new_zeros_symint(self.sym_sizes(), self.options()), indices, grad):
    # an accumulating index_put into zeros (repeated indices add up)
    return index_put(zeros(self.shape, g), [_value(i) if i is not None else None for i in indices], g,
                     accumulate=True)


defvjp(index, _index_vjp, None)


# -- index_put --------------------------------------------------------------------------------
def _index_put_meta(self, indices, values, accumulate=False):
    if values.dtype != self.dtype:
        raise TypeError(f"index_put: Index put requires the source and destination dtypes match, got "
                        f"{self.dtype} for the destination and {values.dtype} for the source.")
    shape = _index_shape(self, indices)
    if shape is not None:
        try:
            fits = np.broadcast_shapes(tuple(values.shape), shape) == shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"index_put: shape mismatch: value tensor of shape {list(values.shape)} cannot be "
                             f"broadcast to indexing result of shape {list(shape)}")
    return [(tuple(self.shape), self.dtype)]


@aten("index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
      "IndexPutBackward0", meta=_index_put_meta)
def index_put(self, indices, values, accumulate=False):
    return K.index_put(self, indices, values, accumulate)


def _raw(indices):
    return [_value(i) if i is not None else None for i in indices]


# self: "accumulate ? grad : grad.index_put(indices, zeros_like(values), false)"
def _index_put_self_vjp(g, ans, self, indices, values, accumulate=False):
    if accumulate:
        return g
    return index_put(g, _raw(indices), zeros(values.shape, g), accumulate=False)


# values: grad.index(indices), summed to values' shape where it was broadcast
def _index_put_values_vjp(g, ans, self, indices, values, accumulate=False):
    return L.unbroadcast(index(g, _raw(indices)), tuple(values.shape))


defvjp(index_put, _index_put_self_vjp, None, _index_put_values_vjp)


# -- index_select -----------------------------------------------------------------------------
def _check_index_select(self, dim, index):
    d = _dim(dim, self.ndim)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if np.dtype(index.dtype) not in K.INDEX_DTYPES:
        raise TypeError(f"index_select(): Expected dtype int32 or int64 for index, got {index.dtype}")
    return d


def _index_select_meta(self, index, dim):
    d = _check_index_select(self, dim, index)
    n = int(np.prod(index.shape, dtype=np.int64))
    if self.ndim == 0:
        return [(tuple(index.shape), self.dtype)]
    return [(tuple(self.shape[:d]) + (n,) + tuple(self.shape[d + 1:]), self.dtype)]


@aten("index_select(Tensor self, int dim, Tensor index) -> Tensor", "IndexSelectBackward0",
      meta=_index_select_meta)
def index_select(self, index, dim):
    return K.index_select(self, _check_index_select(self, dim, index), index)


def _index_select_vjp(g, ans, self, index, dim):
    # self: index_select_backward_symint(grad, self.sym_sizes(), dim, index): zeros with grad
    # added at the index along dim (index_add), here an accumulating index_put
    shape = tuple(self.shape)
    if not shape:
        return L.reshape(g, shape=())
    d = _dim(dim, len(shape))
    idx = _value(index).reshape(-1)
    return index_put(zeros(shape, g), [None] * d + [idx], L.reshape(g, shape=shape[:d] + (idx.size,) + shape[d + 1:]),
                     accumulate=True)


defvjp(index_select, _index_select_vjp, None)


# -- gather / scatter -----------------------------------------------------------------------------
def _check_index_dtype(name, index):
    if np.dtype(index.dtype) not in K.INDEX_DTYPES:
        raise TypeError(f"{name}(): Expected dtype int64 for index, got {index.dtype}")


def _check_gather(self, dim, index):
    _check_index_dtype("gather", index)
    d = _dim(dim, self.ndim)
    if _nd(index) != _nd(self):
        raise ValueError("gather: Index tensor must have the same number of dimensions as input tensor")
    si, ss = _sizes(index), _sizes(self)
    for k in range(len(ss)):
        if k != d and si[k] > ss[k]:
            raise ValueError(f"gather: Size does not match at dimension {k} expected index {list(index.shape)} to "
                             f"be no larger than self {list(self.shape)} apart from dimension {d}")
    return d


def _check_scatter(name, self, dim, index, src=None):
    _check_index_dtype(name, index)
    d = _dim(dim, self.ndim)
    if src is not None and hasattr(src, "dtype") and np.dtype(src.dtype) != np.dtype(self.dtype):
        raise TypeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    if _nd(index) != _nd(self) or (src is not None and _nd(index) != _nd(src)):
        raise ValueError(f"{name}: Index tensor must have the same number of dimensions as self tensor")
    si, ss = _sizes(index), _sizes(self)
    sr = _sizes(src) if src is not None else None
    if any(k != d and si[k] > ss[k] for k in range(len(ss))) or (
            sr is not None and any(si[k] > sr[k] for k in range(len(si)))):
        raise ValueError(f"{name}: Expected index {list(index.shape)} to be no larger than self "
                         f"{list(self.shape)} apart from dimension {d}"
                         + (f" and to be no larger size than src {list(src.shape)}" if src is not None else ""))
    return d


def _gather_meta(self, index, dim, sparse_grad=False):
    _check_gather(self, dim, index)
    return [(tuple(index.shape), self.dtype)]


@aten("gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor", "GatherBackward0",
      meta=_gather_meta)
def gather(self, index, dim, sparse_grad=False):
    return K.gather(self, _check_gather(self, dim, index), index)


# self: gather_backward(grad, self, dim, index, sparse_grad): zeros.scatter_add(dim, index, grad)
defvjp(gather, lambda g, ans, self, index, dim, sparse_grad=False: scatter_add(
    zeros(self.shape, g), _value(index), g, dim=dim), None)


def _scatter_meta(self, index, src, dim):
    _check_scatter("scatter", self, dim, index, src)
    return [(tuple(self.shape), self.dtype)]


@aten("scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", "ScatterBackward0",
      meta=_scatter_meta)
def scatter_src(self, index, src, dim):
    return K.scatter(self, _check_scatter("scatter", self, dim, index, src), index, src)


def _scatter_value_meta(self, index, dim, value):
    _check_scatter("scatter", self, dim, index)
    return [(tuple(self.shape), self.dtype)]


@aten("scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor", "ScatterBackward1",
      meta=_scatter_value_meta)
def scatter_value(self, index, dim, value):
    return K.scatter(self, _check_scatter("scatter", self, dim, index), index, value)


# self: grad.scatter(dim, index, 0); src: grad.gather(dim, index)
def _scatter_self_vjp(g, ans, self, index, *rest, dim, **kw):
    return scatter_value(g, _value(index), dim=dim, value=0)


defvjp(scatter_src, _scatter_self_vjp, None,
       lambda g, ans, self, index, src, dim: gather(g, _value(index), dim=dim))
defvjp(scatter_value, _scatter_self_vjp, None)


def _scatter_add_meta(self, index, src, dim):
    _check_scatter("scatter_add", self, dim, index, src)
    return [(tuple(self.shape), self.dtype)]


@aten("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", "ScatterAddBackward0",
      meta=_scatter_add_meta)
def scatter_add(self, index, src, dim):
    return K.scatter_add_(self, _check_scatter("scatter_add", self, dim, index, src), index, src)


# self: grad; src: grad.gather(dim, index)
defvjp(scatter_add, lambda g, ans, self, index, src, dim: g, None,
       lambda g, ans, self, index, src, dim: gather(g, _value(index), dim=dim))


# -- masked_scatter ---------------------------------------------------------------------------------
def _check_masked_scatter(self, mask, source):
    if np.dtype(mask.dtype) != np.dtype(bool):
        raise TypeError(f"masked_scatter: only supports boolean masks, but got mask with dtype {mask.dtype}")
    if np.dtype(self.dtype) != np.dtype(source.dtype):
        raise TypeError(f"masked_scatter: expected self and source to have same dtypes but got {self.dtype} and "
                        f"{source.dtype}")
    try:
        return tuple(np.broadcast_shapes(tuple(self.shape), tuple(mask.shape)))
    except ValueError:
        raise ValueError(f"masked_scatter: the shape of the mask {list(mask.shape)} does not broadcast with self "
                         f"{list(self.shape)}") from None


@aten("masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor", "MaskedScatterBackward0",
      meta=lambda self, mask, source: [(_check_masked_scatter(self, mask, source), self.dtype)])
def masked_scatter(self, mask, source):
    _check_masked_scatter(self, mask, source)
    return K.masked_scatter(self, mask, source)


def _masked_scatter_source_vjp(g, ans, self, mask, source):
    # source: masked_scatter_backward_symint(grad, mask, source.sym_sizes()): the gradient's
    # masked elements in order, padded with zeros to source's size (an index_put into zeros)
    m = np.ascontiguousarray(np.broadcast_to(_value(mask), tuple(g.shape)))
    picked = index(g, [m])
    n = int(np.prod(source.shape, dtype=np.int64))
    first = array_module(_value(g)).arange(int(m.sum()), dtype=np.int64)
    return L.reshape(index_put(zeros((n,), g), [first], picked), shape=tuple(source.shape))


# self: grad.masked_fill(mask, 0), summed to self's shape; mask: not differentiable
defvjp(masked_scatter,
       lambda g, ans, self, mask, source: L.unbroadcast(masked_fill(g, _value(mask), value=0), tuple(self.shape)),
       None, _masked_scatter_source_vjp)


# -- masked_select ----------------------------------------------------------------------------------
def _check_masked_select(self, mask):
    if np.dtype(mask.dtype) != np.dtype(bool):
        raise TypeError(f"masked_select: expected BoolTensor for mask, got {np.dtype(mask.dtype)}")
    try:
        return tuple(np.broadcast_shapes(tuple(self.shape), tuple(mask.shape)))
    except ValueError:
        raise ValueError(f"masked_select: the shape of the mask {list(mask.shape)} does not broadcast with self "
                         f"{list(self.shape)}") from None


def _masked_select_meta(self, mask):
    # Note [a shape the values decide] (ctc.py): the length is the mask's count of trues
    _check_masked_select(self, mask)
    return None


@aten("masked_select(Tensor self, Tensor mask) -> Tensor", "MaskedSelectBackward0", meta=_masked_select_meta)
def masked_select(self, mask):
    """``self`` and ``mask`` broadcast together; the elements where ``mask`` is true, in row-major order."""
    shape = _check_masked_select(self, mask)
    xp = array_module(self, mask)
    return xp.ascontiguousarray(xp.broadcast_to(self, shape)[xp.broadcast_to(mask, shape)])


def _masked_select_backward(g, self, mask):
    """Zeros of ``self`` and ``mask`` broadcast, masked_scatter'd with ``g`` (the engine sums it to
    self's shape, as PyTorch's validate_outputs)."""
    shape = tuple(np.broadcast_shapes(tuple(self.shape), tuple(mask.shape)))
    return masked_scatter(zeros(shape, g), _value(mask), g)


# self: masked_select_backward(grad, self, mask); mask: non_differentiable. PyTorch's node saves self
# (Note [What a node saved]): the VJP hands it on whole, so that an in-place change of self fails as there
defvjp(masked_select, lambda g, ans, self, mask: _masked_select_backward(g, self, mask), None)


# -- scatter_reduce ---------------------------------------------------------------------------------
def _check_scatter_reduce(self, index, src, dim, reduce):
    if reduce not in K.SCATTER_REDUCTIONS:
        raise ValueError(f"scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return _check_scatter("scatter_reduce", self, dim, index, src)


def _scatter_reduce_meta(self, index, src, dim, reduce, include_self=True):
    _check_scatter_reduce(self, index, src, dim, reduce)
    return [(tuple(self.shape), self.dtype)]


@aten("scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) "
      "-> Tensor", "ScatterReduceBackward0", meta=_scatter_reduce_meta)
def scatter_reduce(self, index, src, dim, reduce, include_self=True):
    d = _check_scatter_reduce(self, index, src, dim, reduce)
    return K.scatter_reduce(self, d, index, src, reduce, include_self)


def _as(mask, like):
    """A bool mask as a constant array of ``like``'s dtype."""
    return np.asarray(mask).astype(_value(like).dtype)


# Note [scatter_reduce's gradient]: derivatives.yaml's scatter_reduce_backward, written with
# ops: sum passes grad on; mean divides it by each position's count; amax/amin share it
# equally among the values equal to the result (ties); prod multiplies it by the product of
# the others, computed with zeros masked to one so that a single zero gets the product of
# the rest. Without include_self the positions scattered to give self no gradient.
def _scatter_reduce_grads(g, ans, self, index, src, dim, reduce, include_self):
    idx = _value(index)
    sv, srcv, res = _value(self), _value(src), _value(ans)
    if reduce == "sum":
        gs, gsrc = g, gather(g, idx, dim=dim)
    elif reduce == "mean":
        n = np.ones(sv.shape, sv.dtype) if include_self else np.zeros(sv.shape, sv.dtype)
        n = K.scatter_add_(n, _dim(dim, sv.ndim), idx, np.ones(srcv.shape, sv.dtype))
        n = np.where(n == 0, 1, n).astype(sv.dtype)
        gs = L.div(g, n)
        gsrc = gather(gs, idx, dim=dim)
    elif reduce in ("amax", "amin"):
        value = K.gather(res, _dim(dim, sv.ndim), idx)
        self_is = _as(sv == res, g)
        src_is = _as(srcv == value, g)
        count = K.scatter_add_(self_is, _dim(dim, sv.ndim), idx, src_is)
        share = L.div(g, count)
        gs = L.mul(share, self_is)
        gsrc = L.mul(gather(share, idx, dim=dim), src_is)
    else:                                           # prod
        masked_self = masked_fill(self, sv == 0, value=1)
        gs = L.mul(g, L.div(scatter_reduce(masked_self, idx, src, dim=dim, reduce="prod", include_self=include_self),
                            masked_self))
        src_zero = srcv == 0
        zeros_at = K.gather(K.scatter_add_(np.zeros(sv.shape, sv.dtype), _dim(dim, sv.ndim), idx,
                                           src_zero.astype(sv.dtype)), _dim(dim, sv.ndim), idx)
        single = src_zero & (zeros_at == 1)
        masked_src_result = scatter_reduce(self, idx, masked_fill(src, single, value=1), dim=dim, reduce="prod",
                                           include_self=include_self)
        through_single = gather(L.mul(g, masked_src_result), idx, dim=dim)
        others = L.div(gather(L.mul(g, ans), idx, dim=dim), masked_fill(src, src_zero, value=1))
        gsrc = L.add(L.mul(through_single, _as(single, g)), L.mul(others, _as(~single, g)))
    if not include_self:
        touched = K.scatter(np.zeros(sv.shape, bool), _dim(dim, sv.ndim), idx, True)
        gs = masked_fill(gs, touched, value=0)
    return gs, gsrc


defvjp(scatter_reduce,
       lambda g, ans, self, index, src, dim, reduce, include_self=True:
       _scatter_reduce_grads(g, ans, self, index, src, dim, reduce, include_self)[0],
       None,
       lambda g, ans, self, index, src, dim, reduce, include_self=True:
       _scatter_reduce_grads(g, ans, self, index, src, dim, reduce, include_self)[1])
