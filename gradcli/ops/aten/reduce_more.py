"""ATen medians and scans beyond the core opset: ``median``/``nanmedian`` (all and ``.dim``).

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
from .index import scatter_src
from .pointwise import as_dtype, zeros
from .reduce_core import _check_nonempty_dims, _contiguous, _kept
from .registry import aten, defvjp
from .shape import _dim

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
    def forward(self, dim, keepdim=False):
        _median_dim_meta(name)(self, dim, keepdim)
        if not self.ndim:
            return [np.array(self, copy=True), np.zeros((), _LONG)]
        d = _dim(dim, self.ndim)
        x = np.asarray(self)
        idx = _median_index(x, d, ignore_nan)
        values = np.take_along_axis(x, idx, axis=d)
        if not keepdim:
            idx, values = np.squeeze(idx, d), np.squeeze(values, d)
        return [_contiguous(values), _contiguous(idx, _LONG)]
    forward.__name__ = name
    return forward


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
