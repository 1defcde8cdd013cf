"""The op library: ``OPS`` maps a graph file's op name to its ``Op``.

The public ops are also functions of this module, named as in graph files
(``gradcli.ops.sum(x, axis=0)``, ``gradcli.ops.pow(x, y)``, ...): called on
raw arrays they compute, called with a ``Tensor`` they record a node.

>>> import numpy as np, gradcli.ops as O
>>> from gradcli.autograd import Tensor, backward
>>> x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
>>> backward(O.sum(O.pow(x, np.array(2.0))))
>>> x.grad
array([2., 4.])
"""
from ..autograd.tensor import Tensor
from . import library as _library
from .core import OPS, Arg, Op, OpBackward, ShapeMismatch, declare, defvjp, primitive
# The aten.* ops, custom (user code) and grad register on first need (Note [Deferred
# op namespaces] in core.py).
OPS.defer(__name__ + ".aten", prefix="aten.")
OPS.defer(__name__ + ".custom", names=("custom",))
OPS.defer(__name__ + ".higher", names=("grad",))
from .library import BackwardFailure, expand_reduced, unbroadcast  # noqa: F401 - built from ops
from .reentrant import reenter  # noqa: F401 - registers reenter
from ..autograd import dispatch as _dispatch

# The ops a create_graph backward records with inside the core (Note [Core dispatch]).
from .reentrant import checkpoint as _reentrant_checkpoint  # noqa: E402

from .inplace import scatter_to_base as _scatter_to_base  # noqa: E402

_dispatch.register_ops(clone=_library.clone, grad_copy=_library.grad_copy,
                       unbroadcast=_library.unbroadcast, cast=_library.cast, to=_library.to,
                       checkpoint=_reentrant_checkpoint, scatter_to_base=_scatter_to_base)


def _binary(op, reverse=False):
    if reverse:
        return lambda self, other: op(_wrap(other, self), self)
    return lambda self, other: op(self, _wrap(other, self))


def _wrap(value, like):
    from ..devices import scalar

    if isinstance(value, Tensor) or hasattr(value, "shape"):
        return value
    return scalar(value, like.dtype)


Tensor.__add__ = _binary(_library.add)
Tensor.__radd__ = _binary(_library.add, reverse=True)
Tensor.__sub__ = _binary(_library.sub)
Tensor.__rsub__ = _binary(_library.sub, reverse=True)
Tensor.__mul__ = _binary(_library.mul)
Tensor.__rmul__ = _binary(_library.mul, reverse=True)
Tensor.__truediv__ = _binary(_library.div)
Tensor.__rtruediv__ = _binary(_library.div, reverse=True)
Tensor.__pow__ = _binary(_library.pow_)
Tensor.__matmul__ = _binary(_library.matmul)
Tensor.__neg__ = lambda self: _library.neg(self)
Tensor.sum = lambda self, axis=None, keepdims=False: _library.sum_(self, axis=axis, keepdims=keepdims)
Tensor.mean = lambda self, axis=None, keepdims=False: _library.mean(self, axis=axis, keepdims=keepdims)

# The public ops as functions (generated from the registry, so it cannot drift).
# library.py defines a few as sum_, pow_, abs_, max_, min_, slice_ so as not to
# shadow Python's builtins inside that module; here they have their own names.
# Only the loaded ops: no deferred op is one of these functions (Note [Deferred op
# namespaces]), so loading them here would add nothing.
OP_FUNCTIONS = sorted(n for n, op in dict.items(OPS)
                      if op.public and op.fn is not None and n.isidentifier())
globals().update({_name: OPS[_name] for _name in OP_FUNCTIONS})

# In-place variants (``relu_``, ``add_``, ...): functions here and Tensor methods.
from . import inplace as _inplace  # noqa: E402
from .inplace import INPLACE_FUNCTIONS  # noqa: E402

_inplace.install(Tensor)
globals().update(INPLACE_FUNCTIONS)

__all__ = ["OPS", *INPLACE_FUNCTIONS, "Arg", "BackwardFailure", "Op", "OpBackward", "ShapeMismatch", "declare",
           "defvjp", "expand_reduced", "primitive", "unbroadcast", *OP_FUNCTIONS]
