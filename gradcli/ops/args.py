"""Checkers for op attributes in graph files: each returns the value or raises ValueError."""
from __future__ import annotations

import re

import numpy as np

DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool")


def is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


# No tensor has more than 64 dims (NumPy's limit; PyTorch's is lower): an axis
# outside +-64 is out of range whatever the input, and one past a C int made NumPy
# raise "Python int too large to convert to C long" instead of naming the axis.
MAX_DIMS = 64


def _axis(a, what="axis"):
    a = int(a)
    if not -MAX_DIMS <= a < MAX_DIMS:
        raise ValueError(f"{what} {a} is out of range (a tensor has at most {MAX_DIMS} dims)")
    return a


def axis_or_none(v):
    if v is None:
        return None
    if is_int(v):
        return _axis(v)
    if isinstance(v, (list, tuple)) and all(is_int(a) for a in v):
        return tuple(_axis(a) for a in v)
    raise ValueError(f"axis must be an int, a list of ints or null, got {v!r}")


def int_axis(v):
    if is_int(v):
        return _axis(v)
    raise ValueError(f"axis must be an int, got {v!r}")


def boolean(v):
    if isinstance(v, bool):
        return v
    raise ValueError(f"expected true or false, got {v!r}")


def shape(v):
    if isinstance(v, (list, tuple)) and all(is_int(a) and a >= -1 for a in v):
        if len(v) > MAX_DIMS:
            raise ValueError(f"shape has {len(v)} dims, more than a tensor can have ({MAX_DIMS})")
        big = [a for a in v if a > 2 ** 63 - 1]
        if big:     # sizes are int64 in PyTorch (NumPy: "Python int too large to convert")
            raise ValueError(f"shape {list(v)}: size {big[0]} is past int64")
        return tuple(int(a) for a in v)
    raise ValueError(f"shape must be a list of non-negative ints (or -1), got {v!r}")


def axes_or_none(v):
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and all(is_int(a) for a in v):
        return tuple(_axis(a, "axes entry") for a in v)
    raise ValueError(f"axes must be a list of ints or null, got {v!r}")


def number_or_none(v):
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return v
    raise ValueError(f"expected a number or null, got {v!r}")


def number(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    raise ValueError(f"expected a number, got {v!r}")


def positive_number(v):
    v = number(v)
    if v < 0:
        raise ValueError(f"expected a non-negative number, got {v!r}")
    return v


def positive_int(v):
    if is_int(v) and v >= 1:
        return int(v)
    raise ValueError(f"expected a positive int, got {v!r}")


def dtype(v):
    if v in DTYPES:
        return v
    raise ValueError(f"unknown dtype {v!r} (expected one of {', '.join(DTYPES)})")


def string(v):
    if isinstance(v, str):
        return v
    raise ValueError(f"expected a string, got {v!r}")


def int_list(v):
    if isinstance(v, (list, tuple)) and all(is_int(a) for a in v):
        return tuple(int(a) for a in v)
    raise ValueError(f"expected a list of ints, got {v!r}")


def index_string(v):
    """A NumPy basic index such as ``"1:3, ::2"``, parsed into a tuple."""
    if not isinstance(v, str):
        raise ValueError(f"index must be a string such as \"1:3, ::2\", got {v!r}")
    return parse_index(v)


_INT_RE = re.compile(r"[+-]?[0-9]{1,18}")     # ASCII digits only (int() also takes '١' and '1_0')


def _index_int(field):
    field = field.strip()
    if not _INT_RE.fullmatch(field):
        raise ValueError(field)
    return int(field)


def parse_index(text):
    parts = []
    for raw in text.split(","):
        item = raw.strip()
        if item == "...":
            parts.append(Ellipsis)
        elif item in ("None", "newaxis"):
            parts.append(None)
        elif ":" in item:
            fields = item.split(":")
            if len(fields) > 3:
                raise ValueError(f"bad slice {item!r} in index {text!r}")
            try:
                nums = [_index_int(f) if f.strip() else None for f in fields]
            except ValueError:
                raise ValueError(f"bad slice {item!r} in index {text!r}") from None
            if len(nums) == 3 and nums[2] == 0:
                raise ValueError(f"slice step cannot be zero in index {text!r}")
            parts.append(slice(*nums))
        else:
            try:
                parts.append(_index_int(item))
            except ValueError:
                raise ValueError(f"bad index item {item!r} in index {text!r} (basic indexing "
                                 "only: ints, slices, ..., None)") from None
    return tuple(parts)
