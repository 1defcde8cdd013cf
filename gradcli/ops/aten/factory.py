"""Core ATen factories and tensor metadata: ``arange``, ``empty``, ``empty_strided``, ``full``,
``full_like`` (and the non-core ``new_*`` and ``*_like`` factories), ``fill``, ``scalar_tensor``, ``copy``, ``_local_scalar_dense`` and the ``sym_*``
queries (``sym_size``, ``sym_stride``, ``sym_numel``, ``sym_storage_offset``).

Note [factories in a graph]: a factory has no tensor input, so a graph entry names it with
``inputs: []``; its ``device``, ``layout`` and ``pin_memory`` arguments are accepted as PyTorch
prints them and the result is made where the graph's tensors live. ``empty`` and
``empty_strided`` are zero-filled: PyTorch leaves their memory uninitialised, so no program
may read it, and zeros keep a graph reproducible. The queries that return a Python number in
PyTorch (``-> Scalar``, ``-> SymInt``) give a 0-dim tensor in gradcli's graphs.

Example::

    >>> from gradcli.ops import OPS
    >>> OPS["aten.arange.start_step"](start=0, end=5, step=2).data
    array([0, 2, 4])
"""
from __future__ import annotations

import math

import numpy as np

from .pointwise import as_dtype, zeros
from .promotion import DEFAULT_FLOAT
from .registry import ELEMENTWISE, aten, defvjp, not_differentiable
from .shape import _dim

_LONG = np.dtype(np.int64)
_FACTORY_ARGS = "ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None"


def _number_dtype(*values):
    """The dtype PyTorch infers from Python numbers: bool, int64, else the default float dtype."""
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return np.dtype(bool)
    if all(isinstance(v, (bool, int, np.integer)) for v in values):
        return _LONG
    return DEFAULT_FLOAT


def _check_size(name, size):
    if any(s < 0 for s in size):
        raise ValueError(f"{name}: negative dimension in size {list(size)} (Trying to create tensor with "
                         "negative dimension)")
    return tuple(int(s) for s in size)


# -- arange ------------------------------------------------------------------------------------------------
def _arange_length(start, end, step):
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if not all(math.isfinite(float(v)) for v in (start, end)):
        raise ValueError(f"arange: unsupported range: {start} -> {end}")
    if (end - start) * step < 0:
        raise ValueError("arange: upper bound and lower bound inconsistent with step sign")
    return max(int(math.ceil((end - start) / step)), 0)


def _arange_meta(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    dt = np.dtype(dtype) if dtype is not None else _number_dtype(start, end, step)
    return [((_arange_length(start, end, step),), dt)]


@aten(f"arange.start_step(Scalar start, Scalar end, Scalar step=1, *, {_FACTORY_ARGS}) -> Tensor", None,
      saves=False, meta=_arange_meta)
def arange_start_step(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    (n,), dt = _arange_meta(start, end, step, dtype)[0]
    if dt.kind in "iub" and all(isinstance(v, (int, np.integer)) for v in (start, step)):
        return (int(start) + np.arange(n, dtype=_LONG) * int(step)).astype(dt)
    return as_dtype(start + np.arange(n, dtype=np.float64) * step, dt)   # in double, as PyTorch's accscalar


# -- empty, full, scalar_tensor -----------------------------------------------------------------------------
def _size_meta(name):
    def rule(size, *rest, dtype=None, **_):
        return [(_check_size(name, size), np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT)]
    return rule


@aten(f"empty.memory_format(SymInt[] size, *, {_FACTORY_ARGS}, MemoryFormat? memory_format=None) -> Tensor",
      None, saves=False, meta=_size_meta("empty"))
def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return np.zeros(_check_size("empty", size), np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT)


def _empty_strided_meta(size, stride, dtype=None, **_):
    size = _check_size("empty_strided", size)
    if len(stride) != len(size):
        raise ValueError(f"empty_strided: mismatch in length of strides and shape ({len(stride)} and {len(size)})")
    if any(st < 0 for st in stride):
        raise ValueError(f"empty_strided: negative strides are not supported, got {list(stride)}")
    return [(size, np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT)]


@aten(f"empty_strided(SymInt[] size, SymInt[] stride, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False,
      meta=_empty_strided_meta)
def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    (shape, dt), = _empty_strided_meta(size, stride, dtype)
    if 0 in shape:
        return np.zeros(shape, dt)
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
    buffer = np.zeros(extent, dt)
    return np.lib.stride_tricks.as_strided(buffer, shape, tuple(st * dt.itemsize for st in stride))


def _full_meta(size, fill_value, dtype=None, **_):
    return [(_check_size("full", size), np.dtype(dtype) if dtype is not None else _number_dtype(fill_value))]


@aten(f"full(SymInt[] size, Scalar fill_value, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False, meta=_full_meta)
def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    (shape, dt), = _full_meta(size, fill_value, dtype)
    return np.full(shape, fill_value, dt)


@aten(f"scalar_tensor(Scalar s, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False,
      meta=lambda s, dtype=None, **_: [((), np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT)])
def scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    return np.asarray(s, np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT)


@aten(f"zeros(SymInt[] size, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False, meta=_size_meta("zeros"))
def zeros_default(size, dtype=None, layout=None, device=None, pin_memory=None):
    return np.zeros(_check_size("zeros", size), np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT)


@aten(f"ones(SymInt[] size, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False, meta=_size_meta("ones"))
def ones(size, dtype=None, layout=None, device=None, pin_memory=None):
    return np.ones(_check_size("ones", size), np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT)


for _op in (arange_start_step, empty, empty_strided, full, scalar_tensor, zeros_default, ones):
    not_differentiable(_op)


# -- full_like, fill, copy ------------------------------------------------------------------------------------
def _cast_value(value, dt):
    """A Python number in dtype ``dt`` as PyTorch's fill casts it (a float truncates into an int)."""
    return np.asarray(value).astype(dt)


@aten(f"full_like(Tensor self, Scalar fill_value, *, {_FACTORY_ARGS}, MemoryFormat? memory_format=None) "
      "-> Tensor", None, saves=False,
      meta=lambda self, fill_value, dtype=None, **_: [(tuple(self.shape),
                                                      np.dtype(dtype) if dtype is not None else self.dtype)])
def full_like(self, fill_value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dt = np.dtype(dtype) if dtype is not None else np.dtype(self.dtype)
    return np.full(np.shape(self), _cast_value(fill_value, dt), dt)


not_differentiable(full_like)


# -- new_empty, new_zeros, new_ones, new_full, empty_like, zeros_like, ones_like -------------
# Factories that read only their input's metadata: its dtype (and device) where none is
# given, its shape for the ``_like`` ones. The result is made on the input's device
# (``np.full_like`` dispatches to the input's array module). ``new_empty`` and
# ``empty_like`` are zero-filled, as ``empty`` (Note [factories in a graph]). A module
# that fills fresh memory in place (circular padding: ``new_empty`` then ``copy_`` into
# its slices) is exported with these as ops (Note [Fresh memory written in place] in
# the exporter).
def _like_meta(self, size=None, dtype=None, name="new_empty"):
    shape = tuple(self.shape) if size is None else _check_size(name, size)
    return [(shape, np.dtype(dtype) if dtype is not None else np.dtype(self.dtype))]


def _made_like(self, size, fill_value, dtype):
    (shape, dt), = _like_meta(self, size, dtype)
    return np.full_like(self, _cast_value(fill_value, dt), dtype=dt, shape=shape)


_NEW_ARGS = f"*, {_FACTORY_ARGS}) -> Tensor"
_LIKE_ARGS = f"*, {_FACTORY_ARGS}, MemoryFormat? memory_format=None) -> Tensor"


@aten(f"new_empty(Tensor self, SymInt[] size, {_NEW_ARGS}", None, saves=False,
      meta=lambda self, size, dtype=None, **_: _like_meta(self, size, dtype))
def new_empty(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _made_like(self, size, 0, dtype)


@aten(f"new_zeros(Tensor self, SymInt[] size, {_NEW_ARGS}", None, saves=False,
      meta=lambda self, size, dtype=None, **_: _like_meta(self, size, dtype, "new_zeros"))
def new_zeros(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _made_like(self, size, 0, dtype)


@aten(f"new_ones(Tensor self, SymInt[] size, {_NEW_ARGS}", None, saves=False,
      meta=lambda self, size, dtype=None, **_: _like_meta(self, size, dtype, "new_ones"))
def new_ones(self, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _made_like(self, size, 1, dtype)


@aten(f"new_full(Tensor self, SymInt[] size, Scalar fill_value, {_NEW_ARGS}", None, saves=False,
      meta=lambda self, size, fill_value, dtype=None, **_: _like_meta(self, size, dtype, "new_full"))
def new_full(self, size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    return _made_like(self, size, fill_value, dtype)


@aten(f"empty_like(Tensor self, {_LIKE_ARGS}", None, saves=False,
      meta=lambda self, dtype=None, **_: _like_meta(self, None, dtype))
def empty_like(self, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _made_like(self, None, 0, dtype)


@aten(f"zeros_like(Tensor self, {_LIKE_ARGS}", None, saves=False,
      meta=lambda self, dtype=None, **_: _like_meta(self, None, dtype))
def zeros_like(self, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _made_like(self, None, 0, dtype)


@aten(f"ones_like(Tensor self, {_LIKE_ARGS}", None, saves=False,
      meta=lambda self, dtype=None, **_: _like_meta(self, None, dtype))
def ones_like(self, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _made_like(self, None, 1, dtype)


for _op in (new_empty, new_zeros, new_ones, new_full, empty_like, zeros_like, ones_like):
    not_differentiable(_op)


@aten("fill.Scalar(Tensor self, Scalar value) -> Tensor", "FillBackward0", saves=False, meta=ELEMENTWISE)
def fill_scalar(self, value):
    dt = np.dtype(self.dtype)
    return np.full(np.shape(self), _cast_value(value, dt), dt)


defvjp(fill_scalar, lambda g, ans, self, value: zeros(self.shape, g))      # self: zeros_like(grad)


# (the out-of-place form of ``zero_``, which ``aten.zero_.default`` runs in place; PyTorch
# records ZeroBackward0 for it)
@aten("zero(Tensor self) -> Tensor", "ZeroBackward0", saves=False, meta=ELEMENTWISE)
def zero(self):
    return np.zeros_like(self, order="C")       # on self's device


defvjp(zero, lambda g, ans, self: zeros(self.shape, g))                    # self: zeros_like(grad)


def _copy_meta(self, src, non_blocking=False):
    try:
        shape = np.broadcast_shapes(tuple(src.shape), tuple(self.shape))
    except ValueError:
        shape = None
    if shape != tuple(self.shape):
        raise ValueError(f"copy: the source of shape {list(src.shape)} does not broadcast to the "
                         f"destination's shape {list(self.shape)}")
    return [(tuple(self.shape), np.dtype(self.dtype))]


@aten("copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor", "torch::autograd::NotImplemented",
      saves=False, meta=_copy_meta)
def copy(self, src, non_blocking=False):
    # self's shape and dtype with src's values broadcast into it (the functional copy_)
    _copy_meta(self, src)
    out = np.empty(np.shape(self), np.dtype(self.dtype))
    np.copyto(out, np.asarray(src).astype(np.dtype(self.dtype), copy=False) if hasattr(src, "dtype") else src,
              casting="unsafe")
    return out


def _copy_not_implemented(*_, **__):
    # Note [copy has no derivative]: derivatives.yaml gives the functional copy no formula, so
    # PyTorch records a torch::autograd::NotImplemented node that raises when the backward reaches it
    raise RuntimeError("derivative for aten::copy is not implemented (as PyTorch 2.13)")


defvjp(copy, _copy_not_implemented, _copy_not_implemented)


# -- values and metadata as 0-dim tensors -------------------------------------------------------------------------
def _scalar_meta(self):
    return [((), np.dtype(self.dtype))]


@aten("_local_scalar_dense(Tensor self) -> Scalar", None, saves=False, meta=lambda self: _local_check(self))
def local_scalar_dense(self):
    _local_check(self)
    return np.array(np.asarray(self).reshape(()), copy=True)


def _local_check(self):
    n = int(np.prod(self.shape))
    if n != 1:
        # PyTorch reads the first element of any non-empty tensor here (its callers check the
        # size); gradcli refuses, as .item() does
        raise ValueError(f"_local_scalar_dense: a Tensor with {n} elements cannot be converted to Scalar")
    return _scalar_meta(self)


def _int_meta(*_, **__):
    return [((), _LONG)]


@aten("sym_numel(Tensor self) -> SymInt", None, saves=False, meta=_int_meta)
def sym_numel(self):
    return np.asarray(int(np.prod(np.shape(self))), _LONG)


@aten("sym_size.int(Tensor self, int dim) -> SymInt", None, saves=False,
      meta=lambda self, dim: (_dim(dim, self.ndim), _int_meta())[1])
def sym_size(self, dim):
    shape = np.shape(self)
    return np.asarray(shape[_dim(dim, len(shape))] if shape else 1, _LONG)


@aten("sym_stride.int(Tensor self, int dim) -> SymInt", None, saves=False,
      meta=lambda self, dim: (_dim(dim, self.ndim), _int_meta())[1])
def sym_stride(self, dim):
    x = np.asarray(self)
    if not x.ndim:
        _dim(dim, 0)
        return np.asarray(1, _LONG)
    return np.asarray(x.strides[_dim(dim, x.ndim)] // x.itemsize, _LONG)


@aten("sym_storage_offset(Tensor self) -> SymInt", None, saves=False, meta=_int_meta)
def sym_storage_offset(self):
    # Note [storage offset]: the element offset of self's first element in the buffer its
    # memory comes from (NumPy's base), 0 for an array that owns its memory
    x = np.asarray(self)
    base = x
    while isinstance(base.base, np.ndarray):
        base = base.base
    if base is x or x.size == 0:
        return np.asarray(0, _LONG)
    offset = x.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return np.asarray(offset // x.itemsize, _LONG)


for _op in (local_scalar_dense, sym_numel, sym_size, sym_stride, sym_storage_offset):
    not_differentiable(_op)
