"""Python ``torch.autograd.Function`` applications in a traced module.

Note [Python Functions as composites] (gradcli/ops/composite.py) says what the graph
file holds for one: a ``function.CLASS`` composite with its forward's ops as the body
and its backward's ops beside them. This module gets both from PyTorch:

1. While the module is traced, ``PythonFunctions`` replaces ``Function.apply``: an
   application that records a node (grad mode on, an input requiring grad) traces as
   one node of the op ``gradcli_export::python_function`` instead of its forward's
   ops inline, its tensor arguments its inputs, the rest kept in ``applied[key]``.
2. For that node the exporter asks ``trace_forward`` (``make_fx`` of the Function's
   forward on the node's actual inputs) and ``trace_backward`` (``make_fx`` of
   ``torch.autograd.grad`` through a fresh application: the engine calls the
   class's Python ``backward``, whose torch operations the trace records; the forward
   ops it does not need are dropped).

Example::

    with PythonFunctions() as functions:
        gm = make_fx(fn)(x)           # BLOOM's GeLUFunction.apply: one node
    functions.applied[key].cls        # GeLUFunction
"""
from __future__ import annotations

import itertools
import weakref

import torch
from torch.fx.experimental.proxy_tensor import make_fx

OP_NAMESPACE = "gradcli_export"
_LIBRARY = None
_APPLIED = {}                       # key -> Applied, while an export holds it
_KEYS = itertools.count()
# ``apply`` as the class defines it: a classmethod of torch.autograd.Function in some
# releases, a C classmethod of a base class in others (2.14)
_OWN_APPLY = torch.autograd.Function.__dict__.get("apply")
_ORIGINAL_APPLY = next(k.__dict__["apply"] for k in torch.autograd.Function.__mro__
                       if "apply" in k.__dict__)


def _original_apply(cls, *args, **kwargs):
    return _ORIGINAL_APPLY.__get__(None, cls)(*args, **kwargs)


class Applied:
    """One application: the Function class and its arguments, tensors as slots."""

    def __init__(self, cls, args):
        self.cls = cls
        self.slots = [isinstance(a, torch.Tensor) for a in args]
        self.constants = [None if s else a for s, a in zip(self.slots, args)]
        self.returns_tuple = False      # its forward returned a tuple (of one, maybe)

    def call(self, tensors):
        """The Function applied to ``tensors`` (its tensor arguments, in order), as a list
        of its outputs; the class's own ``apply``, never the traced replacement."""
        it = iter(tensors)
        args = [next(it) if s else c for s, c in zip(self.slots, self.constants)]
        out = _original_apply(self.cls, *args)
        self.returns_tuple = isinstance(out, (tuple, list))
        return list(out) if self.returns_tuple else [out]


def function_op():
    """``torch.ops.gradcli_export.python_function.default``, defined on first use."""
    global _LIBRARY
    if _LIBRARY is None:
        lib = torch.library.Library(OP_NAMESPACE, "FRAGMENT")
        lib.define("python_function(Tensor[] inputs, int key) -> Tensor[]")
        lib.impl("python_function", _run, "CompositeExplicitAutograd")
        _LIBRARY = lib
    return torch.ops.gradcli_export.python_function.default


def _run(inputs, key):
    with torch.no_grad():
        outs = _APPLIED[key].call(inputs)
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise TypeError(f"{_APPLIED[key].cls.__name__}.forward returned a non-tensor value")
    return [o.clone() for o in outs]    # an op's outputs own their memory


class PythonFunctions:
    """Context manager: ``Function.apply`` traces as one node while it is active.
    ``applied``: key -> Applied, forgotten when this object is."""

    def __init__(self):
        self.keys = []
        weakref.finalize(self, _forget, self.keys)

    @property
    def applied(self):
        return {k: _APPLIED[k] for k in self.keys}

    def __enter__(self):
        op = function_op()
        keys = self.keys

        def apply(cls, *args, **kwargs):
            records = torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args)
            if kwargs or not records:
                return _original_apply(cls, *args, **kwargs)
            key = next(_KEYS)
            _APPLIED[key] = Applied(cls, args)
            keys.append(key)
            outs = op([a for a in args if isinstance(a, torch.Tensor)], key)
            return tuple(outs) if _APPLIED[key].returns_tuple else outs[0]

        torch.autograd.Function.apply = classmethod(apply)
        return self

    def __exit__(self, *exc):
        if _OWN_APPLY is None:
            del torch.autograd.Function.apply
        else:
            torch.autograd.Function.apply = _OWN_APPLY
        return False



def _forget(keys):
    for k in keys:
        _APPLIED.pop(k, None)


def key_of(node):
    """The ``Applied`` key of a traced ``python_function`` node."""
    return node.args[1]


def node_name_and_outputs(applied, tensors, needs):
    """(PyTorch's node name, which outputs are differentiable) for ``applied`` on
    ``tensors``, ``needs[k]``: input ``k`` requires grad."""
    from .compare import node_name

    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(n) for t, n in zip(tensors, needs)]
        outs = applied.call(leaves)
    differentiable = [isinstance(o, torch.Tensor) and o.requires_grad and o.grad_fn is not None
                      for o in outs]
    fns = [o.grad_fn for o, d in zip(outs, differentiable) if d]
    return (node_name(fns[0]) if fns else None), differentiable


def trace_forward(applied, tensors, seed):
    """``make_fx`` of the Function's forward on ``tensors`` (a graph returning a list)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        return make_fx(lambda *ts: applied.call(list(ts)))(*tensors)


def trace_backward(applied, tensors, needs, differentiable, seed):
    """``make_fx`` of the Function's backward: placeholders are the inputs, then one
    gradient per output; it returns one gradient (or None) per input needing one."""
    n = len(tensors)

    def backward(*ts):
        xs, gs = ts[:n], ts[n:]
        outs = applied.call(list(xs))
        pairs = [(o, g) for o, g, d in zip(outs, gs, differentiable) if d]
        wrt = [x for x, need in zip(xs, needs) if need]
        return torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs],
                                   allow_unused=True)

    xs = [t.detach().requires_grad_(need) for t, need in zip(tensors, needs)]
    with torch.no_grad():
        outs = applied.call([t.detach() for t in tensors])
    gs = [torch.ones_like(o) for o in outs]
    torch.manual_seed(seed)
    with torch.enable_grad():
        gm = make_fx(backward)(*xs, *gs)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm, outs
