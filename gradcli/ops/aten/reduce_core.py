"""Core ATen reductions and orderings: ``any``, ``amax``/``amin``, ``argmax``/``argmin``,
``max.dim``/``min.dim``, ``prod``, ``var``, ``cumsum``, ``sort``, ``topk``.

Formulas follow PyTorch 2.13's ``tools/autograd/derivatives.yaml``; the comment above each
VJP names the formula there. Each entry carries its shape rule (``meta``), computed from the
input's shape without touching values.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> values, indices = OPS["aten.max.dim"](np.array([[1.0, 3.0], [4.0, 2.0]]), dim=1)
    >>> values, indices
    (array([3., 4.]), array([1, 0]))
"""
from __future__ import annotations

import numpy as np

from ...devices import scalar
from .. import library as L
from ..aten_kernels._common import check_dtype
from ..library import _value
from .nn import _axes
from .pointwise import as_dtype, zeros
from .registry import aten, defvjp, not_differentiable
from .shape import _dim, contiguous
from .tensor_iterator import lay_out

_LONG = np.dtype(np.int64)
_BOOL = np.dtype(bool)


def _contiguous(x, dtype=None):
    """``x`` C-contiguous (a 0-dim array stays 0-dim, where np.ascontiguousarray makes it 1-dim)."""
    x = np.asarray(x, dtype)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def _kept(shape, axes, keepdim):
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _check_nonempty_dims(name, shape, axes):
    """Reducing a zero-size dim has no identity for a max, a min or an arg-index."""
    for a in axes:
        if shape[a] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {a} to have non-zero size.")


def _restore(g, shape, axes, keepdim):
    """``restore_reduced_dims`` then expanded: a reduction's gradient at the input's shape."""
    return L.expand_reduced(g, tuple(shape), axes, keepdim)


# -- any -----------------------------------------------------------------------------------------------
def _any_dtype(self):
    return np.dtype(np.uint8) if np.dtype(self.dtype) == np.uint8 else _BOOL   # uint8 stays uint8


def _any(self, axes, keepdim):
    return as_dtype(np.any(np.asarray(self) != 0, axis=axes, keepdims=keepdim), _any_dtype(self))


@aten("any(Tensor self) -> Tensor", None, saves=False,
      meta=lambda self: [((), _any_dtype(self))])
def any_all(self):
    return _any(self, None, False)


@aten("any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor", None, saves=False,
      meta=lambda self, dim, keepdim=False: [(_kept(self.shape, (_dim(dim, self.ndim),) if self.ndim else (),
                                                     keepdim), _any_dtype(self))])
def any_dim(self, dim, keepdim=False):
    d = _dim(dim, self.ndim)
    return _any(self, (d,) if self.ndim else None, keepdim)


def _any_dims_axes(dim, ndim):
    # Note [any over no dims]: any.dims with dim=None reduces every dim; with dim=[] it reduces
    # none (each element's truth value), where sum.dim_IntList's [] reduces every dim
    if dim is None:
        return tuple(range(ndim))
    return _axes(dim, ndim) if len(dim) else ()


@aten("any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor", None, saves=False,
      meta=lambda self, dim=None, keepdim=False: [(_kept(self.shape, _any_dims_axes(dim, self.ndim), keepdim),
                                                    _any_dtype(self))])
def any_dims(self, dim=None, keepdim=False):
    return _any(self, _any_dims_axes(dim, self.ndim), keepdim)


for _op in (any_all, any_dim, any_dims):
    not_differentiable(_op)


# -- amax, amin ------------------------------------------------------------------------------------------
def _extreme_meta(name):
    def rule(self, dim=(), keepdim=False):
        axes = _axes(dim, self.ndim)
        if not self.ndim:
            axes = ()
        _check_nonempty_dims(name, self.shape, axes if len(dim) else ())
        if not len(dim) and int(np.prod(self.shape)) == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                             "Specify the reduction dim with the 'dim' argument.")
        return [(_kept(self.shape, axes, keepdim), np.dtype(self.dtype))]
    return rule


def _extreme(name, fn):
    def forward(self, dim=(), keepdim=False):
        _extreme_meta(name)(self, dim, keepdim)
        axes = _axes(dim, self.ndim) if self.ndim else None
        return as_dtype(fn(self, axis=axes, keepdims=keepdim), self.dtype)
    forward.__name__ = name
    return forward


amax = aten("amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor", "AmaxBackward0",
            meta=_extreme_meta("amax"))(_extreme("amax", np.max))
amin = aten("amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor", "AminBackward0",
            meta=_extreme_meta("amin"))(_extreme("amin", np.min))


def _amax_vjp(g, ans, self, dim=(), keepdim=False):
    # scale_grad_by_count(restore_reduced_dims(grad, dim, keepdim),
    #                     restore_reduced_dims(result, dim, keepdim) == self, dim):
    # (grad / mask.sum(dim, true)) * mask
    shape = tuple(self.shape)
    axes = _axes(dim, len(shape)) if shape else ()
    s = _value(self)
    r = _value(ans) if keepdim or not shape else np.expand_dims(_value(ans), axes)
    mask = (r == s)
    count = np.sum(mask, axis=axes, keepdims=True).astype(_value(g).dtype)
    g_kept = g if keepdim or not shape else L.reshape(g, shape=_kept(shape, axes, True))
    return L.mul(L.div(g_kept, count), mask.astype(_value(g).dtype))


defvjp(amax, _amax_vjp)
defvjp(amin, _amax_vjp)


# -- max, min of every element ----------------------------------------------------------------------------
def _full_extreme_meta(name):
    def rule(self):
        if int(np.prod(self.shape)) == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return [((), np.dtype(self.dtype))]
    return rule


def _full_extreme(name, fn):
    def forward(self):
        _full_extreme_meta(name)(self)
        return as_dtype(fn(self), self.dtype)       # a NaN anywhere is the result, as PyTorch
    forward.__name__ = name
    return forward


max_all = aten("max(Tensor self) -> Tensor", "MaxBackward1",
               meta=_full_extreme_meta("max"))(_full_extreme("max", np.max))
min_all = aten("min(Tensor self) -> Tensor", "MinBackward1",
               meta=_full_extreme_meta("min"))(_full_extreme("min", np.min))


def _evenly_distribute_vjp(g, ans, self):
    # self: evenly_distribute_backward(grad, self, result): the gradient shared evenly by the
    # elements equal to the result (the NaNs, where the result is NaN)
    s, v = _value(self), _value(ans)
    nan = s.dtype.kind == "f" and bool(np.isnan(v))
    mask = np.isnan(s) if nan else (s == v)
    dt = _value(g).dtype
    return L.mul(L.div(g, scalar(mask.sum(), dt)), mask.astype(dt))


defvjp(max_all, _evenly_distribute_vjp)
defvjp(min_all, _evenly_distribute_vjp)


# -- argmax, argmin --------------------------------------------------------------------------------------
def _arg_meta(name):
    def rule(self, dim=None, keepdim=False):
        if np.dtype(self.dtype).kind == "b":
            raise TypeError(f"{name}(): does not support bool input")
        if dim is None:
            if int(np.prod(self.shape)) == 0:
                raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
            return [((1,) * self.ndim if keepdim else (), _LONG)]
        d = _dim(dim, self.ndim)
        if self.ndim:
            _check_nonempty_dims(name, self.shape, (d,))
        return [(_kept(self.shape, (d,) if self.ndim else (), keepdim), _LONG)]
    return rule


def _arg(name, fn):
    def forward(self, dim=None, keepdim=False):
        _arg_meta(name)(self, dim, keepdim)
        if dim is None:
            out = np.asarray(fn(np.asarray(self).reshape(-1)), _LONG)
            return out.reshape((1,) * self.ndim) if keepdim else out
        if not self.ndim:
            return np.zeros((), _LONG)
        d = _dim(dim, self.ndim)
        out = fn(self, axis=d)
        return as_dtype(np.expand_dims(out, d) if keepdim else out, _LONG)
    forward.__name__ = name
    return forward


argmax = not_differentiable(aten("argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor", None,
                                 saves=False, meta=_arg_meta("argmax"))(_arg("argmax", np.argmax)))
argmin = not_differentiable(aten("argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor", None,
                                 saves=False, meta=_arg_meta("argmin"))(_arg("argmin", np.argmin)))


# -- max.dim, min.dim, sort, topk: values and indices -----------------------------------------------------
def _select_backward(g, shape, dim, indices, keepdim):
    """``value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim)``: the values' gradient
    put back where the values were picked (``indices`` along ``dim``, distinct within a slice),
    zero elsewhere.

    Note [selection by one-hot]: PyTorch scatters into zeros (its create_graph node is
    ScatterBackward0). On raw arrays gradcli scatters too; on a recording gradient it sums the
    gradient against a constant one-hot of the indices (MulBackward0, SumBackward1,
    PermuteBackward0), which gives the same values and records itself.

    ``shape``: the input's sizes, all PyTorch's node keeps of it (Note [What a node saved])."""
    shape = tuple(shape)
    if not shape:
        return g
    idx = np.asarray(_value(indices))
    gv = _value(g)
    if not keepdim:
        idx = np.expand_dims(idx, dim)
        g = L.reshape(g, shape=idx.shape) if g is not gv else gv.reshape(idx.shape)
        gv = _value(g)
    if g is gv:                                  # raw arrays
        out = np.zeros(shape, gv.dtype)
        np.put_along_axis(out, idx, gv, axis=dim)
        return out
    m = shape[dim]
    onehot = (idx[..., None] == np.arange(m)).astype(gv.dtype)              # idx.shape + (m,)
    picked = L.sum_(L.mul(L.reshape(g, shape=idx.shape + (1,)), onehot), axis=dim)   # shape less dim, + (m,)
    order = list(range(len(shape) - 1))
    order.insert(dim, len(shape) - 1)
    return L.transpose(picked, axes=tuple(order)) if order != sorted(order) else picked


def _values_indices_meta(name):
    def rule(self, dim, keepdim=False):
        d = _dim(dim, self.ndim)
        if self.ndim:
            _check_nonempty_dims(name, self.shape, (d,))
        shape = _kept(self.shape, (d,) if self.ndim else (), keepdim)
        return [(shape, np.dtype(self.dtype)), (shape, _LONG)]
    return rule


def _first_extreme(arg_fn):
    """The index along ``d`` of each slice's first extreme, as PyTorch's CPU kernel, dims kept."""
    return lambda x, d: np.expand_dims(arg_fn(x, axis=d), d)


def _values_indices(name, index, meta=None):
    """The forward of an op that picks one element per slice along ``dim`` (max.dim, the
    medians): ``index(x, d)`` gives the picked indices with ``d`` kept; ``meta`` checks the
    call (default: ``_values_indices_meta(name)``)."""
    check = meta or _values_indices_meta(name)

    def forward(self, dim, keepdim=False):
        check(self, dim, keepdim)
        if not self.ndim:
            return [np.array(self, copy=True), np.zeros((), _LONG)]
        d = _dim(dim, self.ndim)
        x = np.asarray(self)
        idx = index(x, d)
        values = np.take_along_axis(x, idx, axis=d)
        if not keepdim:
            idx, values = np.squeeze(idx, d), np.squeeze(values, d)
        return [_contiguous(values), _contiguous(idx, _LONG)]
    forward.__name__ = name
    return forward


max_dim = aten("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
               "MaxBackward0", differentiable_outputs=[True, False],
               meta=_values_indices_meta("max"))(_values_indices("max", _first_extreme(np.argmax)))
min_dim = aten("min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
               "MinBackward0", differentiable_outputs=[True, False],
               meta=_values_indices_meta("min"))(_values_indices("min", _first_extreme(np.argmin)))


def _dim_select_vjp(g, ans, self, dim, keepdim=False):
    # self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), keepdim)
    return _select_backward(g[0], self.shape, _dim(dim, len(self.shape)), ans[1], keepdim)


defvjp(max_dim, _dim_select_vjp)
defvjp(min_dim, _dim_select_vjp)


def _sort_meta(self, dim=-1, descending=False):
    _dim(dim, self.ndim)
    return [(tuple(self.shape), np.dtype(self.dtype)), (tuple(self.shape), _LONG)]


def _sorted_indices(x, d, descending):
    """Stable sort indices along ``d``; NaN sorts above every number (first when descending),
    and equal values keep their order in both directions, as PyTorch's CPU sort."""
    if descending:
        flipped = np.flip(x, d)
        idx = np.flip(np.argsort(flipped, axis=d, kind="stable"), d)       # stable among ties
        return (x.shape[d] - 1) - idx
    return np.argsort(x, axis=d, kind="stable")


@aten("sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
      "SortBackward0", differentiable_outputs=[True, False], meta=_sort_meta)
def sort(self, dim=-1, descending=False):
    if not self.ndim:
        _dim(dim, 0)
        return [np.array(self, copy=True), np.zeros((), _LONG)]
    d = _dim(dim, self.ndim)
    idx = _sorted_indices(np.asarray(self), d, descending)
    # PyTorch: both outputs dense in the input's stride order (infer_dense_strides)
    return [lay_out(np.take_along_axis(self, idx, axis=d), [self]), lay_out(idx.astype(_LONG), [self])]


# self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), true)
defvjp(sort, lambda g, ans, self, dim=-1, descending=False: _select_backward(
    g[0], self.shape, _dim(dim, len(self.shape)) if len(self.shape) else 0, ans[1], True))


def _topk_meta(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's name
    d = _dim(dim, self.ndim)
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: selected index k out of range (k={k}, {n} elements in dim {d})")
    shape = tuple(k if i == d else s for i, s in enumerate(self.shape))
    return [(shape, np.dtype(self.dtype)), (shape, _LONG)]


@aten("topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> "
      "(Tensor values, Tensor indices)", "TopkBackward0", differentiable_outputs=[True, False], meta=_topk_meta)
def topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    # Note [topk order]: the k values come sorted (largest first when largest) whatever ``sorted``
    # says, a valid choice for sorted=False; ties take the lower index first, as a stable sort
    _topk_meta(self, k, dim, largest, sorted)
    if not self.ndim:
        return [np.array(self, copy=True).reshape(()) if k else np.zeros((0,), self.dtype)[:0],
                np.zeros((), _LONG)]
    d = _dim(dim, self.ndim)
    idx = np.take(_sorted_indices(np.asarray(self), d, largest), np.arange(k), axis=d)
    return [np.take_along_axis(self, idx, axis=d), idx.astype(_LONG)]


# self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), true)
defvjp(topk, lambda g, ans, self, k, dim=-1, largest=True, sorted=True: _select_backward(  # noqa: A006
    g[0], self.shape, _dim(dim, len(self.shape)) if len(self.shape) else 0, ans[1], True))


# -- prod ------------------------------------------------------------------------------------------------------
def _prod_dtype(self, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    return _LONG if np.dtype(self.dtype).kind in "biu" else np.dtype(self.dtype)


@aten("prod(Tensor self, *, ScalarType? dtype=None) -> Tensor", "ProdBackward0",
      meta=lambda self, dtype=None: [((), _prod_dtype(self, dtype))])
def prod(self, dtype=None):
    dt = _prod_dtype(self, dtype)
    return as_dtype(np.prod(np.asarray(self, dt)), dt)


@aten("prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
      "ProdBackward1", meta=lambda self, dim, keepdim=False, dtype=None: [
          (_kept(self.shape, (_dim(dim, self.ndim),) if self.ndim else (), keepdim), _prod_dtype(self, dtype))])
def prod_dim(self, dim, keepdim=False, dtype=None):
    dt = _prod_dtype(self, dtype)
    d = _dim(dim, self.ndim)
    if not self.ndim:
        return as_dtype(np.array(self, dt), dt)
    return _contiguous(as_dtype(np.prod(np.asarray(self, dt), axis=d, keepdims=keepdim), dt))


def _prod_without_each(x, d):
    """The product of each slice along ``d`` leaving out one element (exact with zeros): the
    exclusive products from both ends, as ``prod_safe_zeros_backward``."""
    ones = np.ones_like(np.take(x, [0], axis=d))
    left = np.cumprod(np.concatenate([ones, np.take(x, np.arange(x.shape[d] - 1), axis=d)], axis=d), axis=d)
    rev = np.flip(x, d)
    right = np.flip(np.cumprod(np.concatenate([ones, np.take(rev, np.arange(x.shape[d] - 1), axis=d)], axis=d),
                               axis=d), d)
    return left * right


def _prod_backward(g, self, result, d, keepdim):
    # prod_backward(grad, input, result[, dim, keepdim]): grad * (result / input) when no input is
    # zero; else prod_safe_zeros_backward (the product of the others, by exclusive products)
    shape = tuple(self.shape)
    if not shape:
        return g
    axes = (d,) if d is not None else tuple(range(len(shape)))
    g = g if keepdim else L.reshape(g, shape=_kept(shape, axes, True))
    r = result if keepdim else L.reshape(result, shape=_kept(shape, axes, True))
    s = _value(self)
    if not np.any(s == 0):
        return L.mul(g, L.div(r, self))
    if g is not _value(g):
        # Note [prod at zeros]: PyTorch differentiates prod_safe_zeros_backward's cumprods; gradcli
        # has no cumprod op, so it refuses rather than record a constant
        raise RuntimeError("prod: a create_graph backward through prod of an input with zeros is not "
                           "supported by gradcli (the first-order gradient is)")
    others = _prod_without_each(s.reshape(-1) if d is None else s, 0 if d is None else d)
    return g * others.reshape(shape)


defvjp(prod, lambda g, ans, self, dtype=None: _prod_backward(g, self, ans, None, False))
defvjp(prod_dim, lambda g, ans, self, dim, keepdim=False, dtype=None: _prod_backward(
    g, self, ans, _dim(dim, len(self.shape)) if len(self.shape) else None, keepdim))


# -- var ---------------------------------------------------------------------------------------------------------
def _var_meta(name):
    def rule(self, dim=None, correction=None, keepdim=False, unbiased=None):
        if np.dtype(self.dtype).kind not in "fc":
            raise TypeError(f"{name}: std and var only support floating point and complex dtypes "
                            f"(got {np.dtype(self.dtype)})")
        return [(_kept(self.shape, _axes(dim, self.ndim), keepdim), np.dtype(self.dtype))]
    return rule


def _var(self, dim, correction, keepdim):
    _var_meta("var")(self, dim, correction, keepdim)
    axes = _axes(dim, self.ndim)
    n = int(np.prod([self.shape[a] for a in axes]))
    dof = max(n - correction, 0)         # as PyTorch: dof <= 0 gives inf or nan (PyTorch warns)
    with np.errstate(all="ignore"):
        mean = np.mean(self, axis=axes, keepdims=True) if n else np.zeros((1,) * self.ndim, self.dtype)
        sq = np.sum(np.square(self - mean), axis=axes, keepdims=keepdim)
        return _contiguous(as_dtype(sq / scalar(dof, self.dtype), self.dtype))


@aten("var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
      "VarBackward0", meta=_var_meta("var"))
def var_correction(self, dim=None, correction=None, keepdim=False):
    return _var(self, dim, 1 if correction is None else correction, keepdim)


@aten("var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor", "VarBackward0",
      meta=lambda self, dim, unbiased=True, keepdim=False: _var_meta("var")(self, dim, None, keepdim))
def var_dim(self, dim, unbiased=True, keepdim=False):
    return _var(self, dim, 1 if unbiased else 0, keepdim)


def _var_backward(g, self, dim, correction, keepdim):
    # var_backward(grad, self, dim, correction, keepdim):
    # (2.0 / dof) * grad * (self - self.mean(dim, true)), grad unsqueezed when not keepdim
    shape = tuple(self.shape)
    axes = _axes(dim, len(shape))
    n = int(np.prod([shape[a] for a in axes])) if shape else 1
    dof = max(n - correction, 0)
    if not keepdim and shape:
        g = L.reshape(g, shape=_kept(shape, axes, True))
    centred = L.sub(self, L.mean(self, axis=axes, keepdims=True)) if shape else L.sub(self, self)
    scale = np.asarray(2.0 / dof if dof > 0 else np.inf, _value(g).dtype)
    return L.mul(L.mul(g, scale), centred)


defvjp(var_correction, lambda g, ans, self, dim=None, correction=None, keepdim=False: _var_backward(
    g, self, dim, 1 if correction is None else correction, keepdim))
defvjp(var_dim, lambda g, ans, self, dim, unbiased=True, keepdim=False: _var_backward(
    g, self, dim, 1 if unbiased else 0, keepdim))


# -- cumsum ---------------------------------------------------------------------------------------------------------
def _cumsum_dtype(self, dtype):
    return _prod_dtype(self, dtype)


@aten("cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor", "CumsumBackward0", saves=False,
      meta=lambda self, dim, dtype=None: [(tuple(self.shape), _cumsum_dtype(self, dtype))] if _dim(
          dim, self.ndim) is not None else None)
def cumsum(self, dim, dtype=None):
    dt = _cumsum_dtype(self, dtype)
    d = _dim(dim, self.ndim)
    if not self.ndim:
        return as_dtype(np.array(self, dt), dt)
    # PyTorch's cumsum writes a row-major result whatever the input's layout
    return contiguous(as_dtype(np.cumsum(np.asarray(self, dt), axis=d), dt))


def _cumsum_vjp(g, ans, self, dim, dtype=None):
    # cumsum_backward(grad.to(self.scalar_type()), dim): the reversed cumsum,
    # grad.flip(dim).cumsum(dim).flip(dim). Note [reversed cumsum]: on a recording gradient
    # (create_graph) gradcli writes it sum(dim, keepdim) - cumsum + grad, having no flip op:
    # PyTorch's node there is FlipBackward0, gradcli's AddBackward0
    if g.dtype != self.dtype:
        g = L.cast(g, dtype=np.dtype(self.dtype).name)
    if not len(self.shape):
        return g
    d = _dim(dim, len(self.shape))
    gv = _value(g)
    if g is gv:
        return np.flip(np.cumsum(np.flip(gv, d), axis=d), d)
    return L.add(L.sub(L.sum_(g, axis=d, keepdims=True), cumsum(g, dim=d)), g)


defvjp(cumsum, _cumsum_vjp)
