"""What the lower layers call but do not define (Note [Core dispatch]).

Note [Core dispatch]: the core (``node.py``, ``engine.py``, ``api.py``) sits
below the user-facing ``Tensor`` class and below the op library, yet a
``create_graph`` backward must build Tensors and record ops: AccumulateGrad's
out-of-place sum (Note [Differentiable .grad]), and validate_outputs' sum to
the input's shape, dtype cast and device copy of a Tensor gradient. PyTorch's
C++ core reaches these through the dispatcher and ``THPVariableClass``, both
filled in at start-up. Here ``tensor.py`` registers the Tensor class when it
is imported and ``gradcli.ops`` registers the ops the core records with, so
every import points down the layers and none of them is circular.

The same goes for Tensor's operators (``a * b``, ``x.sum()``): they are ops,
so ``gradcli.ops`` installs them on the Tensor class. Until it has been
imported, ``tensor.py``'s stand-in operators call ``load_ops()``, which the
``gradcli`` package sets when it is imported (always, before any of its
modules), so the operators work whichever module a user imports first and
``import gradcli`` itself stays light.

Who sets what:
- ``Tensor``: ``autograd/tensor.py``, at import. Before it is imported no Tensor
  exists, so a backward has only raw arrays to deal with.
- ``ops``: ``gradcli/ops/__init__.py``, at import: ``clone``, ``grad_copy``, ``unbroadcast``,
  ``cast``, ``to`` and ``scatter_to_base`` (a regenerated view's gradient into its base). Only a create_graph backward reads them, and a Tensor
  gradient can only exist once the op library has recorded one.
- ``load_ops``: ``gradcli/__init__.py``, at import: imports ``gradcli.ops``.
"""
from __future__ import annotations

import types

Tensor = None           # the Tensor class (set by tensor.py)
# True once any in-place op has run in this process (Note [Version counters]): until
# then every saved tensor is at version 0 and no node checks versions.
VERSIONS_IN_USE = False
# True once versions are in use or saved-tensor hooks were ever entered: until then a
# node saves and reads its values without looking at either (Note [Saved-tensor hooks]).
SAVED_CHECKS = False
ops = types.SimpleNamespace(clone=None, grad_copy=None, unbroadcast=None, cast=None, to=None,
                            checkpoint=None, scatter_to_base=None)


def load_ops():
    """Import the op library (which installs Tensor's operators). Set by ``gradcli``."""
    raise RuntimeError("the op library is not loaded: import gradcli.ops")


def register_tensor(cls):
    global Tensor
    Tensor = cls


def register_ops(**fns):
    for name, fn in fns.items():
        if not hasattr(ops, name):
            raise AttributeError(f"the autograd core records with no op named {name!r}")
        setattr(ops, name, fn)
