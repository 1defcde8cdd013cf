"""ATen view and shape ops: views, joins and splits.

They keep no values for backward (``saves=False``): their VJPs see the
inputs' shapes only, as PyTorch's formulas use ``self.sym_sizes()``.
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from .promotion import cast, result_type
from .registry import aten, defvjp


def _dim(d, ndim):
    """A dim wrapped into [0, ndim) (``maybe_wrap_dim``; a 0-dim tensor takes dims 0 and -1)."""
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


def _index(ndim, dim, item):
    return (slice(None),) * dim + (item,) + (slice(None),) * (ndim - dim - 1)


@aten("t(Tensor(a) self) -> Tensor(a)", "TBackward0", saves=False)
def t(self):
    if self.ndim > 2:
        raise ValueError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return self.T


defvjp(t, lambda g, ans, self: t(g))


def _view(self, size):
    return np.reshape(self, tuple(size))


@aten("view(Tensor(a) self, SymInt[] size) -> Tensor(a)", "ViewBackward0", saves=False)
def view(self, size):
    return _view(self, size)


@aten("_unsafe_view(Tensor self, SymInt[] size) -> Tensor", "UnsafeViewBackward0", saves=False)
def unsafe_view(self, size):
    return _view(self, size)


# self: grad.reshape_symint(self.sym_sizes())
defvjp(view, lambda g, ans, self, size: L.reshape(g, shape=tuple(self.shape)))
defvjp(unsafe_view, lambda g, ans, self, size: L.reshape(g, shape=tuple(self.shape)))


@aten("expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)", "ExpandBackward0",
      saves=False)
def expand(self, size, implicit=False):
    return L.expand.fn(self, tuple(size))


# self: at::sum_to(grad, self.sym_sizes())
defvjp(expand, lambda g, ans, self, size, implicit=False: L.unbroadcast(g, tuple(self.shape)))


@aten("permute(Tensor(a) self, int[] dims) -> Tensor(a)", "PermuteBackward0", saves=False)
def permute(self, dims):
    return np.transpose(self, tuple(_dim(d, self.ndim) for d in dims))


def _permute_vjp(g, ans, self, dims):
    # permute_backwards(grad, dims): permute by the inverse permutation
    n = len(self.shape)
    inverse = [0] * n
    for i, d in enumerate(dims):
        inverse[_dim(d, n)] = i
    return permute(g, dims=tuple(inverse))


defvjp(permute, _permute_vjp)


@aten("transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)", "TransposeBackward0", saves=False)
def transpose(self, dim0, dim1):
    if self.ndim == 0:
        return self
    return np.swapaxes(self, _dim(dim0, self.ndim), _dim(dim1, self.ndim))


# self: grad.transpose(dim0, dim1)
defvjp(transpose, lambda g, ans, self, dim0, dim1: transpose(g, dim0=dim0, dim1=dim1))


@aten("select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)", "SelectBackward0", saves=False)
def select(self, dim, index):
    d = _dim(dim, self.ndim)
    size = self.shape[d]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(self.shape)} at dimension {dim}")
    return self[_index(self.ndim, d, index % size)]


@aten("select_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt index) -> Tensor",
      "SelectBackwardBackward0", saves=False)
def select_backward(grad_output, input_sizes, dim, index):
    # zeros of input_sizes with grad_output in the selected slice
    shape = tuple(int(s) for s in input_sizes)
    d = _dim(dim, len(shape))
    out = np.zeros_like(grad_output, shape=shape)
    out[_index(len(shape), d, index % shape[d])] = grad_output
    return out


# self: select_backward_symint(grad, self.sym_sizes(), dim, index)
defvjp(select, lambda g, ans, self, dim, index: select_backward(g, input_sizes=list(self.shape), dim=dim,
                                                               index=index))
# grad_output: grad.select_symint(dim, index)
defvjp(select_backward, lambda gg, ans, go, input_sizes, dim, index: select(gg, dim=dim, index=index))


@aten("slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)",
      "SliceBackward0", saves=False)
def slice_(self, dim=0, start=None, end=None, step=1):
    if step <= 0:
        raise ValueError("slice step must be positive")
    d = _dim(dim, self.ndim)
    return self[_index(self.ndim, d, slice(start, end, step))]


def _slice_vjp(g, ans, self, dim=0, start=None, end=None, step=1):
    # slice_backward_wrapper(grad, self.sym_sizes(), dim, start, end, step)
    shape = tuple(self.shape)
    d = _dim(dim, len(shape))
    return L.slice_backward(g, shape=shape, index=_index(len(shape), d, slice(start, end, step)))


defvjp(slice_, _slice_vjp)


@aten("unsqueeze(Tensor(a) self, int dim) -> Tensor(a)", "UnsqueezeBackward0", saves=False)
def unsqueeze(self, dim):
    return np.expand_dims(self, _dim(dim, self.ndim + 1))


# self: grad.squeeze(dim)
defvjp(unsqueeze, lambda g, ans, self, dim: squeeze_dim(g, dim=dim))


@aten("squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)", "SqueezeBackward1", saves=False)
def squeeze_dim(self, dim):
    d = _dim(dim, self.ndim)
    if self.ndim == 0 or self.shape[d] != 1:
        return self.view()          # a dim of size != 1 is left as it is (PyTorch)
    return np.squeeze(self, axis=d)


def _unsqueeze_to(g, dims, shape):
    # unsqueeze_to / unsqueeze_multiple: unsqueeze at each squeezed dim (of size 1), ascending
    n = len(shape)
    for d in sorted({_dim(d, n) for d in dims} if n else ()):
        if shape[d] == 1:
            g = unsqueeze(g, dim=d)
    return g


# self: unsqueeze_to(grad, dim, self.sym_sizes())
defvjp(squeeze_dim, lambda g, ans, self, dim: _unsqueeze_to(g, [dim], tuple(self.shape)))


@aten("squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)", "SqueezeBackward2", saves=False)
def squeeze_dims(self, dim):
    dims = {_dim(d, self.ndim) for d in dim} if self.ndim else set()
    return np.reshape(self, tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))


# self: unsqueeze_multiple(grad, dim, self.sym_sizes())
defvjp(squeeze_dims, lambda g, ans, self, dim: _unsqueeze_to(g, dim, tuple(self.shape)))


# -- joins and splits -------------------------------------------------------------------
def _skipped_in_cat(x):
    # legacy behaviour kept by PyTorch: 1-D empty tensors are ignored by cat
    return len(x.shape) == 1 and x.shape[0] == 0


@aten("cat(Tensor[] tensors, int dim=0) -> Tensor", "CatBackward0", saves=False)
def cat(tensors, dim=0):
    dt = result_type(*tensors)
    kept = [cast(x, dt) for x in tensors if not _skipped_in_cat(x)]
    if not kept:
        return np.zeros((0,), dt)
    return np.concatenate(kept, axis=_dim(dim, kept[0].ndim))


def _cat_vjp(g, ans, tensors, dim=0):
    # cat_tensors_backward: the slice of grad each input filled (empty 1-D inputs get nothing)
    d = _dim(dim, len(g.shape))
    out, start = [], 0
    for x in tensors:
        if _skipped_in_cat(x):
            out.append(None)
            continue
        n = x.shape[d]
        out.append(slice_(g, dim=d, start=start, end=start + n))
        start += n
    return out


defvjp(cat, _cat_vjp)


@aten("stack(Tensor[] tensors, int dim=0) -> Tensor", "StackBackward0", saves=False)
def stack(tensors, dim=0):
    dt = result_type(*tensors)
    return np.stack([cast(x, dt) for x in tensors], axis=_dim(dim, tensors[0].ndim + 1))


# tensors: stack_tensors_backward(grad, dim, to_args_scalartypes(tensors)): grad.unbind(dim)
defvjp(stack, lambda g, ans, tensors, dim=0: [select(g, dim=dim, index=i) for i in range(len(tensors))])


def _split_points(size, split_size):
    if split_size < 0 or (split_size == 0 and size != 0):
        raise ValueError(f"split expects split_size be non-negative, but got split_size={split_size}")
    if size == 0:
        return []
    return list(range(split_size, size, split_size))


def _split(self, split_size, dim):
    d = _dim(dim, self.ndim)
    return np.split(self, _split_points(self.shape[d], split_size), axis=d)


@aten("split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]", "SplitBackward0",
      saves=False)
def split(self, split_size, dim=0):
    return _split(self, split_size, dim)


@aten("unsafe_split.Tensor(Tensor self, SymInt split_size, int dim=0) -> Tensor[]", "UnsafeSplitBackward0",
      saves=False)
def unsafe_split(self, split_size, dim=0):
    return [x.copy() for x in _split(self, split_size, dim)]


# self: split_backward(grads, split_size, dim, self.sym_sizes(), self.options()):
# unused outputs count as zeros (the node fills them in), then cat
def _split_vjp(gs, ans, self, split_size, dim=0):
    return L.concat(*gs, axis=_dim(dim, len(self.shape)))


defvjp(split, _split_vjp)
defvjp(unsafe_split, _split_vjp)


@aten("unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]", "UnbindBackward0", saves=False)
def unbind(self, dim=0):
    d = _dim(dim, self.ndim)
    return [self[_index(self.ndim, d, i)] for i in range(self.shape[d])]


# self: unbind_backward(grads, dim): stack, unused outputs as zeros
defvjp(unbind, lambda gs, ans, self, dim=0: L.stack(*gs, axis=_dim(dim, len(self.shape))))
