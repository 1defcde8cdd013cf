"""Backward graph nodes: Node, InputMetadata, AccumulateGrad, GraphRoot.

A ``Node`` is one function of the backward graph. It takes one gradient per
output of its forward op (its *inputs*, described by ``input_metadata``) and
returns one gradient per input of its forward op, sent along ``next_edges``.
An edge is a tuple ``(node, input_nr)``, or ``None`` where the forward input
did not require grad (PyTorch's invalid edge).
"""
from __future__ import annotations

import threading

import numpy as np

from ..devices import CPU, device_of, on_device, xp_of_array
from . import dispatch
from .streams import stream_of
from .state import STATE

UINT64_MAX = 2**64 - 1

ERR_BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved "
    "tensors after they have already been freed). Saved intermediate values of the "
    "graph are freed when you call .backward() or autograd.grad(). Specify "
    "retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward."
)


class InputMetadata:
    """Shape, dtype and device of one input of a node (a forward output)."""

    __slots__ = ("shape", "dtype", "device", "stream")

    def __init__(self, shape, dtype, device, stream=None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.device = device
        self.stream = stream          # CUDA: the stream the forward ran on

    @classmethod
    def cpu(cls, array):
        """``(InputMetadata.of(array),)`` for a host ndarray, shared between every node
        whose output has this shape and dtype (Note [Recording on the CPU] in ops/core.py):
        metadata is never mutated once made."""
        key = (array.shape, array.dtype)
        metas = _CPU_METAS.get(key)
        if metas is None:
            if len(_CPU_METAS) >= 4096:      # bounded: many shapes just miss the cache
                _CPU_METAS.clear()
            metas = _CPU_METAS[key] = (cls(array.shape, array.dtype, CPU),)
        return metas

    @classmethod
    def of(cls, array):
        device = device_of(array)
        stream = stream_of(array) if device is not CPU else None
        return cls(array.shape, array.dtype, device, stream)

    def is_expandable_to_shape(self, grad_shape) -> bool:
        """True when this metadata's shape broadcasts to ``grad_shape``."""
        shape = self.shape
        if len(shape) > len(grad_shape):
            return False
        for s, g in zip(reversed(shape), reversed(grad_shape)):
            if s != g and s != 1:
                return False
        return True

    def reduce_grad(self, grad):
        """Sum ``grad`` down to this metadata's shape (``at::sum_to``)."""
        return sum_to(grad, self.shape)

    def incompatible_shape_error_message(self, index, grad) -> str:
        return (f"invalid gradient at index {index} - got {list(grad.shape)} but "
                f"expected shape compatible with {list(self.shape)}")

    def __repr__(self):
        return f"InputMetadata(shape={list(self.shape)}, dtype={self.dtype}, device={self.device})"


_CPU_METAS: dict = {}


def sum_to(grad, shape):
    """Sum a broadcast gradient back to ``shape``."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and grad.shape[lead + i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    if lead:
        grad = grad.reshape(shape)
    return grad


class NodeHooks:
    """The hooks registered on one node, in the four kinds the engine runs (Note [Hooks
    ordering] in engine.py). A node without any has none of these (``Node.hooks`` is
    None): one test on the engine's path per node instead of four, and one field less
    to set per node made."""

    __slots__ = ("tensor_pre", "retains_grad", "pre", "post")

    def __init__(self):
        self.tensor_pre = None      # [(input_nr, fn)]
        self.retains_grad = None    # {input_nr: fn}
        self.pre = None             # [fn(grad_outputs) -> None | tuple]
        self.post = None            # [fn(grad_inputs, grad_outputs) -> None | tuple]


class Node:
    """A function of the backward graph (``torch::autograd::Node``)."""

    __slots__ = ("name", "next_edges", "sequence_nr", "topological_nr", "input_metadata",
                 "device", "stream", "_metadata", "hooks", "__weakref__")

    def __init__(self, name, next_edges, input_metadata, sequence_nr=None, on_cpu=False):
        self.name = name
        self.next_edges = next_edges
        if sequence_nr is None:          # next_sequence_nr() inline: one call less per node
            state = STATE
            sequence_nr = state.sequence_nr
            state.sequence_nr = sequence_nr + 1
        self.sequence_nr = sequence_nr
        # Note [Topological number]: 0 for a node with no (valid) next edge,
        # else one more than the largest topological_nr among the nodes it
        # feeds. A node's number never changes once something points at it, so
        # every path from X to Y has topo_nr(X) > topo_nr(Y): the engine prunes
        # nodes whose number is below the smallest among grad()'s inputs.
        topo = -1
        for edge in next_edges:
            if edge is not None and edge[0].topological_nr > topo:
                topo = edge[0].topological_nr
        self.topological_nr = topo + 1
        self.input_metadata = input_metadata
        dev, stream = CPU, None
        if not on_cpu:               # (``on_cpu``: the maker knows every input is a host array's)
            for meta in input_metadata:
                if meta.device is not CPU:
                    dev, stream = meta.device, meta.stream
                    break
        self.device = dev            # the ready queue this node runs on
        self.stream = stream         # the CUDA stream it runs on (Note [Streaming backwards])
        self._metadata = None        # see ``metadata``
        self.hooks = None            # NodeHooks once a hook is registered: the engine's one test

    # -- the function itself -------------------------------------------------
    def apply(self, grads: list) -> list:
        raise NotImplementedError

    @property
    def metadata(self) -> dict:
        """A dict for whoever recorded the node (PyTorch's ``Node.metadata``):
        the core never reads it. The graph loader stamps ``op_id`` and ``line``."""
        meta = self._metadata
        if type(meta) is not dict:
            meta = self._metadata = {} if meta is None else dict(meta)
        return meta

    def stamp_metadata(self, items) -> None:
        """``metadata.update(items)`` for ``items``, a tuple of (key, value) pairs that
        the recorder shares between the nodes of one op. Note [Metadata stamps]: a
        node keeps the shared tuple until someone reads ``metadata``, which then
        becomes the node's own dict: no dict per node for a million-node graph."""
        if self._metadata is None:
            self._metadata = items
        else:
            self.metadata.update(items)

    def release_variables(self) -> None:
        """Free saved tensors (a backward without ``retain_graph``)."""

    def note_output_version(self, output_nr, vc, version) -> None:
        """Output ``output_nr`` now has version counter ``vc`` at ``version`` (Note
        [Version counters]); a node that saved that output checks it when unpacking."""

    # -- hooks (registered through the Python API) ---------------------------
    def _hooks(self):
        hooks = self.hooks
        if hooks is None:
            hooks = self.hooks = NodeHooks()
        return hooks

    def register_prehook(self, fn):
        """``fn(grad_outputs) -> None | tuple`` runs before the node."""
        hooks = self._hooks()
        if hooks.pre is None:
            hooks.pre = []
        hooks.pre.append(fn)
        return _Handle(hooks.pre, fn)

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs) -> None | tuple`` runs after the node."""
        hooks = self._hooks()
        if hooks.post is None:
            hooks.post = []
        hooks.post.append(fn)
        return _Handle(hooks.post, fn)

    def add_tensor_pre_hook(self, input_nr, fn):
        hooks = self._hooks()
        if hooks.tensor_pre is None:
            hooks.tensor_pre = []
        entry = (input_nr, fn)
        hooks.tensor_pre.append(entry)
        return _Handle(hooks.tensor_pre, entry)

    def set_retains_grad_hook(self, input_nr, fn):
        hooks = self._hooks()
        if hooks.retains_grad is None:
            hooks.retains_grad = {}
        hooks.retains_grad[input_nr] = fn

    def next_functions(self):
        return tuple((e[0], e[1]) if e is not None else (None, 0) for e in self.next_edges)

    def __repr__(self):
        op_id = dict(self._metadata).get("op_id") if self._metadata else None
        where = f" {op_id}" if op_id else ""
        return f"<{self.name}{where} seq={self.sequence_nr} topo={self.topological_nr}>"


class _Handle:
    """What a hook registration returns; ``remove()`` unregisters it."""

    __slots__ = ("_list", "_item")

    def __init__(self, lst, item):
        self._list, self._item = lst, item

    def remove(self):
        try:
            self._list.remove(self._item)
        except ValueError:
            pass


class AccumulateGrad(Node):
    """Sink of a leaf tensor: adds the incoming gradient into ``variable.grad``.

    It takes the largest sequence number so that it runs as soon as it is
    ready. Accumulation holds a lock: concurrent backwards on a shared graph
    accumulate exactly once each.
    """

    __slots__ = ("variable", "lock")

    def __init__(self, variable, host_metadata=None):
        # (a host array's metadata is the shared one: Note [Recording on the CPU]; the
        # caller may have it at hand, ``host_metadata``: Note [A leaf's run] in graph.py)
        data = variable.data
        if host_metadata is None and type(data) is np.ndarray:
            host_metadata = InputMetadata.cpu(data)
        if host_metadata is not None:
            super().__init__("AccumulateGrad", (), host_metadata, UINT64_MAX, True)
        else:
            super().__init__("AccumulateGrad", (), [InputMetadata.of(data)], UINT64_MAX)
        self.variable = variable
        self.lock = threading.Lock()

    def apply(self, grads):
        new_grad = grads[0]
        if new_grad is None:
            return []
        var = self.variable
        if var._post_acc_hooks:
            self._accumulate(grads, new_grad, var)
            call_post_accumulate_grad_hooks(var)
            return []
        return self._accumulate(grads, new_grad, var)

    def _accumulate(self, grads, new_grad, var):
        if STATE.grad_enabled:
            # Note [Differentiable .grad]: with create_graph the engine runs
            # nodes with grad mode on; .grad must stay differentiable, so it
            # is never updated in place: the first gradient is cloned (a
            # recorded clone), later ones are added out of place, and .grad
            # holds a Tensor (carrying a grad_fn when the gradient has one).
            with self.lock:
                var.grad = differentiable_accumulate(var.grad, new_grad, like=var.data)
            return []
        with self.lock:
            old = var.grad
            if old is None:
                # Note [Stealing gradients]: keep the incoming array itself, without
                # a copy, exactly when the buffer that delivered it owns it
                # (``grads.owns(0)``): a sum the InputBuffer made of several
                # contributions, or the one array a node's VJP created for this edge
                # that nothing else holds (the producer's side of this Note is in
                # ops/core.py: not the node's incoming gradient, a saved array or
                # Tensor, another of its outputs, or a view). A slot a hook or
                # pre-hook was shown (it may keep it), a captured gradient, a hook's
                # result, the caller's root gradient and a deterministic buffer's
                # single contribution are not owned and are copied, so .grad never
                # aliases a leaf, a saved tensor, a retained or hooked gradient, or
                # another leaf's gradient. PyTorch steals when the tensor's use count
                # is 1; a reference count is not a stable fact across interpreters,
                # so ownership is tracked instead (a hook that was shown the
                # gradient but kept nothing still costs a copy here: deliberately
                # more careful than PyTorch).
                owns = getattr(grads, "owns", None)
                if (owns is not None and owns(0) and isinstance(new_grad, np.ndarray)
                        and new_grad.flags.owndata and new_grad.flags.writeable):
                    var.grad = new_grad
                else:
                    var.grad = new_grad.copy()
            elif (isinstance(old, np.ndarray) and old.flags.writeable
                    and old.shape == np.shape(new_grad)):
                old += new_grad             # in place, as PyTorch without create_graph
            else:
                var.grad = old + new_grad
        return []


def call_post_accumulate_grad_hooks(var):
    """Run a leaf's post-accumulate-grad hooks after its ``.grad`` was updated."""
    for (hook,) in list(var._post_acc_hooks):
        if hook(var) is not None:
            raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def differentiable_accumulate(old, new_grad, like=None):
    """``old + new_grad`` (or a copy of ``new_grad``) as a Tensor, recorded under grad mode.

    The first gradient is copied: laid out like ``like`` (the leaf's array) with a
    recorded ``grad_copy`` when that layout is dense, as PyTorch's AccumulateGrad
    (Note [Differentiable .grad, PyTorch's copy]); else (a retained gradient, or a
    leaf that is not dense) a recorded contiguous clone, as PyTorch's."""
    Tensor = dispatch.Tensor         # Note [Core dispatch]
    if old is None:
        if type(new_grad) is Tensor:
            if like is not None and is_non_overlapping_and_dense(like):
                data = new_grad.data
                dst = on_device(xp_of_array(data).empty_like(like, dtype=data.dtype),
                                device_of(data))
                return dispatch.ops.grad_copy(Tensor(dst), new_grad)
            return dispatch.ops.clone(new_grad)
        return Tensor(new_grad.copy())
    total = old + new_grad
    return total if type(total) is Tensor else Tensor(total)


def is_non_overlapping_and_dense(array) -> bool:
    """PyTorch's layout test: the elements fill one block of memory without gaps or
    overlaps in some order of the dimensions (a transposed matrix is dense; every
    other column of one is not). Negative strides, which PyTorch cannot have, are
    not dense."""
    if array.size <= 1:
        return True
    item = array.itemsize
    dims = sorted((stride, size) for size, stride in zip(array.shape, array.strides)
                  if size != 1)
    expected = item
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


class GraphRoot(Node):
    """The node that starts a backward with several roots: it emits their grads."""

    __slots__ = ("outputs",)

    def __init__(self, root_edges, outputs):
        super().__init__("GraphRoot", list(root_edges), [])
        self.outputs = list(outputs)

    def apply(self, grads):
        return list(self.outputs)
