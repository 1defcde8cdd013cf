"""The lowest floating precision on each gradient's path, measured from a run graph.

``lowest_precision(graph)`` (after ``graph.forward()``) returns, for every
tensor that can receive a gradient, the lowest floating dtype among the values
its gradient is computed from, and the op that produced it:

    >>> graph.forward(); lowest_precision(graph)["fc.weight"]
    PathPrecision(dtype=dtype('float32'), op="ops[1] '_to_copy' (aten._to_copy.default)", line=31)

Note [Gradient path]: the gradient of a tensor T is computed by the backward
formulas of the ops on a path from T to a root, G(T): they carry the gradient
in their outputs' dtypes. Those formulas that read forward values (the op's
``saves`` contract: ``mul`` reads its inputs, ``add`` and ``sum`` read none)
read what every op upstream of them computed. So the path of T is G(T), plus
every op upstream of an op of G(T) that saves; its precision is the lowest
floating dtype among the outputs of those ops and T's own dtype. Leaves that
do not require grad (inputs, constants) are given data, read alike by every
implementation: their dtype does not count, only the dtype the ops compute in.
Measured on a T5 encoder at float64: the final layer norm's weight, whose own
edge to the loss is float64, moves by ~1e-6 relative with the float32
variance that ``mul`` reads upstream of it, so upstream ops count; the
projection loss's final ``add`` reads nothing, so two outputs of a module do
not share each other's precision through it.
"""
from __future__ import annotations

import numpy as np

from .records import Record


class PathPrecision(Record):
    """``dtype``: the lowest floating dtype on the path; ``op``/``line``: the op that
    computes in it (None when it is the tensor's own dtype)."""
    _fields = ("dtype", "op", "line")

    def __init__(self, dtype, op=None, line=None):
        self.dtype = dtype
        self.op = op
        self.line = line


def _rank(dtype):
    """Floating dtypes by precision (larger epsilon first); None for the others."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    if dt.kind != "f":
        return None
    return -float(np.finfo(dt).eps)


def _names(inputs):
    for x in inputs:
        if isinstance(x, str):
            yield x
        elif isinstance(x, (list, tuple)):
            yield from _names(x)


def lowest_precision(graph) -> dict:
    """{tensor name: PathPrecision} for the leaves that require grad and the ops'
    outputs that lead to a root (Note [Gradient path]). Runs ``graph.forward()``
    if no forward has run yet.

    Example: on a T5 encoder exported at float64,
    ``lowest_precision(load("t5/graph.yaml"))["m.shared.weight"].dtype`` is float32.
    """
    values = graph.current_values()
    ops = graph.ops
    producer = {}
    for i, spec in enumerate(ops):
        for name in spec.outputs:
            producer[name] = i

    def out_rank(i):
        ranks = [(_rank(values[n].dtype), n) for n in ops[i].outputs
                 if n in values and _rank(values[n].dtype) is not None]
        return min(ranks, default=None)

    # upstream[i]: (rank, op index) of the lowest output among op i and every op it depends on
    upstream = []
    for i, spec in enumerate(ops):
        best = out_rank(i)
        best = None if best is None else (best[0], i)
        for n in _names(spec.inputs):
            j = producer.get(n)
            if j is not None and upstream[j] is not None and (best is None or upstream[j] < best):
                best = upstream[j]
        upstream.append(best)
    # to_root[i]: op i leads to a root
    roots = set(graph.backward_spec.roots)
    consumers = {}
    for i, spec in enumerate(ops):
        for n in _names(spec.inputs):
            consumers.setdefault(n, []).append(i)
    to_root = [False] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        to_root[i] = any(n in roots or any(to_root[j] for j in consumers.get(n, ()))
                         for n in ops[i].outputs)
    # down[i]: (rank, op) of the lowest value the backward reads or carries from op i to a root
    down = [None] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        if not to_root[i]:
            continue
        if getattr(ops[i].op, "saves", True):
            best = upstream[i]
        else:                       # reads no forward value: only the gradient's own dtype
            best = out_rank(i)
            best = None if best is None else (best[0], i)
        for n in ops[i].outputs:
            for j in consumers.get(n, ()):
                if to_root[j] and down[j] is not None and (best is None or down[j] < best):
                    best = down[j]
        down[i] = best

    def describe(best, own):
        if best is None or _rank(own) <= best[0]:
            return PathPrecision(np.dtype(own), None, None)
        spec = ops[best[1]]
        low = min((values[n].dtype for n in spec.outputs if n in values
                   and _rank(values[n].dtype) == best[0]), key=_rank)
        return PathPrecision(np.dtype(low), spec.label, spec.line)

    result = {}
    candidates = [n for n, leaf in graph.leaves.items() if leaf.requires_grad]
    candidates += [n for i, spec in enumerate(ops) if to_root[i] for n in spec.outputs]
    for name in candidates:
        if name not in values or _rank(values[name].dtype) is None:
            continue
        best = None
        for j in consumers.get(name, ()):
            if to_root[j] and down[j] is not None and (best is None or down[j] < best):
                best = down[j]
        result[name] = describe(best, values[name].dtype)
    return result
