"""ATen medians and scans beyond the core opset: ``median``/``nanmedian`` (all and ``.dim``),
``cumprod``, ``cummax``/``cummin`` and ``logcumsumexp``.

Formulas follow PyTorch 2.13's ``tools/autograd/derivatives.yaml``; the comment above each VJP
names the formula there. Each entry carries its shape rule (``meta``).

Note [the median's index]: PyTorch's CPU kernel partitions each slice around position
``(n - 1) // 2`` with ``nth_element`` under the order (value, index), so among equal values the
median is the one of lowest index at that sorted position: the element a stable sort puts
there. ``median`` returns the first NaN of a slice that has one; ``nanmedian`` takes the
position among the values that are not NaN (NaN sort last). A slice of NaN alone has no such
position: gradcli gives index 0 there, where PyTorch's ``nth_element`` among equivalent
elements picks an index of its own (its value is NaN either way).

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.median.dim"](np.array([[3.0, 1.0, 3.0, 1.0, 2.0, 2.0]]), dim=1)
    [array([2.]), array([4])]
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels._common import check_dtype
from ..library import _value
from .index import scatter_add, scatter_src
from .layout import flip
from .pointwise import abs_, as_dtype, exp, log, where, zeros
from .promotion import cast
from .reduce_core import _check_nonempty_dims, _kept, _prod_dtype, _values_indices, cumsum, prod_dim
from .registry import aten, defvjp
from .shape import _dim, cat, contiguous, slice_

_LONG = np.dtype(np.int64)


# -- median, nanmedian ------------------------------------------------------------------------------------------
def _check_median(name, self):
    check_dtype(f"{name}", self, "iuf", "a non-bool")


def _median_dim_meta(name):
    def rule(self, dim, keepdim=False):
        _check_median(name, self)
        d = _dim(dim, self.ndim)
        if self.ndim:
            _check_nonempty_dims(name, self.shape, (d,))
        shape = _kept(self.shape, (d,) if self.ndim else (), keepdim)
        return [(shape, np.dtype(self.dtype)), (shape, _LONG)]
    return rule


def _median_index(x, d, ignore_nan):
    """The median's index along ``d`` of each slice (Note [the median's index]), dims kept."""
    n = x.shape[d]
    order = np.argsort(x, axis=d, kind="stable")            # NaN last, equal values by index
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    if ignore_nan:
        k = np.maximum(n - np.sum(nan, axis=d, keepdims=True) - 1, 0) // 2
        return np.take_along_axis(order, k, axis=d)
    idx = np.take(order, [(n - 1) // 2], axis=d)
    return np.where(np.any(nan, axis=d, keepdims=True), np.argmax(nan, axis=d, keepdims=True), idx)


def _median_dim(name, ignore_nan):
    return _values_indices(name, lambda x, d: _median_index(x, d, ignore_nan), _median_dim_meta(name))


median_dim = aten("median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
                  "MedianBackward1", differentiable_outputs=[True, False],
                  meta=_median_dim_meta("median"))(_median_dim("median", False))
nanmedian_dim = aten("nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
                     "NanmedianBackward1", differentiable_outputs=[True, False],
                     meta=_median_dim_meta("nanmedian"))(_median_dim("nanmedian", True))


def _value_selecting_backward(g, shape, dim, indices, keepdim):
    """``value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim)``: zeros of the
    input's sizes (all PyTorch's node keeps of it) with the gradient scattered to ``indices``."""
    shape = tuple(shape)
    if not shape:
        return g
    d = _dim(dim, len(shape))
    idx = np.asarray(_value(indices))
    if not keepdim:
        idx = np.expand_dims(idx, d)
        g = L.reshape(g, shape=idx.shape)
    return scatter_src(zeros(shape, g), idx, g, dim=d)


# self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), keepdim)
defvjp(median_dim, lambda g, ans, self, dim, keepdim=False: _value_selecting_backward(
    g[0], self.shape, dim, ans[1], keepdim))
defvjp(nanmedian_dim, lambda g, ans, self, dim, keepdim=False: _value_selecting_backward(
    g[0], self.shape, dim, ans[1], keepdim))


def _median_all(name, ignore_nan):
    def forward(self):
        _check_median(name, self)
        x = np.asarray(self).reshape(-1)
        if x.dtype.kind == "f":
            nan = np.isnan(x)
            if ignore_nan:
                x = x[~nan]
            elif nan.any():
                return np.array(np.nan, self.dtype)
            if not x.size:
                return np.array(np.nan, self.dtype)
        elif not x.size:
            raise ValueError(f"{name}(): the median of no elements of an integral tensor is undefined")
        return as_dtype(np.sort(x, kind="stable")[(x.size - 1) // 2], self.dtype)
    forward.__name__ = name
    return forward


def _median_all_meta(name):
    def rule(self):
        _check_median(name, self)
        return [((), np.dtype(self.dtype))]
    return rule


median = aten("median(Tensor self) -> Tensor", "MedianBackward0",
              meta=_median_all_meta("median"))(_median_all("median", False))
nanmedian = aten("nanmedian(Tensor self) -> Tensor", "NanmedianBackward0",
                 meta=_median_all_meta("nanmedian"))(_median_all("nanmedian", True))


def _evenly_distribute_backward(g, self, result):
    # evenly_distribute_backward(grad, self, result): the gradient shared evenly among the elements
    # equal to the result (NaN ones where it is NaN). PyTorch's CPU path writes it
    # zeros.masked_fill_(mask, grad / mask.sum()); gradcli multiplies the mask by it, the same values
    s, r = _value(self), _value(result)
    mask = np.isnan(s) if np.isnan(r) else s == r
    with np.errstate(divide="ignore", invalid="ignore"):       # (no element at all: an empty input)
        scale = L.div(g, np.asarray(mask.sum(), _value(g).dtype))
    return L.mul(mask.astype(_value(g).dtype), scale)


# self: evenly_distribute_backward(grad, self, result)
defvjp(median, lambda g, ans, self: _evenly_distribute_backward(g, self, ans))
defvjp(nanmedian, lambda g, ans, self: _evenly_distribute_backward(g, self, ans))


# -- cumprod ------------------------------------------------------------------------------------------------------
def _acc(dt):
    """PyTorch's CPU scans accumulate in ``acc_type``: float32 in float64."""
    return np.dtype(np.float64) if dt == np.float32 else dt


@aten("cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor", "CumprodBackward0",
      meta=lambda self, dim, dtype=None: [(tuple(self.shape), _prod_dtype(self, dtype))] if _dim(
          dim, self.ndim) is not None else None)
def cumprod(self, dim, dtype=None):
    dt = _prod_dtype(self, dtype)
    d = _dim(dim, self.ndim)
    if not self.ndim:
        return as_dtype(np.array(self, dt), dt)
    # each product rounded from the accumulator, row-major whatever the input's layout
    return contiguous(as_dtype(np.cumprod(np.asarray(cast(self, dt), _acc(dt)), axis=d), dt))


def _reversed_cumsum(w, d):
    # reversed_cumsum(w, dim): w.flip(dim).cumsum(dim).flip(dim)
    return flip(cumsum(flip(w, dims=[d]), dim=d), dims=[d])


def _cumprod_at_zeros(g, x, out, d):
    """The O(n) gradient of a cumprod whose input has zeros (``cumprod_backward`` without grad
    mode), on arrays: before the first zero of a slice the reversed cumsum over the input, at the
    first zero the products up to the second one, after it zero."""
    cs = np.cumsum(x == 0, axis=d)
    w = out * g
    with np.errstate(divide="ignore", invalid="ignore"):
        before = np.flip(np.cumsum(np.flip(np.where(cs == 0, w, 0), d), axis=d), d) / x
    grad = np.where(cs == 0, before, 0).astype(g.dtype)
    one = cs == 1
    first = np.argmax(one, axis=d, keepdims=True)
    at_first = (np.arange(x.shape[d]).reshape([-1 if a == d else 1 for a in range(x.ndim)]) == first) & one
    between = one & ~at_first
    before_zero = np.where(first == 0, 1, np.take_along_axis(out, np.maximum(first - 1, 0), axis=d))
    value = np.sum(np.cumprod(np.where(between, x, 1), axis=d) * np.where(one, g, 0), axis=d,
                   keepdims=True) * before_zero
    return np.where(at_first, value, grad).astype(g.dtype)


def _cumprod_omitted_products(g, self, d, n):
    """The O(n^2) gradient of a cumprod whose input has zeros, with ops (``cumprod_backward`` in grad
    mode): at k, the sum over j >= k of grad[j] times the product of input[:j + 1] without input[k]."""
    grads = []
    for k in range(n):
        rest = g if k == 0 else slice_(g, dim=d, start=k)
        after = cumprod(slice_(self, dim=d, start=k + 1), dim=d) if k < n - 1 else None
        ones = np.ones([1 if a == d else s for a, s in enumerate(self.shape)], _value(g).dtype)
        omitted = ones if after is None else cat([ones, after], dim=d)
        if k:
            omitted = L.mul(prod_dim(slice_(self, dim=d, start=0, end=k), dim=d, keepdim=True), omitted)
        grads.append(L.sum_(L.mul(omitted, rest), axis=d, keepdims=True))
    return cat(grads, dim=d)


def _cumprod_vjp(g, ans, self, dim, dtype=None):
    # self: cumprod_backward(grad.to(self.scalar_type()), self, dim, result)
    if g.dtype != self.dtype:
        g = L.cast(g, dtype=np.dtype(self.dtype).name)
    shape = tuple(self.shape)
    if int(np.prod(shape)) <= 1:
        return g
    d = _dim(dim, len(shape))
    if shape[d] == 1:
        return g
    out = ans if ans.dtype == self.dtype else L.cast(ans, dtype=np.dtype(self.dtype).name)
    x = _value(self)
    if not np.any(x == 0):
        return L.div(_reversed_cumsum(L.mul(out, g), d), self)
    if g is _value(g) and self is x:
        return _cumprod_at_zeros(g, x, _value(out), d)
    return _cumprod_omitted_products(g, self, d, shape[d])


defvjp(cumprod, _cumprod_vjp)


# -- cummax, cummin -------------------------------------------------------------------------------------------------
def _cum_extreme_meta(self, dim):
    _dim(dim, self.ndim)
    return [(tuple(self.shape), np.dtype(self.dtype)), (tuple(self.shape), _LONG)]


def _cum_extreme(name, better):
    def forward(self, dim):
        d = _dim(dim, self.ndim)
        if not self.ndim:
            return [np.array(self, copy=True), np.zeros((), _LONG)]
        x = np.moveaxis(np.asarray(self), d, 0)
        values, indices = np.empty_like(x, order="C"), np.empty(x.shape, _LONG)
        floating = x.dtype.kind == "f"
        for i in range(x.shape[0]):
            # PyTorch's cummax_cummin_helper: a NaN, or (the running one not NaN and) x >= it (<= for
            # cummin), takes over: ties go to the later index, and each later NaN takes over
            cur = x[i]
            if i == 0:
                best, at = cur.copy(), np.zeros(cur.shape, _LONG)
            else:
                take = better(cur, best)
                if floating:
                    take = np.isnan(cur) | (~np.isnan(best) & take)
                best, at = np.where(take, cur, best), np.where(take, i, at)
            values[i], indices[i] = best, at
        return [np.ascontiguousarray(np.moveaxis(values, 0, d)), np.ascontiguousarray(np.moveaxis(indices, 0, d))]
    forward.__name__ = name
    return forward


cummax = aten("cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)", "CummaxBackward0",
              differentiable_outputs=[True, False], meta=_cum_extreme_meta)(_cum_extreme("cummax", np.greater_equal))
cummin = aten("cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)", "CumminBackward0",
              differentiable_outputs=[True, False], meta=_cum_extreme_meta)(_cum_extreme("cummin", np.less_equal))


def _cummaxmin_backward(g, self, indices, dim):
    """``cummaxmin_backward(grad, input, indices, dim)``: zeros of the input's sizes, the gradient
    added at the indices (a value that stays the running extreme gets every step's gradient)."""
    shape = tuple(self.shape)
    if int(np.prod(shape)) == 0:
        return zeros(shape, g)
    return scatter_add(zeros(shape, g), np.asarray(_value(indices)), g, dim=_dim(dim, len(shape)))


# self: cummaxmin_backward(grad, self, indices, dim) (PyTorch's node saves self and the indices)
defvjp(cummax, lambda g, ans, self, dim: _cummaxmin_backward(g[0], self, ans[1], dim))
defvjp(cummin, lambda g, ans, self, dim: _cummaxmin_backward(g[0], self, ans[1], dim))


# -- logcumsumexp ------------------------------------------------------------------------------------------------------
def _logcumsumexp_meta(self, dim):
    check_dtype("logcumsumexp", self)
    _dim(dim, self.ndim)
    return [(tuple(self.shape), np.dtype(self.dtype))]


@aten("logcumsumexp(Tensor self, int dim) -> Tensor", "LogcumsumexpBackward0", meta=_logcumsumexp_meta)
def logcumsumexp(self, dim):
    _logcumsumexp_meta(self, dim)
    d = _dim(dim, self.ndim)
    if not self.ndim:
        return np.array(self, copy=True)
    # PyTorch's CPU scan: log1p(exp(min - max)) + max, accumulated in acc_type (float32 in float64);
    # both infinities of a sign give that infinity, NaN propagates
    with np.errstate(all="ignore"):
        out = np.logaddexp.accumulate(np.asarray(self, _acc(np.dtype(self.dtype))), axis=d)
    return contiguous(as_dtype(out, self.dtype))


def _logcumsumexp_vjp(g, ans, self, dim):
    # self: logcumsumexp_backward(grad, self, result, dim): the gradient's positive and negative
    # parts through a reversed logcumsumexp in log space, each exp'd, their difference
    if not len(g.shape) or int(np.prod(g.shape)) == 0:
        return g
    d = _dim(dim, len(self.shape))
    gv = _value(g)
    lowest = np.asarray(np.finfo(gv.dtype).min, gv.dtype)
    with np.errstate(divide="ignore"):
        log_abs = log(abs_(g))

    def part(sign):
        lg = where(gv * sign > 0, log_abs, lowest)
        rev = flip(logcumsumexp(flip(L.sub(lg, ans), dims=[d]), dim=d), dims=[d])
        return exp(L.add(rev, self))
    return L.sub(part(1), part(-1))


defvjp(logcumsumexp, _logcumsumexp_vjp)
