"""``gradcli.autograd.graph``: saved-tensor hooks and multi-grad hooks, as PyTorch's
``torch.autograd.graph``.

Note [Saved-tensor hooks]: while ``saved_tensors_hooks(pack_hook, unpack_hook)`` is
active on a thread, every Tensor a node saves as it is recorded there (an op's inputs
and its output, ``ctx.save_for_backward``) is handed to ``pack_hook`` and the node keeps
only what that returns; when the backward needs the tensor, ``unpack_hook(packed)``
gives it back, and its values are what the backward uses. Only the innermost hooks
apply (a stack per thread, as PyTorch's). ``unpack_hook`` must return a Tensor. The
node keeps the saved tensor's place in the graph (its ``grad_fn`` or leaf), not its
values, so a ``create_graph`` backward still differentiates through the unpacked values
as through the original tensor. A pack hook may not change its input in place. A
tensor saved under hooks is not checked against its version counter (the pack hook
may have copied it), as in PyTorch. ``disable_saved_tensors_hooks(message)`` makes
saving under hooks fail with ``message``, and so entering ``saved_tensors_hooks``.
"""
from __future__ import annotations

from . import dispatch
from .state import STATE


class saved_tensors_hooks:
    """Pack every tensor saved for backward inside the block; unpack it when needed.

    Example (keep saved tensors as float16 copies)::

        def pack(t):
            return t.data.astype(np.float16)

        def unpack(a):
            return Tensor(a.astype(np.float64))

        with saved_tensors_hooks(pack, unpack):
            y = O.exp(x)           # ExpBackward0 keeps a float16 copy of y
        y.sum().backward()         # and reads it back through unpack
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        message = STATE.saved_hooks_disabled
        if message is not None:
            raise RuntimeError(message)
        dispatch.SAVED_CHECKS = True
        STATE.saved_hooks = STATE.saved_hooks + ((self.pack_hook, self.unpack_hook),)
        return self

    def __exit__(self, *exc):
        STATE.saved_hooks = STATE.saved_hooks[:-1]


class disable_saved_tensors_hooks:
    """Inside the block, saving a tensor under saved-tensor hooks (or entering
    ``saved_tensors_hooks``) raises ``RuntimeError(error_message)``.

    Example::

        with disable_saved_tensors_hooks("offloading is not supported here"):
            y = x * x              # fine: no hooks are active
    """

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        # (PyTorch's SavedTensorDefaultHooks::disable, fail_if_non_empty: entering it
        # while saved-tensor hooks are active raises its message, the state unchanged)
        if STATE.saved_hooks:
            raise RuntimeError(self.error_message)
        self.prev = STATE.saved_hooks_disabled
        STATE.saved_hooks_disabled = self.error_message
        dispatch.SAVED_CHECKS = True
        return self

    def __exit__(self, *exc):
        STATE.saved_hooks_disabled = self.prev


def current_hooks():
    """The innermost ``(pack_hook, unpack_hook)``, or None; raises when disabled."""
    hooks = STATE.saved_hooks
    if not hooks:
        return None
    message = STATE.saved_hooks_disabled
    if message is not None:
        raise RuntimeError(message)
    return hooks[-1]


ERR_PACK_INPLACE = ("A saved tensor pack hook is modifying its input in place. Tensors "
                    "provided as input to pack hook cannot be modified by in-place operations "
                    "as this can lead to unexpected side-effects. Please open an issue if you "
                    "need to perform in-place operations on the input to a pack hook.")


class Packed:
    """One tensor saved under hooks: what ``pack_hook`` returned, the ``unpack_hook`` to
    call, and the tensor's place in the graph (Note [Saved-tensor hooks])."""

    __slots__ = ("packed", "unpack_hook", "requires_grad", "grad_fn", "output_nr",
                 "accumulator")

    def __init__(self, tensor, hooks, is_output=False):
        pack_hook, self.unpack_hook = hooks
        version = tensor._version
        self.packed = pack_hook(tensor)
        if tensor._version != version:
            raise RuntimeError(ERR_PACK_INPLACE)
        if is_output:                     # the node itself: no cycle (Note [Saved tensors])
            self.requires_grad, self.grad_fn, self.output_nr, self.accumulator = (
                False, None, tensor.output_nr, None)
        else:
            self.requires_grad = tensor.requires_grad
            self.grad_fn, self.output_nr = tensor.grad_fn, tensor.output_nr
            self.accumulator = tensor._grad_accumulator if tensor.grad_fn is None else None

    def unpack(self):
        """The Tensor ``unpack_hook`` gives back, with the saved tensor's place in the graph."""
        value = self.unpack_hook(self.packed)
        Tensor = dispatch.Tensor
        if type(value) is not Tensor:
            raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but "
                            f"got result of type {type(value).__name__}")
        t = Tensor(value.data, requires_grad=self.requires_grad and value.data.dtype.kind == "f")
        if t.requires_grad:
            t.grad_fn, t.output_nr = self.grad_fn, self.output_nr
            t._grad_accumulator = self.accumulator
        return t


class SavedMeta:
    """What a node keeps of a saved value its backward reads only the size of
    (Note [What a node saved]): shape, dtype, ndim, size."""

    __slots__ = ("shape", "dtype", "ndim", "size")

    def __init__(self, array):
        self.shape, self.dtype, self.ndim, self.size = (array.shape, array.dtype, array.ndim,
                                                        array.size)


class PackedSaved:
    """An op node's saved values under saved-tensor hooks; ``values()`` unpacks them
    into the flat tuple of Note [Saved layout]. Only the values the node's backward
    reads are packed (``uses``: Note [What a node saved]), in PyTorch's order: the
    inputs, then the outputs; of the others the node keeps only their sizes."""

    __slots__ = ("entries", "out", "multi", "n")

    def __init__(self, datas, out, inputs, outputs, hooks, uses):
        Tensor = dispatch.Tensor
        uses_out, used = uses
        self.n = len(datas)
        self.entries = [(Packed(x, hooks) if k in used else SavedMeta(d)) if type(x) is Tensor
                        else d for k, (d, x) in enumerate(zip(datas, inputs))]
        self.multi = type(out) is list
        self.out = [(Packed(t, hooks, is_output=True)
                     if uses_out is True or (uses_out and i in uses_out) else SavedMeta(o))
                    if type(t) is Tensor else o
                    for i, (o, t) in enumerate(zip(out if self.multi else [out], outputs))]

    def __len__(self):
        return 2 * self.n + 1

    def values(self):
        datas, tensors = [], []
        for e in self.entries:
            if type(e) is Packed:
                t = e.unpack()
                datas.append(t.data)
                tensors.append(t)
            else:
                datas.append(e)
                tensors.append(e)
        outs = [e.unpack().data if type(e) is Packed else e for e in self.out]
        return (*datas, outs if self.multi else outs[0], *tensors)


# Note [Multi-grad hooks]: ``register_multi_grad_hook`` puts one tensor hook on each of
# the tensors. In a backward (one graph task), mode "all" calls ``fn`` once, with one
# gradient per tensor (None for those this backward computes none for), as soon as the
# last of the tensors that will get one has got it; which will is read off the graph
# task the first time one of the hooks fires (the nodes reachable from its roots, or
# under grad() those it runs or captures: PyTorch's _will_engine_execute_node, which
# refuses leaves under grad(); gradcli answers for them too). Mode "any" calls
# ``fn(grad)`` once, with the first of the gradients. State is kept per graph task, so
# concurrent backwards each get their own call.
class _MultiHandle:
    __slots__ = ("handles",)

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()


def _will_execute(graph_task, nodes):
    """For each node: will this graph task run it (or capture its gradient)?"""
    exec_info = graph_task.exec_info
    if exec_info:
        out = []
        for fn in nodes:
            info = exec_info.get(fn)
            out.append(info is not None and (info.should_execute() or info.captures is not None))
        return out
    seen = set()
    stack = list(graph_task.graph_roots)
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        stack.extend(e[0] for e in fn.next_edges if e is not None)
    return [fn in seen for fn in nodes]


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Call ``fn`` once per backward when the gradients of ``tensors`` are computed.

    ``mode="all"``: ``fn(grads)``, a tuple with each tensor's gradient (None where this
    backward computes none), after the last one is computed. ``mode="any"``:
    ``fn(grad)`` with the first gradient computed. Returns a handle with ``remove()``.

    Example::

        handle = register_multi_grad_hook((a, b), lambda grads: print(len(grads)))
        (a * b).sum().backward()        # prints 2
        handle.remove()
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    import threading  # noqa: PLC0415

    from .state import ENGINE_TLS  # noqa: PLC0415

    tensors = tuple(tensors)
    nodes = []
    for t in tensors:
        edge = t.gradient_edge() if t.requires_grad else None
        if edge is None:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        nodes.append(edge[0])
    lock = threading.Lock()
    pending = {}           # graph task id -> [expected count, grads] ("all"), or True ("any")

    def make_hook(i):
        def hook(grad):
            task = ENGINE_TLS.current_graph_task
            key = task.id if task is not None else None
            with lock:
                if mode == "any":
                    if key in pending:
                        return None
                    pending[key] = True
                    call = (grad,)
                else:
                    state = pending.get(key)
                    if state is None:
                        expected = (sum(_will_execute(task, nodes)) if task is not None
                                    else len(tensors))
                        state = pending[key] = [expected, [None] * len(tensors)]
                    state[1][i] = grad
                    state[0] -= 1
                    if state[0] > 0:
                        return None
                    del pending[key]
                    call = (tuple(state[1]),)
            if mode == "any":
                _forget_later(pending, key, lock)
            fn(*call)
            return None
        return hook

    return _MultiHandle([t.register_hook(make_hook(i)) for i, t in enumerate(tensors)])


def _forget_later(pending, key, lock):
    """Drop a mode-"any" hook's per-backward mark when that backward ends."""
    from .engine import Engine  # noqa: PLC0415

    def forget():
        with lock:
            pending.pop(key, None)

    try:
        Engine.queue_callback(forget)
    except RuntimeError:
        forget()
