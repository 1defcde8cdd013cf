"""ONNX's control-flow operators (``If``, ``Loop``, ``Scan``): resolved at import.

Note [Bodies unroll]: the import runs the model on real inputs (Note [Import runs the
model] in convert.py), so every trip count, loop condition and scanned length is known
when the node is mapped. A ``Loop`` or ``Scan`` is written as its body once per
iteration (op ids ``NODE/ITERATION/INNER``; an ``If``'s branch: ``NODE/then/INNER``), the
carried values threaded from one copy
to the next and the scan outputs stacked, which is the graph PyTorch's autograd records
for the same Python loop. The number of body runs of one import is bounded (Note
[Unrolling is bounded] in registry.py), so a file cannot make the import unroll without
end.

Note [Data-dependent branches]: a condition computed from the inputs (an ``If`` on
``ReduceSum(x) > 0``, a ``Loop`` that ends when a value converges) is decided by the
values of this import's inputs. The import takes the path they decide, as gradcli export
traces a data-dependent path (Note [Data-dependent paths] in bridges/torch/exporter.py),
and the file says so: its header and the top-level ``x-data-dependent`` list, one line per
decision. No gradient flows through a boolean condition, so the gradients of that path
are the model's; other inputs may take another path.
"""
from __future__ import annotations

import numpy as np

from .registry import _axis, onnx_op, unroll
from .values import Value



def _flag(ctx, value, what):
    """A condition's truth (its one element), noting it when the data decided it."""
    array = np.asarray(value.array)
    if array.size != 1:
        ctx.fail(f"{what} must have one element, has shape {list(array.shape)}")
    return bool(array.reshape(-1)[0])


def _body_run(ctx):
    unroll(ctx, 1, "the model's Loop and Scan bodies and recurrent layers")


@onnx_op("If", attrs={"then_branch": ("graph", None), "else_branch": ("graph", None)},
         aten="", folds=False,
         doc="the branch the condition takes is inlined; a condition computed from the "
         "inputs is recorded in x-data-dependent")
def _if(ctx, ins, attrs, n):
    cond = ins[0]
    if cond is None:
        ctx.fail("missing condition")
    taken = _flag(ctx, cond, "the condition")
    branch = attrs["then_branch" if taken else "else_branch"]
    if branch is None:
        ctx.fail(f"missing {'then' if taken else 'else'}_branch")
    if cond.dynamic:
        ctx.data_dependent.append(
            f"If {ctx.node_id}: took its {'then' if taken else 'else'}_branch (the condition, "
            f"computed from the inputs, was {str(taken).lower()})")
    which = "then" if taken else "else"
    return ctx.run_body(branch, [], f"{ctx.node_id}/{which}/")


@onnx_op("Loop", attrs={"body": ("graph", None)}, aten="aten.stack.default", folds=False,
         doc="unrolled (Note [Bodies unroll]); scan outputs stacked; a condition computed "
         "from the inputs is recorded in x-data-dependent")
def _loop(ctx, ins, attrs, n):
    body = attrs["body"]
    if body is None:
        ctx.fail("missing attribute 'body'")
    trips = ins[0] if ins else None
    cond = ins[1] if len(ins) > 1 else None
    carried = list(ins[2:])
    if any(v is None for v in carried):
        ctx.fail("a loop-carried value is empty")
    if len(body.input) != len(carried) + 2 or len(body.output) < len(carried) + 1:
        ctx.fail(f"its body takes {len(body.input)} inputs and gives {len(body.output)} "
                 f"outputs for {len(carried)} loop-carried values")
    limit = None
    if trips is not None:
        limit = int(np.asarray(trips.array).reshape(-1)[0]) if trips.array.size == 1 else None
        if limit is None:
            ctx.fail("the trip count M must have one element")
    going = _flag(ctx, cond, "the condition") if cond is not None else True
    decided = cond is not None and cond.dynamic
    node_id = ctx.node_id
    scans = []
    i = 0
    while going and (limit is None or i < limit):
        _body_run(ctx)
        outs = ctx.run_body(body, [Value(np.asarray(i, dtype=np.int64)),
                                   Value(np.asarray(going)), *carried], f"{node_id}/{i}/")
        i += 1
        going = _flag(ctx, outs[0], "the body's condition")
        decided = decided or outs[0].dynamic
        carried = outs[1:1 + len(carried)]
        scans.append(outs[1 + len(carried):])
    if decided:
        ctx.data_dependent.append(f"Loop {node_id}: ran {i} iteration(s) (its condition, "
                                  "computed from the inputs, decided the count)")
    if trips is not None and trips.dynamic:
        ctx.data_dependent.append(f"Loop {node_id}: the trip count, computed from the inputs, "
                                  f"was {limit}")
    n_scan = len(body.output) - 1 - len(carried)
    if n_scan and not scans:
        ctx.fail("the loop ran no iteration, so its scan outputs have no shape")
    stacked = [ctx.emit("aten.stack.default", [[s[k] for s in scans]], {"dim": 0})
               for k in range(n_scan)]
    return carried + stacked


@onnx_op("Scan", attrs={"body": ("graph", None), "num_scan_inputs": ("int", None),
                        "scan_input_axes": ("ints", None),
                        "scan_input_directions": ("ints", None),
                        "scan_output_axes": ("ints", None),
                        "scan_output_directions": ("ints", None)},
         aten="aten.select.int aten.stack.default", folds=False,
         doc="opset 9+; unrolled (Note [Bodies unroll]): inputs selected per step, outputs "
         "stacked; axes and directions")
def _scan(ctx, ins, attrs, n):
    body, m = attrs["body"], attrs["num_scan_inputs"]
    if body is None or m is None:
        ctx.fail("missing attribute 'body' or 'num_scan_inputs'")
    if not 0 < m <= len(ins):
        ctx.fail(f"num_scan_inputs {m} does not fit its {len(ins)} inputs")
    states, xs = list(ins[:len(ins) - m]), list(ins[len(ins) - m:])
    if any(v is None for v in states + xs):
        ctx.fail("an input is empty")
    n_out = len(body.output) - len(states)
    if len(body.input) != len(states) + m or n_out < 0:
        ctx.fail(f"its body takes {len(body.input)} inputs and gives {len(body.output)} outputs "
                 f"for {len(states)} states and {m} scan inputs")

    def per(name, count):
        given = attrs[name]
        if given is not None and len(given) != count:
            ctx.fail(f"{name} needs {count} values, has {len(given)}")
        return given or [0] * count

    in_axes = [_axis(ctx, a, x.rank) for a, x in zip(per("scan_input_axes", m), xs)]
    in_dirs = per("scan_input_directions", m)
    out_axes, out_dirs = per("scan_output_axes", n_out), per("scan_output_directions", n_out)
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        ctx.fail(f"the scan inputs differ in length along their axes: {sorted(lengths)}")
    length = lengths.pop()
    if length == 0 and n_out:
        ctx.fail("the scan inputs are empty, so its scan outputs have no shape")
    node_id = ctx.node_id
    items = []
    for t in range(length):
        _body_run(ctx)
        slices = [ctx.emit("aten.select.int", [x], {"dim": a, "index": length - 1 - t if d
                                                    else t})
                  for x, a, d in zip(xs, in_axes, in_dirs)]
        outs = ctx.run_body(body, states + slices, f"{node_id}/{t}/")
        states = outs[:len(states)]
        items.append(outs[len(states):])
    results = []
    for k in range(n_out):
        seq = [it[k] for it in items]
        if out_dirs[k]:
            seq = seq[::-1]
        axis = _axis(ctx, out_axes[k], seq[0].rank + 1)
        results.append(ctx.emit("aten.stack.default", [seq], {"dim": axis}))
    return states + results
