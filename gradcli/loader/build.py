"""Step two of a load: the checked document bound into the Graph a run meets.

Every leaf gets the ``make`` of its source (``leaves.py``: its weights are read
at the first run, once, through the graph's ``WeightFiles``), every op entry its
``BoundOp`` with an ATen op's args bound (``bound_op.py``), every checkpoint the
op that runs its body. Nothing here refuses a file: the check did that.
"""
from __future__ import annotations

from ..graph import Graph
from .bound_op import bind
from .leaves import make_leaf


def build(checked) -> Graph:
    """The Graph of a ``CheckedGraph`` (``check.DocumentCheck.check()``).

    >>> from gradcli.document import parse_yaml
    >>> from gradcli.loader.check import DocumentCheck
    >>> from gradcli.loader.options import LoadOptions
    >>> doc = parse_yaml("version: 1\\ntensors: {x: {value: 2.0, requires_grad: true}}\\n"
    ...                  "ops: [{op: mul, inputs: [x, x], output: y}]\\n"
    ...                  "backward: {roots: [y]}\\n", "<doc>")
    >>> build(DocumentCheck(doc, ".", "g", LoadOptions()).check()).run().grads["x"].tolist()
    4.0
    """
    options, file = checked.options, checked.file
    for leaf, source, where in checked.sources:
        leaf.make = make_leaf(source, checked.weights, file, leaf.line, where,
                              options.max_tensor_bytes)
    for spec, inputs_checked, body in checked.unbound:     # a body's entries before its own
        if body is None:
            bind(spec, inputs_checked, options.max_tensor_bytes, file)
        else:
            from ..ops.reentrant import CheckpointOp  # noqa: PLC0415

            body_specs, use_reentrant = body
            function, raw = checkpoint_body(body_specs, list(spec.inputs), list(spec.outputs))
            spec.op = CheckpointOp(function, raw, use_reentrant)
    graph = Graph(name=checked.name, file=file, leaves=checked.leaves, ops=checked.ops,
                  backward=checked.backward, expect=checked.expect, base_dir=checked.base_dir)
    # What gradcheck may allocate, and what the graph's forward allocates as loaded
    # and in float64 (Note [The memory budget of a whole graph] in checker.py).
    graph.seed = checked.seed
    graph.max_graph_bytes = options.max_graph_bytes
    graph.forward_bytes = checked.forward_bytes
    graph.float64_forward_bytes = checked.float64_forward_bytes
    return graph


def checkpoint_body(body, input_names, output_names):
    """The two callables of a checkpoint op, built from its body's op specs:
    ``function`` on Tensors (run by ``checkpoint``, which re-runs it in
    backward; it stamps each node it records with the body op's id and line)
    and ``raw`` on arrays without recording (for gradcheck). The body is a
    scope of its own: it reads the checkpoint's inputs by name."""

    def function(*tensors):
        scope = dict(zip(input_names, tensors))
        for spec in body:
            out = spec.op(*[scope[n] for n in spec.inputs], **spec.args)
            outs = out if isinstance(out, list) else [out]
            node = outs[0].grad_fn
            if node is not None:
                node.metadata.update(op_id=spec.id, line=spec.line)
            scope.update(zip(spec.outputs, outs))
        return [scope[n] for n in output_names]

    def raw(*arrays, **args):
        scope = dict(zip(input_names, arrays))
        for spec in body:
            out = spec.op.fn(*[scope[n] for n in spec.inputs], **spec.args)
            scope.update(zip(spec.outputs, out if spec.op.multi_output else [out]))
        return [scope[n] for n in output_names]

    return function, raw
