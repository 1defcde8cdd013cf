"""Ops whose backward calls the engine again: ``reenter`` and ``checkpoint``.

Note [Reentrant ops]: a node's backward that calls ``backward()``/``grad()``
runs on an engine thread (worker_device is set), so the engine treats the
call as reentrant: the nested graph task runs on this same thread, or on a
pool thread past the depth limit (Note [Reentrant backwards] in
autograd/engine.py).
"""
from __future__ import annotations

import numpy as np

from ..devices import CPU, device_of
from ..autograd.node import ERR_BACKWARD_TWICE, InputMetadata, Node
from ..autograd.state import STATE
from ..autograd.tensor import Tensor
from . import args as A
from .core import Arg, defvjp, primitive


# The deepest `reenter` a graph may ask for. PyTorch's test_deep_reentrant
# goes 8,193 levels deep; each 60 levels take one reentrant pool thread
# (Note [Pool thread stacks] in autograd/engine.py), so this bound keeps a
# file's thread count (and memory) bounded, as `delay`'s bound keeps its time.
MAX_REENTER_DEPTH = 10_000


def _depth(v):
    if A.is_int(v) and 0 <= v <= MAX_REENTER_DEPTH:
        return int(v)
    raise ValueError(f"depth must be an int between 0 and {MAX_REENTER_DEPTH}, got {v!r}")


@primitive("reenter", "ReenterBackward0", saves=False, args={"depth": Arg(1, _depth)},
           infer=lambda shapes, dtypes, depth=1: [(shapes[0], dtypes[0])])
def reenter(x, depth=1):
    """identity; its backward nests depth reentrant backward calls, passing the gradient through"""
    return x


def _reenter_vjp(g, ans, x, depth=1):
    # As PyTorch's test_deep_reentrant: each level records a one-node graph
    # and runs its backward from inside this node; the innermost returns g.
    if depth <= 0:
        return g
    from ..autograd import enable_grad, grad

    create_graph = type(g) is Tensor       # a create_graph backward: g keeps its graph
    data = g.data if create_graph else g
    leaf = Tensor(np.asarray(data) if device_of(data) is CPU else data, requires_grad=True)
    with enable_grad():
        inner = reenter(leaf, depth=depth - 1)
    (result,) = grad([inner], [leaf], [g], create_graph=create_graph)
    return result


defvjp(reenter, _reenter_vjp)


def checkpoint(function, *inputs):
    """``torch.utils.checkpoint.checkpoint(function, *inputs, use_reentrant=True)``.

    ``function`` takes Tensors and returns a Tensor or a list/tuple of
    Tensors. It runs once here without recording; the backward node runs it
    again with recording and backpropagates through the result reentrantly.
    The result has the structure ``function`` returned.
    """
    from ..autograd import no_grad

    with no_grad():
        outs = function(*inputs)
    single = not isinstance(outs, (list, tuple))
    as_tuple = isinstance(outs, tuple)
    outs = [outs] if single else list(outs)
    needs = STATE.grad_enabled and any(
        isinstance(t, Tensor) and t.requires_grad for t in inputs)
    if not needs:
        result = [Tensor(o.data) for o in outs]
    else:
        edges = [t.gradient_edge() if isinstance(t, Tensor) and t.requires_grad else None
                 for t in inputs]
        node = CheckpointBackward(edges, [InputMetadata.of(o.data) for o in outs], function,
                                  [t.data if isinstance(t, Tensor) else t for t in inputs])
        result = []
        for i, o in enumerate(outs):
            t = Tensor(o.data, requires_grad=o.data.dtype.kind == "f")
            if t.requires_grad:
                t.grad_fn, t.output_nr = node, i
            result.append(t)
    if single:
        return result[0]
    return tuple(result) if as_tuple else result


class CheckpointOp:
    """The ``checkpoint`` op of a graph file: ``function`` (Tensors -> list of
    Tensors) is what ``checkpoint`` re-runs; ``raw`` is the same body on raw
    arrays without recording (as every op's ``fn``, for gradcheck). With
    ``use_reentrant: false`` the body's graph is recorded as usual and its saved
    tensors are recomputed when the backward needs them."""

    name = "checkpoint"
    multi_output = True

    def __init__(self, function, raw, use_reentrant=True):
        self.function = function
        self.fn = raw
        self.use_reentrant = use_reentrant    # ``use_reentrant: false`` in the file

    def __call__(self, *inputs, **args):
        if not self.use_reentrant:
            # Note [Non-reentrant checkpoint] in autograd/checkpoint.py
            from ..autograd.checkpoint import checkpoint as non_reentrant  # noqa: PLC0415

            return list(non_reentrant(self.function, *inputs, use_reentrant=False))
        return list(checkpoint(self.function, *inputs))


# Note [Checkpoint and grad()]: as PyTorch's reentrant checkpoint
# (torch.autograd._is_checkpoint_valid), the re-run's backward() accumulates
# into the re-run inputs' .grad and cannot honour a graph task that only
# computes some gradients (grad(), or backward with `inputs`: a non-empty
# exec_info) nor record the backward for a grad op's create_graph. gradcli
# refuses then, with PyTorch's message, instead of returning a gradient that
# misses the checkpoint's part (a grad op names the checkpoint's node and op).
ERR_CHECKPOINT_GRAD = ("checkpoint: torch.utils.checkpoint is incompatible with .grad() or "
                       "passing an `inputs` parameter to .backward() (a grad op or backward "
                       "inputs differentiate through this checkpoint)")


def _checkpoint_valid():
    """False inside a graph task with exec_info: grad() or backward(inputs=...)."""
    from ..autograd.state import ENGINE_TLS  # noqa: PLC0415

    task = ENGINE_TLS.current_graph_task
    return task is None or not task.exec_info


class CheckpointBackward(Node):
    """Re-runs the function with recording, then runs its backward reentrantly."""

    __slots__ = ("function", "saved")

    def __init__(self, edges, metas, function, saved):
        super().__init__("CheckpointFunctionBackward", edges, metas)
        self.function = function
        self.saved = saved

    def apply(self, grads):
        from ..autograd import backward, enable_grad

        if self.saved is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        if not _checkpoint_valid():
            raise RuntimeError(ERR_CHECKPOINT_GRAD)
        detached = [Tensor(d, requires_grad=e is not None) if hasattr(d, "dtype") else d
                    for d, e in zip(self.saved, self.next_edges)]
        with enable_grad():
            outs = self.function(*detached)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        roots, root_grads = [], []
        for o, g in zip(outs, grads):
            if g is not None and o.requires_grad:
                roots.append(o)
                root_grads.append(g)
        if roots:
            backward(roots, root_grads)
        return [d.grad if e is not None else None for d, e in zip(detached, self.next_edges)]

    def release_variables(self):
        self.saved = None
