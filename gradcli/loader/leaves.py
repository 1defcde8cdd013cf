"""The arrays of a graph's leaves, as a run meets them: an inline value, a seeded
initializer, or an array of a weight file (read through the graph's
``WeightFiles``, beside them in ``weights.py``). Each is a ``make(shape)`` whose
failures at run time are one-line GraphErrors naming the file, the line and the
tensor."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..errors import first_line as _first_line
from .budget import nbytes


def make_leaf(source, weights, file, line, where, max_tensor_bytes):
    """The ``make(shape)`` of a leaf whose checked ``source`` is ``("value", array)``,
    ``("init", dist, spec, dtype, seed_seq)`` or ``("file", full, key, rel, shape,
    dtype, fail)`` (what ``check_tensors`` gives).

    >>> make = make_leaf(("init", "ones", {}, np.float64, [0]), None, "g.yaml", 3,
    ...                  "tensors.w", 2**20)
    >>> make((2,)).tolist()
    [1.0, 1.0]
    """
    kind = source[0]
    if kind == "value":
        make = _constant(source[1])
    elif kind == "init":
        make = _initializer(*source[1:])
    else:
        make = _weight(weights, *source[1:])
    return _guarded(make, kind, file, line, where, max_tensor_bytes)


def _guarded(make, source, file, line, where, budget):
    """``make`` with its failures (at forward time) reported as GraphErrors."""

    def guarded_make(shape=None):
        if shape is not None:
            size = nbytes(shape, 1)
            if size > budget:
                raise GraphError(f"tensor of shape {list(shape)} is over the memory budget of "
                                 f"{budget} bytes (--max-tensor-bytes)", file, line, where)
        try:
            return make(shape)
        except GraphError:
            raise
        except MemoryError:
            raise GraphError(f"out of memory creating the tensor from its {source}",
                             file, line, where) from None
        except Exception as exc:  # noqa: BLE001 - reported as an error in the file
            raise GraphError(f"cannot create the tensor from its {source}: "
                             f"{_first_line(exc)}", file, line, where) from None
    return guarded_make


def _constant(array):
    return lambda shape=None: array.copy()


def _initializer(dist, spec, dtype, seed_seq):
    def make(shape):
        if dist == "zeros":
            return np.zeros(shape, dtype)
        if dist == "ones":
            return np.ones(shape, dtype)
        if dist == "full":
            return np.full(shape, spec["fill"], dtype)
        if dist == "arange":
            return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)
        rng = np.random.Generator(np.random.PCG64(seed_seq))
        if dist == "normal":
            data = rng.normal(spec.get("mean", 0.0), spec.get("std", 1.0), size=shape)
        else:
            data = rng.uniform(spec.get("low", 0.0), spec.get("high", 1.0), size=shape)
        return data.astype(dtype)
    return make


def _weight(weights, full, key, rel, file_shape, file_dtype, fail):
    def make(shape=None):
        # The same member the header was read from (Note [One member, checked and
        # loaded]), read once and shared read-only (Note [Weights read once]); the
        # array it holds must still be what was checked at load.
        try:
            arr = weights.array(full, key)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - any malformed or unreadable file
            fail(f"cannot read {rel!r}: {_first_line(exc)}")
        if arr.shape != file_shape or arr.dtype != file_dtype:
            fail(f"{rel!r} changed since the graph was loaded (now {list(arr.shape)} "
                 f"{arr.dtype}, was {list(file_shape)} {file_dtype})")
        return arr
    return make
