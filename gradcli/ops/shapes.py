"""Output shapes and dtypes from input shapes: the rules ops use as their ``infer``.

An ``infer`` is ``fn(shapes, dtypes, **args) -> [(shape, dtype), ...]`` and
raises ValueError (``ShapeMismatch`` when the message names inputs) when the
inputs do not fit. The loader runs it for every op before anything runs: the
static shape check and the memory budget of every op's output.

Note [Inferring with stand-ins]: where NumPy's own rules decide (dtype
promotion, axis checks, basic indexing), a rule runs the op's own forward on
stand-ins that own no memory, so what it infers is what the forward does,
messages included: 0-d arrays for dtypes (NumPy 2 promotes 0-d arrays as it
does any array), size-1 arrays of the right rank for axis checks,
zero-stride views (``np.broadcast_to`` of one element) of the real shape for
views (slice, transpose, expand, ...), and zero-size arrays for concat. Rules
that need the forward are ``Infer`` objects; ``Op`` binds them to its fn.
"""
from __future__ import annotations

import copy

import numpy as np



class ShapeMismatch(ValueError):
    """Raised by an op's ``infer`` when its inputs do not fit together.

    The message names inputs through the fields ``{0}``, ``{1}``, ...:
    ``message(names)`` fills them in with the caller's names for the inputs
    (the loader passes the tensor names of the graph file); ``str()`` uses
    ``input 0``, ``input 1``, ...
    """

    def __init__(self, template):
        self.template = template
        super().__init__(self.message(()))

    def message(self, names):
        import string  # noqa: PLC0415

        fields = [int(f) for _, f, _, _ in string.Formatter().parse(self.template)
                  if f is not None and f.isdigit()]
        names = list(names)[:max(fields, default=-1) + 1]
        names += [f"input {i}" for i in range(len(names), max(fields, default=-1) + 1)]
        return self.template.format(*names)


def _stand_in(shape, dtype):
    """An array of ``shape`` that owns one element (a zero-stride, read-only view)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def _ones(ndim, dtype):
    return np.zeros((1,) * ndim, dtype)


def _listed(names_and_shapes):
    return ", ".join(f"{{{i}}} {list(s)}" for i, s in enumerate(names_and_shapes))


def broadcast(shapes):
    """The broadcast shape of ``shapes``; ShapeMismatch naming every input if there is none."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeMismatch("input shapes cannot be broadcast together: " + _listed(shapes)) from None


def same(shapes, dtypes, **args):
    """The output is shaped and typed as the first input."""
    return [(shapes[0], dtypes[0])]


class Infer:
    """An infer rule that needs the op's forward (``self.fn``): ``Op`` binds it."""

    fn = None

    def bind(self, fn):
        bound = copy.copy(self)
        bound.fn = fn
        return bound

    def __call__(self, shapes, dtypes, **args):
        raise NotImplementedError


class Elementwise(Infer):
    """Inputs broadcast together; the dtype is the forward's on 0-d stand-ins."""

    def __call__(self, shapes, dtypes, **args):
        shape = broadcast(shapes)
        out = self.fn(*[np.zeros((), d) for d in dtypes], **args)
        return [(shape, out.dtype)]


class Reduction(Infer):
    """A reduction over ``axis`` (all axes when None), keeping them with ``keepdims``."""

    def __call__(self, shapes, dtypes, axis=None, keepdims=False, **args):
        (shape,), (dtype,) = shapes, dtypes
        # The forward on a size-1 stand-in: NumPy's own axis checks and dtype.
        out = self.fn(_ones(len(shape), dtype), axis=axis, keepdims=keepdims, **args)
        axes = (set(range(len(shape))) if axis is None
                else set(_normalize_axis_tuple(axis, len(shape))))
        if keepdims:
            result = tuple(1 if i in axes else s for i, s in enumerate(shape))
        else:
            result = tuple(s for i, s in enumerate(shape) if i not in axes)
        return [(result, out.dtype)]


class KeepsShape(Infer):
    """Same shape as the input; dtype (and axis checks) from a size-1 stand-in."""

    def __call__(self, shapes, dtypes, **args):
        (shape,), (dtype,) = shapes, dtypes
        return [(shape, self.fn(_ones(len(shape), dtype), **args).dtype)]


class View(Infer):
    """Ops whose forward returns views (slice, transpose, expand, ...): the forward
    itself on a zero-stride stand-in of the real shape."""

    def __call__(self, shapes, dtypes, **args):
        out = self.fn(*[_stand_in(s, d) for s, d in zip(shapes, dtypes)], **args)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [(o.shape, o.dtype) for o in outs]


class Concat(Infer):
    """Join along an existing axis: NumPy's checks on zero-size stand-ins."""

    def __call__(self, shapes, dtypes, axis=0):
        ndim = len(shapes[0])
        if ndim == 0:
            raise ValueError("zero-dimensional arrays cannot be concatenated")
        ax = _normalize_axis_index(axis, ndim)
        stand_ins = [np.zeros(tuple(0 if i == ax else n for i, n in enumerate(s)), d)
                     if len(s) > ax else np.zeros((0,) * len(s), d) for s, d in zip(shapes, dtypes)]
        out = self.fn(*stand_ins, axis=axis)
        total = sum(s[ax] for s in shapes)
        return [(tuple(total if i == ax else n for i, n in enumerate(shapes[0])), out.dtype)]


class Stack(Infer):
    """Join along a new axis: every input has the same shape."""

    def __call__(self, shapes, dtypes, axis=0):
        if any(s != shapes[0] for s in shapes):
            raise ValueError("all input arrays must have the same shape")
        ax = _normalize_axis_index(axis, len(shapes[0]) + 1)
        out = self.fn(*[np.zeros((), d) for d in dtypes], axis=0)
        shape = shapes[0][:ax] + (len(shapes),) + shapes[0][ax:]
        return [(shape, out.dtype)]


class Matmul(Infer):
    """numpy.matmul's rules: 1-D operands promoted, batch dimensions broadcast."""

    def __call__(self, shapes, dtypes):
        a, b = shapes
        both = f"{{0}} {list(a)} @ {{1}} {list(b)}"
        if not a or not b:
            raise ShapeMismatch(f"matmul needs inputs of at least 1 dimension, got {both}")
        ka, kb = a[-1], (b[-2] if len(b) >= 2 else b[0])
        if ka != kb:
            raise ShapeMismatch(f"matmul shapes do not match: {both} (inner dimensions {ka} "
                                f"and {kb} differ)")
        try:
            batch = tuple(np.broadcast_shapes(a[:-2], b[:-2]))
        except ValueError:
            raise ShapeMismatch(f"matmul batch dimensions cannot be broadcast together: "
                                f"{both}") from None
        shape = batch + a[-2:-1] + b[-1:] if len(b) >= 2 else batch + a[-2:-1]
        dtype = self.fn(_ones(len(a), dtypes[0]), _ones(len(b), dtypes[1])).dtype
        return [(shape, dtype)]


def reshape(shapes, dtypes, shape):
    """NumPy's reshape: one -1 takes what the other axes leave."""
    (old,), (dtype,) = shapes, dtypes
    size = int(np.prod(old, dtype=np.int64)) if old else 1
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    known = int(np.prod([s for s in shape if s != -1], dtype=np.int64)) if shape else 1
    new = tuple(shape)
    if unknown and known and size % known == 0:
        new = tuple(size // known if s == -1 else s for s in shape)
    if unknown and new == tuple(shape) or (not unknown and known != size):
        text = ",".join("newaxis" if s == -1 else str(s) for s in shape)
        raise ValueError(f"cannot reshape array of size {size} into shape ({text})")
    return [(new, dtype)]


def _normalize_axis_index(axis, ndim):
    try:
        from numpy.lib.array_utils import normalize_axis_index
    except ImportError:  # NumPy 1.x
        from numpy.core.multiarray import normalize_axis_index
    return normalize_axis_index(axis, ndim)


def _normalize_axis_tuple(axis, ndim):
    try:
        from numpy.lib.array_utils import normalize_axis_tuple
    except ImportError:  # NumPy 1.x
        from numpy.core.numeric import normalize_axis_tuple
    return normalize_axis_tuple(axis, ndim)


ELEMENTWISE = Elementwise()
REDUCTION = Reduction()
KEEPS_SHAPE = KeepsShape()
VIEW = View()
CONCAT = Concat()
STACK = Stack()
MATMUL = Matmul()
