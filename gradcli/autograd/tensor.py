"""Tensor: an array plus the autograd metadata PyTorch keeps on a Variable."""
from __future__ import annotations

import weakref

from ..devices import device_of, to_host
from . import dispatch
from .node import AccumulateGrad, differentiable_accumulate
from .state import STATE


class Tensor:
    """An array (NumPy, CuPy or sim) with ``requires_grad``, ``grad_fn`` and ``grad``.

    ``grad`` holds a raw array. A leaf that requires grad owns one
    ``AccumulateGrad`` node (``grad_accumulator``); a non-leaf points at the
    node that produced it (``grad_fn``) and its index among that node's
    inputs (``output_nr``).
    """

    __slots__ = ("data", "requires_grad", "grad_fn", "output_nr", "grad", "name",
                 "retains_grad", "_grad_accumulator", "_vc", "_base", "_post_acc_hooks",
                 "_view_of_fn", "_creation", "__weakref__")
    # (``_view_of_fn``, set on views only: the base's grad_fn their history leads to,
    # Note [Views of a changed base])

    # NumPy defers to the Tensor's reflected operators (``array + tensor``
    # calls ``Tensor.__radd__``) instead of making an object array.
    __array_ufunc__ = None

    def __init__(self, data, requires_grad=False, name=None):
        if requires_grad and data.dtype.kind != "f":
            raise TypeError(f"only floating point tensors can require gradients "
                            f"(got dtype {data.dtype})")
        self.data = data
        self.requires_grad = requires_grad
        self.grad_fn = None
        self.output_nr = 0
        self.grad = None
        self.name = name
        self.retains_grad = False
        self._grad_accumulator = None
        self._vc = None              # Note [Version counters]
        self._base = None            # the tensor this one is a view of
        self._creation = None        # how a view was made, if in-place ops refuse it
        self._post_acc_hooks = None

    # -- array-like properties ----------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def device(self):
        return device_of(self.data)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        """How many in-place ops changed this tensor's memory (shared with its views).

        Example::

            x = Tensor(np.ones(3))
            x.add_(1.0)
            assert x._version == 1
        """
        vc = version_counter(self, create=False)
        return 0 if vc is None else vc[0]

    @property
    def is_view(self) -> bool:
        return self._base is not None

    def numpy(self):
        return to_host(self.data)

    def __repr__(self):
        extra = f", grad_fn={self.grad_fn.name}" if self.grad_fn is not None else (
            ", requires_grad=True" if self.requires_grad else "")
        return f"Tensor(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}{extra})"

    # -- autograd -----------------------------------------------------------
    # Note [The leaf holds its accumulator weakly]: as PyTorch's AutogradMeta (a
    # weak_ptr), a leaf refers to its AccumulateGrad through a weak reference; the
    # edges of the nodes that use the leaf hold the node. A leaf and its accumulator
    # then make no reference cycle, so a run's graph is freed by reference counting
    # alone and leaves the cyclic collector nothing to find (Note [Collector pauses]).
    # An accumulator nothing else holds is freed, with any hooks registered on the
    # node itself, and the next one is a new node, as in PyTorch. A tensor hook
    # (``register_hook``) must outlive that: PyTorch keeps a leaf's tensor hooks on the
    # tensor; here the leaf then holds its accumulator strongly (``_grad_accumulator``
    # is the node, not a weakref), a cycle only hooked leaves make.
    @property
    def grad_accumulator(self):
        if self.grad_fn is not None or not self.requires_grad:
            return None
        ref = self._grad_accumulator
        if ref is not None:
            acc = ref() if type(ref) is weakref.ref else ref
            if acc is not None:
                return acc
        acc = AccumulateGrad(self)
        self._grad_accumulator = weakref.ref(acc)
        return acc

    def gradient_edge(self):
        """The edge a gradient for this tensor flows into (``impl::gradient_edge``)."""
        base = self._base
        if base is not None:
            # (refresh_view's first test inline: a view whose base's history is the one it
            # was made from has nothing to regenerate, the common case of every view op)
            fn = base.grad_fn
            if fn is not None and getattr(self, "_view_of_fn", None) is not fn:
                from .views import refresh_view  # noqa: PLC0415 - views only

                refresh_view(self)
        if self.grad_fn is not None:
            return (self.grad_fn, self.output_nr)
        acc = self.grad_accumulator
        return (acc, 0) if acc is not None else None

    def register_hook(self, fn):
        """``fn(grad) -> None | array`` runs when a gradient for this tensor is computed."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        node, input_nr = self.gradient_edge()
        if self.grad_fn is None:     # kept with the leaf (Note [The leaf holds its accumulator weakly])
            self._grad_accumulator = node
        return node.add_tensor_pre_hook(input_nr, fn)

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(tensor) -> None`` runs after a backward accumulated into this leaf's
        ``.grad`` (an optimizer step in the backward). Returns a handle with ``remove()``.

        Example::

            w.register_post_accumulate_grad_hook(lambda p: p.grad.fill(0))
        """
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = []
        entry = (hook,)
        self._post_acc_hooks.append(entry)
        return _ListHandle(self._post_acc_hooks, entry)

    def retain_grad(self):
        """Keep ``.grad`` on this non-leaf tensor after backward."""
        if self.grad_fn is None:
            if not self.requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        if self.retains_grad:
            return

        # Note [retain_grad holds its tensor weakly]: the hook lives on the grad_fn,
        # which lives as long as any graph built from this tensor; a strong reference
        # would keep the tensor (and its .grad) alive that long too.
        ref = weakref.ref(self)

        def retain(grad):
            _tensor = ref()
            if _tensor is None:
                return grad
            if STATE.grad_enabled or type(_tensor.grad) is Tensor:   # create_graph
                _tensor.grad = differentiable_accumulate(_tensor.grad, grad)
            else:
                _tensor.grad = grad.copy() if _tensor.grad is None else _tensor.grad + grad
            return grad

        self.grad_fn.set_retains_grad_hook(self.output_nr, retain)
        self.retains_grad = True

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        from .api import backward

        backward([self], None if gradient is None else [gradient], retain_graph=retain_graph,
                 create_graph=create_graph, inputs=inputs)

    def detach(self):
        """A Tensor sharing this one's memory and version counter, outside the graph."""
        t = Tensor(self.data, False, self.name)
        t._vc = version_counter(self)
        return t


class _ListHandle:
    """Removes one entry from a hook list (``RemovableHandle.remove``)."""

    __slots__ = ("_list", "_entry")

    def __init__(self, lst, entry):
        self._list, self._entry = lst, entry

    def remove(self):
        try:
            self._list.remove(self._entry)
        except ValueError:
            pass


# Note [Version counters]: PyTorch counts the in-place ops on each tensor's memory, and
# a saved tensor remembers the count it saw, so a backward that would read memory an
# in-place op has changed since fails instead of computing a wrong gradient. A tensor's
# counter is a one-element list shared by the tensor, its views (``_base``) and its
# detached copies; it is made on first need, so a tensor that no in-place op touches
# costs nothing (its version is 0). When the counter of an op's output is made after
# the op recorded its node, the node is told (``note_output_version``): a node that
# saved its output checks that output's version too.
def version_counter(t, create=True):
    """``t``'s shared version counter (a one-element list), made when ``create``."""
    vc = t._vc
    if vc is not None:
        return vc
    base = t._base
    if base is not None:
        vc = version_counter(base, create)
    elif create:
        vc = [0]
        fn = t.grad_fn
        if fn is not None:
            fn.note_output_version(t.output_nr, vc, 0)
    if vc is not None:
        t._vc = vc
    return vc


def bump_version(t) -> int:
    """Count one in-place op on ``t``'s memory; returns the new version."""
    vc = version_counter(t)
    vc[0] += 1
    dispatch.VERSIONS_IN_USE = True
    dispatch.SAVED_CHECKS = True
    return vc[0]


# Tensor's operators are ops, installed on the class by gradcli.ops. Until the
# op library is loaded, each is a stand-in that loads it and calls the real
# one, so `a * b` works whichever gradcli module was imported first
# (Note [Core dispatch]).
OPERATORS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
             "__truediv__", "__rtruediv__", "__pow__", "__matmul__", "__neg__", "sum", "mean")


def _stand_in(name):
    def operator(self, *args, **kwargs):
        dispatch.load_ops()
        real = getattr(Tensor, name)
        if real is operator:
            raise TypeError(f"the op library did not install Tensor.{name}")
        return real(self, *args, **kwargs)
    operator.__name__ = operator.__qualname__ = name
    operator.stand_in = True
    return operator


for _name in OPERATORS:
    setattr(Tensor, _name, _stand_in(_name))
dispatch.register_tensor(Tensor)   # Note [Core dispatch]
