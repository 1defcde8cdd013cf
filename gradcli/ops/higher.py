"""The ``grad`` op: ``torch.autograd.grad`` run during the forward of a graph file.

``{op: grad, inputs: [y, x1, x2, ...], outputs: [g1, g2, ...], args: {...}}``
computes the gradients of ``y`` w.r.t. ``x1, x2, ...`` when the forward
reaches the op, with the engine, and defines them as ordinary tensors that
later ops read. With ``create_graph`` (the default) the backward records
itself (Note [Saved tensors] in autograd/saved.py), so the outputs carry the
graph of the backward and a later backward (or another ``grad``) gives
second- and higher-order derivatives: gradient penalties, Hessian-vector
products.

Note [grad op outputs]: the op records no node of its own: its outputs are
what ``grad`` returns, whose ``grad_fn``s are nodes recorded by the backward
formulas. Those nodes are labelled with the ``grad`` op's id and line, so a
later failure in one names this op. A gradient that does not depend on
anything requiring grad (``create_graph: false``, or a constant gradient) is
a tensor that does not require grad. An input that ``y`` does not depend on
is refused unless ``allow_unused: true``; then its gradient is zeros of the
input's shape (PyTorch returns None, or zeros with ``materialize_grads``: a
graph file's names hold tensors, so gradcli materializes it).
"""
from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from ..devices import device_of, on_device, xp_of
from . import args as A
from .core import OPS, Arg, Op


def _tensor_name(v):
    if v is None or isinstance(v, str) and v:
        return v
    raise ValueError(f"grad_outputs must be the name of a tensor (or null), got {v!r}")


def _bool_or_none(v):
    return None if v is None else A.boolean(v)


def _infer(shapes, dtypes, create_graph=True, retain_graph=None, grad_outputs=None,
           allow_unused=False):
    """The gradients have the shapes and dtypes of the inputs differentiated against."""
    from .core import ShapeMismatch  # noqa: PLC0415

    xs = len(shapes) - (1 if grad_outputs is not None else 0)
    for k in range(xs):
        if dtypes[k].kind != "f":
            raise ShapeMismatch(f"{{{k}}} has dtype {dtypes[k]}: only floating point tensors "
                                "can be differentiated")
    if grad_outputs is not None:
        last = len(shapes) - 1
        if shapes[last] != shapes[0]:
            raise ShapeMismatch(f"grad_outputs {{{last}}} has shape {list(shapes[last])} but "
                                f"{{0}} has shape {list(shapes[0])} (they must match)")
    elif int(np.prod(shapes[0], dtype=np.int64)) != 1:
        raise ShapeMismatch(f"{{0}} has shape {list(shapes[0])}: grad can be implicitly created "
                            "only for scalar outputs (give grad_outputs, a tensor name)")
    return [(shapes[k], dtypes[k]) for k in range(1, xs)]


class GradOp(Op):
    """``grad`` (see the module's docstring); ``for_entry`` binds it to its entry."""

    __slots__ = ("site",)
    runs_backward = True

    def __init__(self, site=None):
        super().__init__(
            "grad", None, node_name="none (its outputs carry nodes of the backward)", saves=False, arity=(2, None),
            args={"create_graph": Arg(True, A.boolean, "record the backward (higher order)"),
                  "retain_graph": Arg(None, _bool_or_none, "keep the graph (default: create_graph)"),
                  "grad_outputs": Arg(None, _tensor_name, "the gradient of inputs[0]: a tensor "
                                      "name, required when inputs[0] is not a scalar",
                                      names_tensor=True),
                  "allow_unused": Arg(False, A.boolean, "an input inputs[0] does not depend on "
                                      "gets zeros")},
            multi_output=True, outputs=lambda args: None, infer=_infer,
            doc="gradients of inputs[0] w.r.t. inputs[1:] computed in the forward "
                "(torch.autograd.grad); with create_graph they can be differentiated again")
        self.site = site

    def for_entry(self, entry, site):
        return GradOp(site)

    def num_outputs(self, args):
        return None        # as many as inputs after the first: the loader checks via infer

    def __call__(self, *inputs, create_graph=True, retain_graph=None, grad_outputs=None,
                 allow_unused=False):
        from ..autograd import enable_grad, grad  # noqa: PLC0415

        inputs = [x if type(x) is Tensor else Tensor(np.asarray(x)) for x in inputs]
        y, xs, go = inputs[0], inputs[1:], None
        if grad_outputs is not None:
            xs, go = inputs[1:-1], inputs[-1]
        if not y.requires_grad:
            raise ValueError("inputs[0] does not require grad and does not have a grad_fn "
                             "(nothing it is computed from requires grad)")
        for k, x in enumerate(xs, 1):
            if not x.requires_grad:
                raise ValueError(f"inputs[{k}]: one of the differentiated Tensors does not "
                                 "require grad")
        if go is None and y.data.size != 1:
            raise ValueError("grad can be implicitly created only for scalar outputs "
                             "(give grad_outputs)")
        if retain_graph is None:
            retain_graph = create_graph
        try:
            with enable_grad():
                result = grad([y], xs, None if go is None else [go], retain_graph=retain_graph,
                              create_graph=create_graph, allow_unused=True)
        except Exception as exc:  # noqa: BLE001 - a node's backward raised during the forward
            raise self._raised(exc) from exc
        outs = []
        for k, (x, g) in enumerate(zip(xs, result), 1):
            if g is None:
                if not allow_unused:
                    raise ValueError(f"inputs[{k}]: one of the differentiated Tensors appears to "
                                     "not have been used in the graph (set allow_unused: true "
                                     "to get zeros)")
                dev = device_of(x.data)
                g = on_device(xp_of(dev).zeros(x.shape, x.dtype), dev)
            outs.append(g if type(g) is Tensor else Tensor(g))
        self._label(outs)
        return outs

    def _raised(self, exc):
        from .usercode import ForwardRaised, describe  # noqa: PLC0415

        site = self.site
        node = getattr(exc, "gradcli_node", None)
        where = ""
        if site is not None:
            where = f"{site.file}:{site.line}: " if site.file and site.line else ""
            where += f"{site.label}: "
        in_node = f" in {node.name}" if node is not None else ""
        origin = ""
        op_id, line = _label_of(node) if node is not None else (None, None)
        if op_id:
            origin = f" (node created by op {op_id}"
            origin += f" at line {line})" if line else ")"
        return ForwardRaised(f"{where}the backward run by grad failed{in_node}: "
                             f"{describe(exc)}{origin}", exc, node)

    def _label(self, outs):
        """Label the nodes the backward recorded with this op (Note [grad op outputs])."""
        if self.site is None:
            return
        stack = [t.grad_fn for t in outs if t.grad_fn is not None]
        seen = set()
        while stack:
            fn = stack.pop()
            if fn is None or id(fn) in seen or _label_of(fn)[0] is not None:
                continue
            seen.add(id(fn))
            _set_label(fn, self.site.op_id, self.site.line)
            stack.extend(e[0] for e in fn.next_edges if e is not None)


def _label_of(node):
    """(op id, line) the graph loader stamped in ``node.metadata``."""
    return node.metadata.get("op_id"), node.metadata.get("line")


def _set_label(node, op_id, line):
    node.metadata.update(op_id=op_id, line=line)


OPS["grad"] = GradOp()
