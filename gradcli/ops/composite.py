"""Composite ops: an op gradcli has no kernel for, written as a body of ops it has.

A graph file may write an ATen op as a composite (spec: "Composite ops" in
docs/graph-format.md)::

    - op: aten.softplus.default          # the op it stands for, as PyTorch names it
      inputs: [x]                        # laid out as that op's schema
      output: y
      args: {beta: 2.0}                  # that op's arguments (PyTorch's replay reads them)
      composite:
        node: SoftplusBackward0          # the backward node PyTorch records for the op
        constants: [const.softplus.k]    # leaf tensors the body reads (optional)
        body:                            # the op's decomposition, ops gradcli has
          - {op: aten.mul.Scalar, inputs: [x], output: bx, args: {other: 2.0}}
          - ...
          - {op: ..., output: y}         # defines each name in output(s)

gradcli runs the body; PyTorch runs the op itself. The composite records ONE
node named ``node`` whose edges go to the composite's inputs, so the order of
a backward shows the node PyTorch's engine ran (Note [Composite nodes]).

Note [Composite nodes]: the forward runs the body with recording on, on
detached copies of the inputs (leaves of a graph of its own), and keeps that
inner graph. The composite's node, when the engine calls it, runs the inner
graph's VJPs itself, not through the engine: every inner node in decreasing
sequence number (a topological order for a graph recorded on one thread),
each node's gradients checked as the engine checks them (``validate_outputs``)
and summed into the inputs of the nodes they feed; what reaches the inner
leaves is the node's result. So the engine, ``order`` and traces see one node
per composite, as PyTorch's engine sees one node per op; the body's nodes never
reach the engine's ready queue nor its hooks. A composite's backward cannot
record a graph (``create_graph``): it refuses, naming its node.

A Python ``torch.autograd.Function`` is written as a composite too, named
``function.CLASS``, with its backward's ops beside its forward's (Note [Python
Functions as composites], at ``FunctionOp``).
"""
from __future__ import annotations

import re

from ..autograd.node import ERR_BACKWARD_TWICE, InputMetadata, Node
from ..autograd.state import STATE
from ..autograd.tensor import Tensor

ATEN_NAME = re.compile(r"^aten\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
FUNCTION_NAME = re.compile(r"^function\.[A-Za-z_][A-Za-z0-9_]*$")
NODE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENTRY_KEYS = {"op", "inputs", "output", "outputs", "args", "id", "retain_grad", "composite",
              "no_grad"}
COMPOSITE_KEYS = {"node", "constants", "body", "backward"}
BACKWARD_KEYS = {"grads", "body", "outputs"}
ERR_CREATE_GRAPH = ("{node}: a composite op's backward cannot record a graph (create_graph): "
                    "its body's VJPs run inside the node")


def is_composite(entry) -> bool:
    """Whether a graph file's op entry is a composite (it has a ``composite`` key)."""
    return isinstance(entry, dict) and "composite" in entry


def _names(inputs):
    """The tensor names of a schema-laid-out ``inputs`` (nested lists flattened)."""
    out = []
    for v in inputs:
        if isinstance(v, list):
            out.extend(_names(v))
        elif isinstance(v, str) and v not in out:
            out.append(v)
    return out


def load(loader, i, entry, defined, base, prefix, defined_type, spec_type):
    """The op spec of composite entry ``i`` (the loader hands the entry here).

    ``loader`` checks the body's entries (its ``op``) and raises errors
    (``fail``); ``defined_type``/``spec_type`` are its records of a name and an op.

    >>> # {op: aten.softplus.default, inputs: [x], output: y, composite: {...}}
    """
    path = base + (i,)
    where = f"{prefix}[{i}]"
    op_id = entry.get("id", where)
    if not isinstance(op_id, str) or not op_id:
        loader.fail(f"id must be a non-empty string, got {op_id!r}", path + ("id",), where)
    name = entry.get("op")
    label = (where if op_id == where else f"{where} {op_id!r}") + f" ({name})"
    is_function = isinstance(name, str) and bool(FUNCTION_NAME.match(name))
    if not isinstance(name, str) or not (ATEN_NAME.match(name) or is_function):
        loader.fail(f"a composite stands for an ATen op named aten.NAME.OVERLOAD or a Python "
                    f"autograd.Function named function.CLASS, not {name!r}", path + ("op",), label)
    loader.check_keys(entry, ENTRY_KEYS, path, label, "a composite op")
    comp = entry["composite"]
    if not isinstance(comp, dict):
        loader.fail("composite must be a mapping with node and body", path + ("composite",), label)
    loader.check_keys(comp, COMPOSITE_KEYS, path + ("composite",), label, "composite")
    node = comp.get("node")
    if not isinstance(node, str) or not NODE_NAME.match(node):
        loader.fail(f"composite.node must be the backward node's name (such as "
                    f"SoftplusBackward0), not {node!r}", path + ("composite", "node"), label)
    args = entry.get("args", {})
    if args is not None and not isinstance(args, dict):
        loader.fail("args must be a mapping (the op's arguments, as PyTorch takes them)",
                    path + ("args",), label)
    inputs = entry.get("inputs")
    if not isinstance(inputs, list) or not all(
            v is None or isinstance(v, (str, int, float, list)) for v in inputs):
        loader.fail("inputs must be a list of tensor names (laid out as the op's schema)",
                    path + ("inputs",), label)
    names = _names(inputs)
    constants = comp.get("constants", [])
    if not isinstance(constants, list) or not all(isinstance(c, str) for c in constants):
        loader.fail("composite.constants must be a list of tensor names",
                    path + ("composite", "constants"), label)
    for k, n in enumerate(names):
        if n not in defined:
            loader.fail(f"input {n!r} is not defined above this op", path + ("inputs",), label)
    for k, n in enumerate(constants):
        if n not in defined or not defined[n].leaf:
            loader.fail(f"constant {n!r} is not a leaf tensor defined above this op",
                        path + ("composite", "constants", k), label)
    reads = names + [c for c in constants if c not in names]
    if "output" in entry and "outputs" in entry:
        loader.fail("give output or outputs, not both", path, label)
    outputs = entry.get("outputs", [entry["output"]] if "output" in entry else None)
    if not isinstance(outputs, list) or not outputs:
        loader.fail("missing required key 'output' (or outputs: [...])", path, label)
    body = comp.get("body")
    if not isinstance(body, list) or not body:
        loader.fail("composite.body must be a non-empty list of ops", path + ("composite", "body"),
                    label)
    scope = {n: defined[n] for n in reads}
    specs = [loader.op(k, e, scope, path + ("composite", "body"), f"{where}.composite")
             for k, e in enumerate(body)]
    out_path = path + (("outputs",) if "outputs" in entry else ("output",))
    for out in outputs:
        loader.check_name(out, out_path, label)
        if out not in scope or out in reads:
            loader.fail(f"output {out!r} is not defined by the composite's body (the body "
                        "defines each output name)", out_path, label)
        if out in defined:
            loader.fail(f"output {out!r} is already defined above (names are defined once)",
                        out_path, label)
    if len(set(outputs)) != len(outputs):
        loader.fail("an output is named twice", out_path, label)
    retain = entry.get("retain_grad", False)
    if not isinstance(retain, bool):
        loader.fail(f"retain_grad must be true or false, got {retain!r}",
                    path + ("retain_grad",), label)
    if is_function:
        op = FunctionOp(name, node, specs, reads, outputs,
                        _load_backward(loader, comp, inputs, reads, outputs, scope, defined,
                                       defined_type, path, where, label))
    elif "backward" in comp:
        loader.fail("composite.backward is for function.CLASS composites only (an ATen op's "
                    "backward is its body's VJPs)", path + ("composite", "backward"), label)
    else:
        op = CompositeOp(name, node, specs, reads, outputs)
    for out in outputs:
        defined[out] = defined_type(scope[out].shape, scope[out].dtype, False)
    line, find_line = loader.entry_line(base, i)
    return spec_type(index=i, id=op_id, label=label, op=op,
                     inputs=reads, outputs=list(outputs), args={}, retain_grad=retain,
                     lineno=line, find_line=find_line)


def _load_backward(loader, comp, inputs, reads, outputs, scope, defined, defined_type, path,
                   where, label):
    """The ``FunctionBackward`` of a function composite's ``composite.backward``
    (Note [Python Functions as composites])."""
    bpath = path + ("composite", "backward")
    bwd = comp.get("backward")
    if not isinstance(bwd, dict):
        loader.fail("a function composite needs composite.backward: a mapping with grads, body "
                    "and outputs (its Function's backward)", bpath, label)
    loader.check_keys(bwd, BACKWARD_KEYS, bpath, label, "composite.backward")
    if any(isinstance(v, list) for v in inputs):
        loader.fail("a function composite's inputs are a flat list of tensor names",
                    path + ("inputs",), label)
    grads = bwd.get("grads")
    if not isinstance(grads, list) or len(grads) != len(outputs):
        loader.fail(f"composite.backward.grads must list one name (or null) per output: "
                    f"{len(outputs)}", bpath + ("grads",), label)
    bscope = {n: defined[n] for n in reads}
    for k, (g, out) in enumerate(zip(grads, outputs)):
        if g is None:
            continue
        loader.check_name(g, bpath + ("grads", k), label)
        if g in bscope:
            loader.fail(f"grads name {g!r} is already an input of the backward (names are "
                        "defined once)", bpath + ("grads", k), label)
        bscope[g] = defined_type(scope[out].shape, scope[out].dtype, False)
    body = bwd.get("body", [])
    if not isinstance(body, list):
        loader.fail("composite.backward.body must be a list of ops", bpath + ("body",), label)
    specs = [loader.op(k, e, bscope, bpath + ("body",), f"{where}.composite.backward")
             for k, e in enumerate(body)]
    outs = bwd.get("outputs")
    tensor_inputs = [v for v in inputs if isinstance(v, str)]
    if not isinstance(outs, list) or len(outs) != len(tensor_inputs):
        loader.fail(f"composite.backward.outputs must name one gradient (or null) per tensor "
                    f"input: {len(tensor_inputs)}", bpath + ("outputs",), label)
    for k, (o, x) in enumerate(zip(outs, tensor_inputs)):
        if o is None:
            continue
        if not isinstance(o, str) or o not in bscope:
            loader.fail(f"gradient {o!r} is not defined by the backward (its body, grads or "
                        "the composite's inputs)", bpath + ("outputs", k), label)
        got, want = bscope[o].shape, defined[x].shape
        if got is not None and want is not None and tuple(got) != tuple(want):
            loader.fail(f"gradient {o!r} of input {x!r} has shape {list(got)}, not the input's "
                        f"{list(want)}", bpath + ("outputs", k), label)
    return FunctionBackwardSpec(grads, specs, [reads.index(x) for x in tensor_inputs], outs)


class CompositeOp:
    """The op of a composite entry: ``__call__`` on Tensors records one
    ``node_name`` node (Note [Composite nodes]); ``fn`` runs the body on raw
    arrays without recording (as every op's ``fn``, for gradcheck)."""

    multi_output = True

    def __init__(self, name, node_name, body, input_names, output_names):
        self.name = name
        self.node_name = node_name
        self.body = body
        self.input_names = input_names
        self.output_names = output_names

    def __repr__(self):
        return f"<composite {self.name} ({self.node_name})>"

    def run_body(self, tensors):
        scope = dict(zip(self.input_names, tensors))
        for spec in self.body:
            out = spec.op(*[scope[n] for n in spec.inputs], **spec.args)
            scope.update(zip(spec.outputs, out if isinstance(out, list) else [out]))
        return [scope[n] for n in self.output_names]

    def fn(self, *arrays, **args):
        scope = dict(zip(self.input_names, arrays))
        for spec in self.body:
            out = spec.op.fn(*[scope[n] for n in spec.inputs], **spec.args)
            scope.update(zip(spec.outputs, out if spec.op.multi_output else [out]))
        return [scope[n] for n in self.output_names]

    def __call__(self, *inputs, **args):
        from ..autograd import enable_grad, no_grad  # noqa: PLC0415

        needs = STATE.grad_enabled and any(isinstance(t, Tensor) and t.requires_grad
                                           for t in inputs)
        if not needs:
            with no_grad():
                return [Tensor(o.data) for o in self.run_body(list(inputs))]
        leaves = [Tensor(t.data, requires_grad=t.requires_grad) for t in inputs]
        with enable_grad():
            outs = self.run_body(leaves)
        edges = [t.gradient_edge() if t.requires_grad else None for t in inputs]
        node = CompositeBackward(self.node_name, edges, [InputMetadata.of(o.data) for o in outs],
                                 outs, leaves)
        result = []
        for k, o in enumerate(outs):
            t = Tensor(o.data, requires_grad=o.requires_grad)
            if t.requires_grad:
                t.grad_fn, t.output_nr = node, k
            result.append(t)
        return result


class CompositeBackward(Node):
    """Runs the body's VJPs (Note [Composite nodes])."""

    __slots__ = ("outs", "leaves")

    def __init__(self, name, edges, metas, outs, leaves):
        super().__init__(name, edges, metas)
        self.outs = outs
        self.leaves = leaves

    def apply(self, grads):
        from ..autograd.engine import validate_outputs  # noqa: PLC0415

        if self.outs is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        if STATE.grad_enabled or any(type(g) is Tensor for g in grads):  # create_graph
            raise RuntimeError(ERR_CREATE_GRAPH.format(node=self.name))
        sinks = {}                   # an inner leaf's accumulator -> its index
        for k, leaf in enumerate(self.leaves):
            if leaf.requires_grad:
                sinks[leaf.gradient_edge()[0]] = k
        result = [None] * len(self.leaves)
        buffers = {}                 # inner node -> its gradient inputs

        def send(edge, g):
            if edge is None or g is None:
                return
            fn, nr = edge
            if fn in sinks:
                k = sinks[fn]
                result[k] = g if result[k] is None else result[k] + g
                return
            buf = buffers.get(fn)
            if buf is None:
                buf = buffers[fn] = [None] * len(fn.input_metadata)
            buf[nr] = g if buf[nr] is None else buf[nr] + g

        for o, g in zip(self.outs, grads):
            if o.requires_grad:
                send(o.gradient_edge(), g)
        seen, stack = set(), [o.grad_fn for o in self.outs if o.grad_fn is not None]
        while stack:
            fn = stack.pop()
            if fn in seen or fn in sinks:
                continue
            seen.add(fn)
            stack.extend(e[0] for e in fn.next_edges if e is not None)
        for fn in sorted(seen, key=lambda f: f.sequence_nr, reverse=True):
            buf = buffers.pop(fn, None)
            if buf is None:
                continue
            out = list(fn.apply(buf))
            validate_outputs(fn.next_edges, out, fn.name)
            for edge, g in zip(fn.next_edges, out):
                send(edge, g)
        return result

    def release_variables(self):
        self.outs = None
        self.leaves = None


# Note [Python Functions as composites]: a ``torch.autograd.Function`` has a Python
# ``backward`` that need not be the derivative of its ``forward`` (BLOOM's GeLU writes
# its own; a straight-through estimator passes the gradient of ``round`` on unchanged).
# Its composite (op ``function.CLASS``) carries both: ``body``, its forward's ops, and
# ``backward``, its backward's ops as PyTorch traced them (reading the composite's inputs
# and constants and ``grads``, one name per output; ``outputs`` names one gradient per
# tensor input, or null). The forward runs the body without recording, as PyTorch runs
# a Function's forward with grad mode off, and records one node, ``composite.node``
# (``GeLUFunctionBackward``), which keeps the inputs as ``ctx.save_for_backward`` would
# (SavedVariables: an in-place write into one after fails the backward, as in PyTorch). When the engine calls it, the node runs the backward's ops on them, an
# output's gradient that did not arrive being zeros (PyTorch's ``materialize_grads``),
# and sums the gradients of an input passed twice. Its backward cannot record a graph
# (``create_graph``): it refuses, naming its node, as a composite does.
class FunctionBackwardSpec:
    """A function composite's ``composite.backward``, loaded."""

    __slots__ = ("grads", "body", "positions", "outputs")

    def __init__(self, grads, body, positions, outputs):
        self.grads = grads            # one name (or None) per output
        self.body = body              # the backward's op specs
        self.positions = positions    # per tensor input: its index among the op's reads
        self.outputs = outputs        # per tensor input: its gradient's name (or None)


class FunctionOp(CompositeOp):
    """The op of a ``function.CLASS`` composite (Note [Python Functions as composites])."""

    def __init__(self, name, node_name, body, input_names, output_names, backward):
        super().__init__(name, node_name, body, input_names, output_names)
        self.backward = backward

    def __repr__(self):
        return f"<function composite {self.name} ({self.node_name})>"

    def __call__(self, *inputs, **args):
        arrays = [t.data for t in inputs]
        outs = self.fn(*arrays)
        needs = STATE.grad_enabled and any(isinstance(t, Tensor) and t.requires_grad
                                           for t in inputs)
        if not needs:
            return [Tensor(o) for o in outs]
        from ..autograd.saved import SavedVariable  # noqa: PLC0415

        edges = [t.gradient_edge() if t.requires_grad else None for t in inputs]
        node = FunctionBackward(self.node_name, edges, [InputMetadata.of(o) for o in outs],
                                self, [SavedVariable(t) for t in inputs])
        result = []
        for k, (o, g) in enumerate(zip(outs, self.backward.grads)):
            t = Tensor(o, requires_grad=g is not None)
            if g is not None:
                t.grad_fn, t.output_nr = node, k
            result.append(t)
        return result


class FunctionBackward(Node):
    """Runs a function composite's backward ops (Note [Python Functions as composites])."""

    __slots__ = ("op", "saved")

    def __init__(self, name, edges, metas, op, saved):
        super().__init__(name, edges, metas)
        self.op = op
        self.saved = saved

    def apply(self, grads):
        if self.saved is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        if STATE.grad_enabled or any(type(g) is Tensor for g in grads):  # create_graph
            raise RuntimeError(ERR_CREATE_GRAPH.format(node=self.name))
        from ..devices import xp_of_array  # noqa: PLC0415

        bwd = self.op.backward
        saved = [s.unpack(self) for s in self.saved]
        scope = dict(zip(self.op.input_names, saved))
        for name, g, meta in zip(bwd.grads, grads, self.input_metadata):
            if name is not None:
                scope[name] = g if g is not None else \
                    xp_of_array(saved[0]).zeros(meta.shape, meta.dtype)
        for spec in bwd.body:
            out = spec.op.fn(*[scope[n] for n in spec.inputs], **spec.args)
            scope.update(zip(spec.outputs, out if spec.op.multi_output else [out]))
        result = [None] * len(self.saved)
        for k, name in zip(bwd.positions, bwd.outputs):
            if name is not None:
                g = scope[name]
                result[k] = g if result[k] is None else result[k] + g
        return result

    def release_variables(self):
        self.saved = None
