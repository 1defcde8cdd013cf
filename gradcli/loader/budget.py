"""What a loaded graph may allocate: the default budgets and the bytes of a shape."""
from __future__ import annotations

import os

import numpy as np


def default_max_tensor_bytes() -> int:
    """A quarter of physical memory (or 4 GiB where that cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30


def default_max_graph_bytes() -> int:
    """Half of physical memory (or 8 GiB where that cannot be read)."""
    return 2 * default_max_tensor_bytes()



def nbytes(shape, itemsize):
    """The bytes of an array of ``shape`` with ``itemsize``-byte items.

    >>> nbytes((2, 3), 8)
    48
    """
    n = 1
    for s in shape:
        n *= max(int(s), 0)
    return n * itemsize


def result_sizes(results):
    """(bytes, bytes with every float in float64) of ``[(shape, dtype)]``, unknown ones
    not counted (Note [The memory budget of a whole graph] in check.py).

    >>> result_sizes([((2,), np.float32), (None, None)])
    (8, 16)
    """
    known = [(shape, np.dtype(dtype)) for shape, dtype in results
             if shape is not None and dtype is not None]
    return (sum(nbytes(shape, dtype.itemsize) for shape, dtype in known),
            sum(nbytes(shape, 8 if dtype.kind == "f" else dtype.itemsize)
                for shape, dtype in known))
