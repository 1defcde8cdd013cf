"""The ONNX operator registry: ``onnx_op`` registers a mapping, ``attributes_of`` checks a
node's attributes, constant nodes fold, and the helpers the mappings share.

``OPERATORS[op_type]`` is an ``Operator``: ``fn(ctx, inputs, attrs, n_outputs)`` maps one
node (``inputs``: the ``Value`` of each input, None for an empty one) and returns its
output Values; ``attrs`` are the node's attributes, checked against the operator's
declared ones (name, kind, default) before it runs. ``aten`` names the gradcli ops the
mapping writes (docs/onnx.md is generated from this table). The mappings live in
``operators.py``, ``recurrent.py`` and ``control.py``; ``table.py`` imports them all.

Note [Constant nodes fold]: a node whose inputs are all constants (no leaf of the file
upstream) is computed once by ONNX's reference implementation (``onnx.reference``) and
never written; this is what makes ``Shape``-derived sizes, ``ConstantOfShape``,
``Range``, integer arithmetic and comparisons on sizes work whatever gradcli's ops are.
Operators that make a value whose size their inputs' values decide are checked
against the tensor budget first (``SIZED``).
"""
from __future__ import annotations

import numpy as np

# AttributeProto.type -> the kind an Operator declares
_KINDS = {1: "float", 2: "int", 3: "string", 4: "tensor", 5: "graph", 6: "floats", 7: "ints",
          8: "strings"}


class Operator:
    __slots__ = ("name", "fn", "attrs", "aten", "doc", "folds")

    def __init__(self, name, fn, attrs, aten, doc, folds):
        self.name = name
        self.fn = fn
        self.attrs = attrs            # {name: (kind, default)}
        self.aten = aten.split()      # the gradcli ops it writes
        self.doc = doc
        self.folds = folds            # constant inputs: computed by onnx.reference


OPERATORS: dict[str, Operator] = {}


def onnx_op(*names, attrs=None, aten="", doc="", folds=True):
    """Register a mapping for ONNX operators ``names``; ``aten``: the gradcli ops it writes
    (space-separated)."""
    def deco(fn):
        for n in names:
            OPERATORS[n] = Operator(n, _folding(fn) if folds else fn, attrs or {}, aten, doc,
                                    folds)
        return fn
    return deco


def unsupported(model):
    """``["LSTM (opset 16)", ...]``: the operators of the model (and its subgraphs) that
    have no mapping, each once, in the order they first appear."""
    opset = {(d.domain or ""): d.version for d in model.opset_import}
    seen = []

    def walk(graph):
        for node in graph.node:
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            key = node.op_type if not domain else f"{domain}.{node.op_type}"
            if key not in OPERATORS:
                text = f"{key} (opset {opset.get(domain, '?')})"
                if text not in seen:
                    seen.append(text)
            for a in node.attribute:
                if a.type == 5:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(model.graph)
    return seen


def attributes_of(ctx, node, operator):
    """The node's attributes as Python values, checked against the operator's."""
    out = {k: d for k, (_kind, d) in operator.attrs.items()}
    for a in node.attribute:
        spec = operator.attrs.get(a.name)
        if spec is None:
            known = ", ".join(sorted(operator.attrs)) or "none"
            ctx.fail(f"unknown attribute {a.name!r} (known: {known})")
        kind = _KINDS.get(a.type)
        if kind != spec[0]:
            ctx.fail(f"attribute {a.name!r} must be {spec[0]}, the file has "
                     f"{kind or 'an unknown type'}")
        if kind == "float":
            out[a.name] = _decimal(a.f)
        elif kind == "int":
            out[a.name] = int(a.i)
        elif kind == "string":
            out[a.name] = a.s.decode("utf-8", "replace")
        elif kind == "floats":
            out[a.name] = [_decimal(x) for x in a.floats]
        elif kind == "ints":
            out[a.name] = [int(x) for x in a.ints]
        elif kind == "strings":
            out[a.name] = [s.decode("utf-8", "replace") for s in a.strings]
        elif kind == "tensor":
            out[a.name] = ctx.reader.array(a.t, f"node {ctx.node_id} attribute {a.name!r}")
        elif kind == "graph":
            out[a.name] = a.g
    return out


# Note [Float attributes]: ONNX stores float attributes as float32, so an exporter's
# ``eps=1e-5`` arrives as 9.99999974738e-06; PyTorch's op ran with the double 1e-05.
# The shortest decimal that reads back as the same float32 is what the exporter wrote
# (a float32 has at most 9 significant digits), so that decimal is the attribute's value:
# float64 imports then give PyTorch's float64 results exactly.
def _decimal(x):
    return float(str(np.float32(x)))


# -- constant folding ----------------------------------------------------------------------
SIZED = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "MatMul",
         "Gemm", "OneHot", "Reshape", "Einsum", "CumSum"}


def _folding(fn):
    def run(ctx, ins, attrs, n_out):
        if all(v is None or not v.dynamic for v in ins) and ctx.node.op_type != "If":
            try:
                return _fold(ctx, ins, n_out)
            except Exception as refused:  # noqa: BLE001 - retried below, else re-raised
                # Note [Folding falls back on the mapping]: onnx.reference has gaps (its
                # GatherElements fails on indices narrower than the data, which torch's
                # exporter writes for BERT's token types); the mapping's own gradcli ops
                # compute constants as well (nothing is written for constant inputs)
                try:
                    return fn(ctx, ins, attrs, n_out)
                except Exception:  # noqa: BLE001 - the reference's refusal is the message
                    raise refused from None
        return fn(ctx, ins, attrs, n_out)
    run.__doc__ = fn.__doc__
    return run


def _fold(ctx, ins, n_out):
    """Compute a node on constants with onnx.reference (Note [Constant nodes fold])."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = ctx.node
    if node.op_type in SIZED:
        _guard_size(ctx, ins)
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(ins)]
    feeds = {n: v.array for n, v in zip(names, ins) if v is not None}
    copy = helper.make_node(node.op_type, names, [f"out{i}" for i in range(n_out)],
                            domain=node.domain)
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [copy], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype),
                                       feeds[n].shape) for n in names if n],
        [helper.make_tensor_value_info(f"out{i}", onnx.TensorProto.UNDEFINED, None)
         for i in range(n_out)])
    model = helper.make_model(graph, opset_imports=ctx.model.opset_import)
    try:
        with np.errstate(all="ignore"):
            results = ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - the reference's refusal of this node, in one line
        text = str(exc).strip().splitlines()
        ctx.fail(f"cannot compute it on its constant inputs: "
                 f"{text[0] if text else type(exc).__name__}")
    outs = []
    for r in results:
        r = np.asarray(r)
        ctx.check_size(r.shape, r.dtype, "its result")
        outs.append(ctx.constant(r))
    return outs


def _guard_size(ctx, ins):
    """The size a sized operator's constant inputs ask for, before it is computed."""
    op = ctx.node.op_type
    arrays = [v.array if v is not None else None for v in ins]
    if op in ("ConstantOfShape", "Expand", "Tile", "Reshape") and len(arrays) >= 1:
        shape = arrays[1] if op in ("Expand", "Tile", "Reshape") else arrays[0]
        if shape is None:
            return
        shape = [int(d) for d in np.asarray(shape).reshape(-1)]
        if op == "Tile":
            shape = [a * b for a, b in zip(arrays[0].shape, shape)]
        elif op == "Expand":
            shape = list(np.broadcast_shapes(tuple(max(d, 1) for d in shape), arrays[0].shape))
        elif op == "Reshape":
            return
        ctx.check_size([max(d, 0) for d in shape], np.float64, "its result")
    elif op == "Range":
        start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) for a in arrays[:3])
        if delta == 0 or not all(np.isfinite([start, limit, delta])):
            ctx.fail("Range needs a finite, non-zero delta")
        ctx.check_size([max(int(np.ceil((limit - start) / delta)), 0)], np.float64,
                       "its result")
    elif op in ("MatMul", "Gemm"):
        a, b = arrays[0], arrays[1]
        ctx.check_size([a.size, b.shape[-1] if b.ndim else 1], np.float64, "its result")
    else:
        total = sum(a.size for a in arrays if a is not None)
        ctx.check_size([total * 64], np.float64, "its result")


# -- unrolling ------------------------------------------------------------------------------
# Note [Unrolling is bounded]: Loop and Scan bodies and recurrent steps are written once per
# iteration (Note [Bodies unroll] in control.py, Note [Recurrent operators unroll] in
# recurrent.py); a file cannot make one import unroll more than this many in all.
MAX_UNROLLED = 10_000


def unroll(ctx, count, what):
    """Count ``count`` more unrolled iterations (``what`` names them), within the bound."""
    ctx.unrolled += count
    if ctx.unrolled > MAX_UNROLLED:
        ctx.fail(f"{what} would unroll more than {MAX_UNROLLED} iterations in all (Note "
                 "[Unrolling is bounded])")


# -- helpers --------------------------------------------------------------------------------
def _axis(ctx, axis, rank):
    if not -rank <= axis < max(rank, 1):
        ctx.fail(f"axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0


def _ints(ctx, value, what):
    if value is None:
        return None
    if value.dynamic:
        ctx.fail(f"{what} must be a constant (it is computed from the inputs)")
    return [int(x) for x in np.asarray(value.array).reshape(-1)]


def _scalar(value):
    """A constant 0-d or one-element value as a Python number, else None."""
    if value is None or value.dynamic or value.array.size != 1:
        return None
    x = value.array.reshape(-1)[0]
    return bool(x) if value.dtype == np.bool_ else (float(x) if value.dtype.kind == "f" else int(x))


def _reshape(ctx, x, shape):
    if list(x.shape) == list(shape):
        return x
    try:
        return ctx.emit("aten.view.default", [x], {"size": list(shape)})
    except Exception:  # noqa: BLE001 - a view of non-contiguous strides: PyTorch's reshape copies
        c = ctx.emit("aten.clone.default", [x], {"memory_format": "contiguous_format"})
        return ctx.emit("aten._unsafe_view.default", [c], {"size": list(shape)})
