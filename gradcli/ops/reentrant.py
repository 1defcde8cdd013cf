"""Ops whose backward calls the engine again: ``reenter`` and ``checkpoint``.

Note [Reentrant ops]: a node's backward that calls ``backward()``/``grad()``
runs on an engine thread (worker_device is set), so the engine treats the
call as reentrant: the nested graph task runs on this same thread, or on a
pool thread past the depth limit (Note [Reentrant backwards] in
autograd/engine.py).
"""
from __future__ import annotations

import numpy as np

from ..autograd.node import ERR_BACKWARD_TWICE, InputMetadata, Node
from ..autograd.state import STATE
from ..autograd.tensor import Tensor
from . import args as A
from .core import Arg, defvjp, primitive


def _depth(v):
    if A.is_int(v) and v >= 0:
        return int(v)
    raise ValueError(f"depth must be a non-negative int, got {v!r}")


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
    leaf = Tensor(np.asarray(data) if type(data).__module__ == "numpy"
                  and not hasattr(data, "gradcli_device") else data, requires_grad=True)
    with enable_grad():
        inner = reenter(leaf, depth=depth - 1)
    (result,) = grad([inner], [leaf], [g], create_graph=create_graph)
    return result


defvjp(reenter, _reenter_vjp)


def run_body(body, input_names, output_names, tensors):
    """Run a checkpoint body (a scope of its own) on ``tensors``; return its outputs."""
    scope = dict(zip(input_names, tensors))
    for spec in body:
        out = spec.op(*[scope[n] for n in spec.inputs], **spec.args)
        outs = out if isinstance(out, list) else [out]
        node = outs[0].grad_fn
        if node is not None:
            node.op_id, node.source = spec.id, spec.line
        scope.update(zip(spec.outputs, outs))
    return [scope[n] for n in output_names]


class CheckpointOp:
    """A ``checkpoint`` op of a graph file: its body runs without recording in
    forward, and again with recording inside its backward node."""

    name = "checkpoint"
    multi_output = True
    differentiable = True

    def __init__(self, body, input_names, output_names):
        self.body = body
        self.input_names = input_names
        self.output_names = output_names

    def fn(self, *arrays, **args):
        """The body on raw arrays, no recording (as every op's ``fn``)."""
        scope = dict(zip(self.input_names, arrays))
        for spec in self.body:
            out = spec.op.fn(*[scope[n] for n in spec.inputs], **spec.args)
            scope.update(zip(spec.outputs, out if spec.op.multi_output else [out]))
        return [scope[n] for n in self.output_names]

    def __call__(self, *inputs, **args):
        from ..autograd import no_grad

        with no_grad():
            outs = run_body(self.body, self.input_names, self.output_names, list(inputs))
        needs = STATE.grad_enabled and any(t.requires_grad for t in inputs)
        if not needs:
            return [Tensor(o.data) for o in outs]
        edges = [t.gradient_edge() if t.requires_grad else None for t in inputs]
        node = CheckpointBackward(edges, [InputMetadata.of(o.data) for o in outs], self,
                                  [t.data for t in inputs])
        result = []
        for i, o in enumerate(outs):
            t = Tensor(o.data, requires_grad=o.data.dtype.kind == "f")
            if t.requires_grad:
                t.grad_fn, t.output_nr = node, i
            result.append(t)
        return result


class CheckpointBackward(Node):
    """Re-runs the body with recording, then runs its backward reentrantly."""

    __slots__ = ("checkpoint", "saved")

    def __init__(self, edges, metas, checkpoint, saved):
        super().__init__("CheckpointFunctionBackward", edges, metas)
        self.checkpoint = checkpoint
        self.saved = saved

    def apply(self, grads):
        from ..autograd import backward, enable_grad

        if self.saved is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        detached = [Tensor(d, requires_grad=e is not None) for d, e in zip(self.saved, self.next_edges)]
        with enable_grad():
            outs = run_body(self.checkpoint.body, self.checkpoint.input_names,
                            self.checkpoint.output_names, detached)
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
