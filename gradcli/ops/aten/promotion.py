"""PyTorch's type promotion (``at::result_type``) for arrays and wrapped numbers.

Note [wrapped numbers]: operands fall in three ranks: tensors with dimensions,
zero-dim tensors, and Python numbers passed for a Tensor argument (PyTorch's
wrapped numbers). A lower rank only changes the result when it is of a
higher category (bool < integer < floating): ``float32 * 0.5`` stays
float32, ``float32 + float64 zero-dim`` stays float32, ``int64 * 0.5`` is
the default float dtype (float32), ``int64 * float64 zero-dim`` is float64.
NumPy's own rules (NEP 50) differ on the last three.
"""
from __future__ import annotations

import numpy as np

DEFAULT_FLOAT = np.dtype(np.float32)
_LONG = np.dtype(np.int64)
_NUMBERS = (bool, int, float)


_CATEGORIES = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def _category(dt):
    return _CATEGORIES[dt.kind]


def promote_types(a, b):
    """c10's ``promoteTypes``: across categories the higher category's dtype wins
    (int64 with float32 is float32, where NumPy says float64)."""
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return a if ca > cb else b
    return np.promote_types(a, b)


def _combine(higher, lower):
    """``combine_categories`` in c10: the higher rank wins unless the lower one
    is of a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if _category(higher) >= 2:
        return higher
    if higher.kind == "b" or _category(lower) >= 2:
        return promote_types(higher, lower)
    return higher


def result_type(*operands):
    """The dtype PyTorch computes ``operands`` in (None operands are skipped)."""
    if len(operands) == 2:
        a, b = operands
        if type(a) is np.ndarray and a.ndim:
            if type(b) is np.ndarray:
                if b.ndim:
                    return promote_types(a.dtype, b.dtype)  # (two tensors with dims: the loop's result)
                if a.dtype.kind in "fc":
                    return a.dtype      # (a floating tensor with dims and a zero-dim one: the loop's)
            elif a.dtype.kind in "fc" and type(b) in _NUMBERS:
                return a.dtype          # (a floating tensor with dims and a number: the loop's)
    dim = zero = wrapped = None
    for x in operands:
        if x is None:
            continue
        if isinstance(x, (bool, np.bool_)):
            dt, rank = np.dtype(bool), 2
        elif isinstance(x, (int, np.integer)) and not hasattr(x, "shape"):
            dt, rank = _LONG, 2
        elif isinstance(x, float):
            dt, rank = DEFAULT_FLOAT, 2
        else:
            dt, rank = np.dtype(x.dtype), (0 if len(x.shape) else 1)
        if rank == 0:
            dim = dt if dim is None else promote_types(dim, dt)
        elif rank == 1:
            zero = dt if zero is None else promote_types(zero, dt)
        else:
            wrapped = dt if wrapped is None else promote_types(wrapped, dt)
    return _combine(dim, _combine(zero, wrapped))


def to_float(dt):
    """Integral and bool dtypes compute in the default float dtype (true division, ...)."""
    return dt if dt.kind in "fc" else DEFAULT_FLOAT


def cast(x, dt):
    """An array operand in dtype ``dt``; a Python number stays as it is (weak)."""
    if x is None or not hasattr(x, "dtype") or x.dtype == dt:
        return x
    return x.astype(dt)
