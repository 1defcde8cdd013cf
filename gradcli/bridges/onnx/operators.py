"""ONNX operators -> gradcli ops: one mapping function per operator, with its attributes
(the registry, folding and shared helpers: registry.py).

Note [One table per family]: operators that differ only in the gradcli op they write
(``Add``/``Sub``/``Mul``/``Div``, the elementwise functions, the comparisons, the
reductions) are one mapping each, driven by a table ``{ONNX operator: gradcli op}``
and registered by ``_family``; the mapping reads its op from the table by the node's
``op_type``.
"""
from __future__ import annotations

import numpy as np

from .registry import _axis, _ints, _reshape, _scalar, onnx_op
from .values import FLOATS

# -- families: one mapping, one table (Note [One table per family]) -------------------------
def _family(table, *, attrs=None, doc="", extra=None):
    """Register ``fn`` for every ONNX operator of ``table`` (``{ONNX operator: gradcli
    op}``); ``fn(ctx, ins, attrs, n, op)`` gets the node's gradcli op as ``op``. ``extra``:
    ``{ONNX operator: (further gradcli ops it may write, its doc)}``.

    >>> @_family({"Exp": "aten.exp.default"}, doc="elementwise")   # doctest: +SKIP
    ... def _unary(ctx, ins, attrs, n, op):
    ...     return ctx.emit(op, [ins[0]])
    """
    def deco(fn):
        for name, op in table.items():
            more, text = (extra or {}).get(name, ("", doc))

            def mapping(ctx, ins, attrs_, n, _op=op):
                return fn(ctx, ins, attrs_, n, _op)

            mapping.__doc__ = fn.__doc__
            onnx_op(name, attrs=attrs, aten=f"{op} {more}".strip(), doc=text)(mapping)
        return fn
    return deco


BINARY = {"Add": "aten.add.Tensor", "Sub": "aten.sub.Tensor", "Mul": "aten.mul.Tensor",
          "Div": "aten.div.Tensor"}
UNARY = {"Relu": "aten.relu.default", "Sigmoid": "aten.sigmoid.default",
         "Tanh": "aten.tanh.default", "Exp": "aten.exp.default", "Log": "aten.log.default",
         "Sqrt": "aten.sqrt.default", "Neg": "aten.neg.default", "Abs": "aten.abs.default",
         "Erf": "aten.erf.default", "Reciprocal": "aten.reciprocal.default",
         "Sin": "aten.sin.default", "Cos": "aten.cos.default", "Floor": "aten.floor.default",
         "Ceil": "aten.ceil.default", "Sign": "aten.sign.default",
         "Softplus": "aten.softplus.default", "Not": "aten.logical_not.default",
         "Tan": "aten.tan.default", "Asin": "aten.asin.default", "Acos": "aten.acos.default",
         "Atan": "aten.atan.default", "Sinh": "aten.sinh.default", "Cosh": "aten.cosh.default",
         "Asinh": "aten.asinh.default", "Acosh": "aten.acosh.default",
         "Atanh": "aten.atanh.default", "Round": "aten.round.default",
         "IsNaN": "aten.isnan.default"}
COMPARE = {"Equal": "aten.eq.Tensor", "Less": "aten.lt.Tensor", "Greater": "aten.gt.Tensor",
           "LessOrEqual": "aten.le.Tensor", "GreaterOrEqual": "aten.ge.Tensor",
           "And": "aten.logical_and.default", "Or": "aten.logical_or.default",
           "Xor": "aten.logical_xor.default"}
VARIADIC = {"Max": "aten.maximum.default", "Min": "aten.minimum.default",
            "Sum": "aten.add.Tensor"}
SOFTMAX = {"Softmax": "aten._softmax.default", "LogSoftmax": "aten._log_softmax.default"}
REDUCE = {"ReduceMean": "aten.mean.dim", "ReduceSum": "aten.sum.dim_IntList",
          "ReduceMax": "aten.amax.default", "ReduceMin": "aten.amin.default"}


@_family(BINARY, doc="broadcasting",
         extra={"Div": ("aten.div.Tensor_mode", "integers: div.Tensor_mode (trunc)")})
def _binary(ctx, ins, attrs, n, op):
    a, b = ins
    if op == BINARY["Div"] and a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return ctx.emit("aten.div.Tensor_mode", [a, b], {"rounding_mode": "trunc"})
    return ctx.emit(op, [a, b])


@_family(UNARY, doc="elementwise")
def _unary(ctx, ins, attrs, n, op):
    return ctx.emit(op, [ins[0]])


@_family(COMPARE, doc="boolean result")
def _compare(ctx, ins, attrs, n, op):
    return ctx.emit(op, [ins[0], ins[1]])


@_family(VARIADIC, doc="variadic: pairwise, left to right")
def _variadic(ctx, ins, attrs, n, op):
    out = ins[0]
    for v in ins[1:]:
        out = ctx.emit(op, [out, v])
    return out


@onnx_op("IsInf", attrs={"detect_negative": ("int", 1), "detect_positive": ("int", 1)},
         aten="aten.isinf.default", doc="both signs (the defaults)")
def _isinf(ctx, ins, attrs, n):
    if not (attrs["detect_negative"] and attrs["detect_positive"]):
        ctx.fail("IsInf of one sign only is not supported")
    return ctx.emit("aten.isinf.default", [ins[0]])


@onnx_op("Pow", aten="aten.pow.Tensor_Scalar aten.pow.Tensor_Tensor",
         doc="a constant scalar exponent: pow.Tensor_Scalar")
def _pow(ctx, ins, attrs, n):
    x, y = ins
    e = _scalar(y)
    if e is not None:
        return ctx.emit("aten.pow.Tensor_Scalar", [x], {"exponent": e})
    return ctx.emit("aten.pow.Tensor_Tensor", [x, y])


@onnx_op("Identity", aten="", doc="no op: the value itself")
def _identity(ctx, ins, attrs, n):
    return ins[0]


@onnx_op("Dropout", attrs={"seed": ("int", 0), "ratio": ("float", 0.5)}, aten="",
         doc="inference (training_mode absent or false): the value itself; mask all true")
def _dropout(ctx, ins, attrs, n):
    training = _scalar(ins[2]) if len(ins) > 2 and ins[2] is not None else False
    if training:
        ctx.fail("Dropout in training mode draws random masks: graph files hold no random op")
    outs = [ins[0]]
    if n > 1:
        outs.append(ctx.constant(np.ones(ins[0].shape, dtype=bool)))
    return outs


@onnx_op("Gelu", attrs={"approximate": ("string", "none")}, aten="aten.gelu.default")
def _gelu(ctx, ins, attrs, n):
    if attrs["approximate"] not in ("none", "tanh"):
        ctx.fail(f"approximate must be none or tanh, not {attrs['approximate']!r}")
    return ctx.emit("aten.gelu.default", [ins[0]], {"approximate": attrs["approximate"]})


@onnx_op("LeakyRelu", attrs={"alpha": ("float", 0.01)}, aten="aten.leaky_relu.default")
def _leaky(ctx, ins, attrs, n):
    return ctx.emit("aten.leaky_relu.default", [ins[0]], {"negative_slope": attrs["alpha"]})


@onnx_op("HardSigmoid", attrs={"alpha": ("float", 0.2), "beta": ("float", 0.5)},
         aten="aten.hardsigmoid.default aten.mul.Tensor aten.add.Tensor aten.hardtanh.default",
         doc="alpha = 1/6, beta = 0.5: hardsigmoid; others (Paddle's 0.2): "
         "hardtanh(x * alpha + beta, 0, 1)")
def _hardsigmoid(ctx, ins, attrs, n):
    alpha, beta = attrs["alpha"], attrs["beta"]
    if abs(alpha - 1 / 6) <= 1e-6 and beta == 0.5:
        return ctx.emit("aten.hardsigmoid.default", [ins[0]])
    # PyTorch has no op for another slope: what its users write, F.hardtanh(x * a + b, 0, 1)
    y = ctx.emit("aten.add.Tensor", [ctx.emit("aten.mul.Tensor", [ins[0], alpha]), beta])
    return ctx.emit("aten.hardtanh.default", [y], {"min_val": 0.0, "max_val": 1.0})


@onnx_op("HardSwish", aten="aten.hardswish.default")
def _hardswish(ctx, ins, attrs, n):
    return ctx.emit("aten.hardswish.default", [ins[0]])


@onnx_op("Clip", attrs=dict(min=("float", None), max=("float", None)),  # opset < 11
         aten="aten.clamp.default aten.hardtanh.default",
         doc="constant bounds; min 0 and max 6 and the like: hardtanh")
def _clip(ctx, ins, attrs, n):
    lo = _scalar(ins[1]) if len(ins) > 1 and ins[1] is not None else attrs["min"]
    hi = _scalar(ins[2]) if len(ins) > 2 and ins[2] is not None else attrs["max"]
    if any(v is not None and v.dynamic for v in ins[1:]):
        ctx.fail("Clip with bounds computed from the inputs is not supported")
    if lo is not None and hi is not None:
        return ctx.emit("aten.hardtanh.default", [ins[0]], {"min_val": lo, "max_val": hi})
    args = {}
    if lo is not None:
        args["min"] = lo
    if hi is not None:
        args["max"] = hi
    return ctx.emit("aten.clamp.default", [ins[0]], args)


@onnx_op("Where", aten="aten.where.self")
def _where(ctx, ins, attrs, n):
    return ctx.emit("aten.where.self", ins[:3])


@onnx_op("Cast", attrs={"to": ("int", None), "saturate": ("int", 1), "round_mode":
                        ("string", "up")}, aten="aten._to_copy.default",
         doc="floating targets take --dtype")
def _cast(ctx, ins, attrs, n):
    from .reader import dtype_of

    if attrs["to"] is None:
        ctx.fail("missing attribute 'to'")
    target = ctx.fdt(dtype_of(attrs["to"], f"node {ctx.node_id} attribute 'to'"))
    x = ins[0]
    if x.dtype == target:
        return x
    return ctx.emit("aten._to_copy.default", [x], {"dtype": str(target)})


@onnx_op("CastLike", attrs={"saturate": ("int", 1), "round_mode": ("string", "up")},
         aten="aten._to_copy.default")
def _cast_like(ctx, ins, attrs, n):
    x, like = ins
    if x.dtype == like.dtype:
        return x
    return ctx.emit("aten._to_copy.default", [x], {"dtype": str(like.dtype)})


# -- constants and shapes (folded, Note [Constant nodes fold]) -----------------------------
@onnx_op("Constant", attrs={"value": ("tensor", None), "value_float": ("float", None),
                            "value_floats": ("floats", None), "value_int": ("int", None),
                            "value_ints": ("ints", None), "sparse_value": ("tensor", None),
                            "value_string": ("string", None),
                            "value_strings": ("strings", None)}, aten="", folds=False,
         doc="a constant")
def _constant(ctx, ins, attrs, n):
    given = [k for k, v in attrs.items() if v is not None]
    if len(given) != 1:
        ctx.fail(f"needs exactly one value attribute, has {len(given)}")
    k = given[0]
    if k in ("value_string", "value_strings", "sparse_value"):
        ctx.fail(f"{k} constants are not supported")
    v = attrs[k]
    array = {"value_float": lambda: np.float32(v), "value_floats": lambda: np.asarray(
        v, np.float32), "value_int": lambda: np.int64(v), "value_ints": lambda: np.asarray(
        v, np.int64)}.get(k, lambda: v)()
    return ctx.constant(np.asarray(array))


@onnx_op("Shape", attrs={"start": ("int", 0), "end": ("int", None)}, aten="", folds=False,
         doc="a constant: every shape is known when the node is mapped")
def _shape(ctx, ins, attrs, n):
    shape = list(ins[0].shape)
    end = attrs["end"] if attrs["end"] is not None else len(shape)
    return ctx.constant(np.asarray(shape[attrs["start"]:end], dtype=np.int64))


@onnx_op("Size", aten="", folds=False, doc="a constant")
def _size(ctx, ins, attrs, n):
    return ctx.constant(np.asarray(ins[0].array.size, dtype=np.int64))


def _constant_only(ctx, ins, attrs, n):
    ctx.fail(f"{ctx.node.op_type} on values computed from the inputs is not supported "
             "(only on constants)")


onnx_op("ConstantOfShape", attrs={"value": ("tensor", None)}, aten="",
        doc="constant inputs only")(_constant_only)
onnx_op("Range", aten="", doc="constant inputs only")(_constant_only)
onnx_op("NonZero", aten="", doc="constant inputs only")(_constant_only)
onnx_op("Mod", attrs={"fmod": ("int", 0)}, aten="", doc="constant inputs only")(_constant_only)
onnx_op("EyeLike", attrs={"dtype": ("int", None), "k": ("int", 0)}, aten="",
        doc="constant inputs only")(_constant_only)


# -- linear algebra ------------------------------------------------------------------------
@onnx_op("Gemm", attrs={"alpha": ("float", 1.0), "beta": ("float", 1.0), "transA": ("int", 0),
                        "transB": ("int", 0)},
         aten="aten.addmm.default aten.mm.default aten.t.default aten.mul.Tensor")
def _gemm(ctx, ins, attrs, n):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if a.rank != 2 or b.rank != 2:
        ctx.fail(f"A and B must be matrices, got shapes {list(a.shape)} and {list(b.shape)}")
    m = a.shape[1] if attrs["transA"] else a.shape[0]
    ctx.check_size([m, b.shape[0] if attrs["transB"] else b.shape[1]], a.dtype, "its result")
    if attrs["transA"]:
        a = ctx.emit("aten.t.default", [a])
    if attrs["transB"]:
        b = ctx.emit("aten.t.default", [b])
    if c is not None and attrs["beta"] != 0:
        args = {}
        if attrs["beta"] != 1:
            args["beta"] = attrs["beta"]
        if attrs["alpha"] != 1:
            args["alpha"] = attrs["alpha"]
        return ctx.emit("aten.addmm.default", [c, a, b], args)
    out = ctx.emit("aten.mm.default", [a, b])
    if attrs["alpha"] != 1:
        out = ctx.emit("aten.mul.Tensor", [out, attrs["alpha"]])
    return out


@onnx_op("MatMul", aten="aten.mm.default aten.bmm.default aten.view.default "
         "aten.expand.default aten.unsqueeze.default aten.squeeze.dim",
         doc="batched: broadcast, then bmm on a 3-d view")
def _matmul(ctx, ins, attrs, n):
    a, b = ins
    if a.rank == 0 or b.rank == 0:
        ctx.fail("MatMul of a scalar")
    try:
        batch = list(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        ctx.fail(f"cannot multiply shapes {list(a.shape)} and {list(b.shape)}")
    ctx.check_size(batch + [a.shape[-2] if a.rank > 1 else 1, b.shape[-1] if b.rank > 1 else 1],
                   a.dtype, "its result")       # before the product is made
    squeeze = []
    if a.rank == 1:
        a = ctx.emit("aten.unsqueeze.default", [a], {"dim": 0})
        squeeze.append(-2)
    if b.rank == 1:
        b = ctx.emit("aten.unsqueeze.default", [b], {"dim": 1})
        squeeze.append(-1)
    if a.rank == 2 and b.rank == 2:
        out = ctx.emit("aten.mm.default", [a, b])
    elif b.rank == 2:           # (..., M, K) @ (K, N): PyTorch folds the batch into M
        m, k = a.shape[-2], a.shape[-1]
        flat = _reshape(ctx, a, [int(np.prod(a.shape[:-1])), k])
        out = ctx.emit("aten.mm.default", [flat, b])
        out = _reshape(ctx, out, list(a.shape[:-1]) + [b.shape[-1]])
        del m
    else:
        ea = list(batch) + list(a.shape[-2:])
        eb = list(batch) + list(b.shape[-2:])
        if list(a.shape) != ea:
            a = ctx.emit("aten.expand.default", [a], {"size": ea})
        if list(b.shape) != eb:
            b = ctx.emit("aten.expand.default", [b], {"size": eb})
        nb = int(np.prod(batch)) if batch else 1
        a3 = _reshape(ctx, a, [nb] + ea[-2:])
        b3 = _reshape(ctx, b, [nb] + eb[-2:])
        out = ctx.emit("aten.bmm.default", [a3, b3])
        out = _reshape(ctx, out, batch + [ea[-2], eb[-1]])
    for d in squeeze:
        out = ctx.emit("aten.squeeze.dim", [out], {"dim": d})
    return out


# -- convolution and pooling -----------------------------------------------------------------
def _pads(ctx, attrs, spatial, in_shape, kernel, strides, dilations):
    """Symmetric (begin == end) padding per spatial dim, from ``pads`` or ``auto_pad``."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(spatial):
            out = -(-in_shape[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_shape[i],
                        0)
            pads.append((total // 2, total - total // 2) if auto == "SAME_UPPER"
                        else (total - total // 2, total // 2))
    elif auto == "VALID":
        pads = [(0, 0)] * spatial
    elif auto == "NOTSET":
        raw = attrs.get("pads") or [0] * (2 * spatial)
        if len(raw) != 2 * spatial:
            ctx.fail(f"pads has {len(raw)} values, a {spatial}-d kernel needs {2 * spatial}")
        pads = [(raw[i], raw[i + spatial]) for i in range(spatial)]
    else:
        ctx.fail(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, not {auto!r}")
    if any(p < 0 for pair in pads for p in pair):
        ctx.fail(f"negative pads {pads}")
    return pads


def _symmetric(ctx, x, pads, value=0.0):
    """Per-dim padding PyTorch's ops take, with a constant pad first for the excess."""
    if all(b == e for b, e in pads):
        return x, [b for b, _ in pads]
    flat = []
    for b, e in reversed(pads):
        flat += [b - min(b, e), e - min(b, e)]
    x = ctx.emit("aten.constant_pad_nd.default", [x], {"pad": flat, "value": value})
    return x, [min(b, e) for b, e in pads]


_CONV_ATTRS = {"auto_pad": ("string", "NOTSET"), "dilations": ("ints", None),
               "group": ("int", 1), "kernel_shape": ("ints", None), "pads": ("ints", None),
               "strides": ("ints", None)}


@onnx_op("Conv", attrs=_CONV_ATTRS, aten="aten.convolution.default "
         "aten.constant_pad_nd.default", doc="1-d, 2-d, 3-d; asymmetric pads: constant_pad_nd")
def _conv(ctx, ins, attrs, n):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    spatial = x.rank - 2
    if spatial < 1 or w.rank != x.rank:
        ctx.fail(f"input of shape {list(x.shape)} and weight {list(w.shape)} do not fit")
    kernel = list(w.shape[2:])
    if attrs["kernel_shape"] is not None and list(attrs["kernel_shape"]) != kernel:
        ctx.fail(f"kernel_shape {attrs['kernel_shape']} differs from the weight's {kernel}")
    strides = attrs["strides"] or [1] * spatial
    dilations = attrs["dilations"] or [1] * spatial
    if len(strides) != spatial or len(dilations) != spatial:
        ctx.fail(f"strides and dilations need {spatial} values")
    pads = _pads(ctx, attrs, spatial, x.shape[2:], kernel, strides, dilations)
    x, padding = _symmetric(ctx, x, pads)
    return ctx.emit("aten.convolution.default", [x, w, bias], {
        "stride": strides, "padding": padding, "dilation": dilations, "transposed": False,
        "output_padding": [0] * spatial, "groups": attrs["group"]})


@onnx_op("ConvTranspose", attrs={**_CONV_ATTRS, "output_padding": ("ints", None),
                                 "output_shape": ("ints", None)},
         aten="aten.convolution.default",
         doc="symmetric pads, no output_shape")
def _conv_transpose(ctx, ins, attrs, n):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    spatial = x.rank - 2
    if attrs["output_shape"] is not None or attrs["auto_pad"] != "NOTSET":
        ctx.fail("ConvTranspose with output_shape or auto_pad is not supported")
    raw = attrs["pads"] or [0] * (2 * spatial)
    if len(raw) != 2 * spatial or raw[:spatial] != raw[spatial:]:
        ctx.fail(f"pads {raw}: only symmetric pads, {2 * spatial} values, are supported")
    strides = attrs["strides"] or [1] * spatial
    dil = attrs["dilations"] or [1] * spatial
    opad = attrs["output_padding"] or [0] * spatial
    if min(len(strides), len(dil), len(opad)) != spatial or w.rank != x.rank:
        ctx.fail("strides, dilations and output_padding need one value per spatial dim")
    out = [(d - 1) * st - 2 * p + dl * (k - 1) + op + 1 for d, st, p, dl, k, op in
           zip(x.shape[2:], strides, raw, dil, w.shape[2:], opad)]
    ctx.check_size([x.shape[0], w.shape[1] * attrs["group"]] + out, x.dtype, "its result")
    return ctx.emit("aten.convolution.default", [x, w, bias], {
        "stride": strides, "padding": raw[:spatial], "dilation": dil, "transposed": True,
        "output_padding": opad, "groups": attrs["group"]})


_POOL_ATTRS = {"auto_pad": ("string", "NOTSET"), "ceil_mode": ("int", 0),
               "kernel_shape": ("ints", None), "pads": ("ints", None),
               "strides": ("ints", None)}


@onnx_op("MaxPool", attrs={**_POOL_ATTRS, "dilations": ("ints", None),
                           "storage_order": ("int", 0)},
         aten="aten.max_pool2d_with_indices.default", doc="2-d")
def _maxpool(ctx, ins, attrs, n):
    x = ins[0]
    if x.rank != 4:
        ctx.fail(f"only 2-d MaxPool is supported (input of shape {list(x.shape)})")
    k = attrs["kernel_shape"]
    if not k or len(k) != 2:
        ctx.fail("kernel_shape must give 2 values")
    strides = attrs["strides"] or [1, 1]
    dil = attrs["dilations"] or [1, 1]
    pads = _pads(ctx, attrs, 2, x.shape[2:], k, strides, dil)
    if any(b != e for b, e in pads):
        ctx.fail(f"asymmetric pads {attrs['pads']} are not supported")
    out, idx = ctx.emit("aten.max_pool2d_with_indices.default", [x], {
        "kernel_size": k, "stride": strides, "padding": [b for b, _ in pads], "dilation": dil,
        "ceil_mode": bool(attrs["ceil_mode"])})
    return [out, idx]


@onnx_op("AveragePool", attrs={**_POOL_ATTRS, "count_include_pad": ("int", 0),
                               "dilations": ("ints", None)},
         aten="aten.avg_pool2d.default", doc="2-d")
def _avgpool(ctx, ins, attrs, n):
    x = ins[0]
    if x.rank != 4:
        ctx.fail(f"only 2-d AveragePool is supported (input of shape {list(x.shape)})")
    k = attrs["kernel_shape"]
    if not k or len(k) != 2:
        ctx.fail("kernel_shape must give 2 values")
    if attrs["dilations"] not in (None, [1, 1]):
        ctx.fail("AveragePool with dilations is not supported")
    strides = attrs["strides"] or [1, 1]
    pads = _pads(ctx, attrs, 2, x.shape[2:], k, strides, [1, 1])
    if any(b != e for b, e in pads):
        ctx.fail(f"asymmetric pads {attrs['pads']} are not supported")
    return ctx.emit("aten.avg_pool2d.default", [x], {
        "kernel_size": k, "stride": strides, "padding": [b for b, _ in pads],
        "ceil_mode": bool(attrs["ceil_mode"]),
        "count_include_pad": bool(attrs["count_include_pad"])})


@onnx_op("GlobalAveragePool", aten="aten.mean.dim", doc="mean over the spatial dims")
def _global_avg(ctx, ins, attrs, n):
    x = ins[0]
    return ctx.emit("aten.mean.dim", [x], {"dim": list(range(2, x.rank)), "keepdim": True})


@onnx_op("GlobalMaxPool", aten="aten.amax.default", doc="max over the spatial dims")
def _global_max(ctx, ins, attrs, n):
    x = ins[0]
    return ctx.emit("aten.amax.default", [x], {"dim": list(range(2, x.rank)), "keepdim": True})


# -- normalization and softmax ------------------------------------------------------------------
@onnx_op("BatchNormalization", attrs={"epsilon": ("float", 1e-5), "momentum": ("float", 0.9),
                                      "training_mode": ("int", 0), "spatial": ("int", 1)},
         aten="aten.native_batch_norm.default",
         doc="inference: running statistics are constants; training_mode=1: batch statistics")
def _batchnorm(ctx, ins, attrs, n):
    x, scale, bias, mean, var = ins[:5]
    training = bool(attrs["training_mode"])
    for v in (mean, var):
        if v is not None and v.name in ctx.tensors:
            ctx.stats_only.add(v.name)      # running statistics: no gradient (a buffer)
    for v in (scale, bias):
        if v is not None and v.name in ctx.tensors:
            ctx.grad_reads.add(v.name)
    out = ctx.emit("aten.native_batch_norm.default", [x, scale, bias, mean, var], {
        "training": training, "momentum": 1.0 - attrs["momentum"], "eps": attrs["epsilon"]})
    return [out[0]] + [None] * (n - 1)


@onnx_op("LayerNormalization", attrs={"axis": ("int", -1), "epsilon": ("float", 1e-5),
                                      "stash_type": ("int", 1)},
         aten="aten.native_layer_norm.default")
def _layernorm(ctx, ins, attrs, n):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = _axis(ctx, attrs["axis"], x.rank)
    out = ctx.emit("aten.native_layer_norm.default", [x, scale, bias], {
        "normalized_shape": list(x.shape[axis:]), "eps": attrs["epsilon"]})
    return [out[0]] + [None] * (n - 1)


@onnx_op("GroupNormalization", attrs={"epsilon": ("float", 1e-5), "num_groups": ("int", None),
                                      "stash_type": ("int", 1)},
         aten="aten.native_group_norm.default", doc="opset 21 (per-channel scale and bias)")
def _groupnorm(ctx, ins, attrs, n):
    x, scale, bias = ins
    if attrs["num_groups"] is None:
        ctx.fail("missing attribute 'num_groups'")
    if scale.shape != (x.shape[1],):
        ctx.fail("scale and bias per group (opset 18) are not supported; opset 21's per "
                 "channel ones are")
    hw = int(np.prod(x.shape[2:])) if x.rank > 2 else 1
    out = ctx.emit("aten.native_group_norm.default", [x, scale, bias], {
        "N": x.shape[0], "C": x.shape[1], "HxW": hw, "group": attrs["num_groups"],
        "eps": attrs["epsilon"]})
    return out[0]


@_family(SOFTMAX, attrs={"axis": ("int", -1)},
         extra={k: ("aten.view.default", "opset 13+: one axis; before 13: over the dims from "
                    "axis on (default 1), on a 2-d view") for k in SOFTMAX})
def _softmax(ctx, ins, attrs, n, op):
    x = ins[0]
    if ctx.opset.get("", 13) >= 13:
        return ctx.emit(op, [x], {"dim": _axis(ctx, attrs["axis"], x.rank),
                                  "half_to_float": False})
    # before opset 13 the input is seen as 2-d, [prod(dims before axis), prod(the rest)]
    given = any(a.name == "axis" for a in ctx.node.attribute)
    axis = _axis(ctx, attrs["axis"] if given else 1, x.rank)
    if axis == x.rank - 1:
        return ctx.emit(op, [x], {"dim": axis, "half_to_float": False})
    flat = _reshape(ctx, x, [int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))])
    out = ctx.emit(op, [flat], {"dim": 1, "half_to_float": False})
    return _reshape(ctx, out, list(x.shape))


# -- reductions ------------------------------------------------------------------------------
@_family(REDUCE, attrs={"axes": ("ints", None), "keepdims": ("int", 1),
                         "noop_with_empty_axes": ("int", 0)}, doc="axes as attribute or input")
def _reduce(ctx, ins, attrs, n, op):
    x = ins[0]
    axes = attrs.get("axes")
    if axes is None and len(ins) > 1 and ins[1] is not None:
        axes = _ints(ctx, ins[1], "axes")
    if not axes:
        if attrs["noop_with_empty_axes"]:
            return x
        axes = list(range(x.rank))
    axes = sorted({_axis(ctx, a, x.rank) for a in axes})
    return ctx.emit(op, [x], {"dim": axes, "keepdim": bool(attrs["keepdims"])})


# -- shape ops --------------------------------------------------------------------------------
@onnx_op("Reshape", attrs={"allowzero": ("int", 0)},
         aten="aten.view.default aten.clone.default aten._unsafe_view.default",
         doc="0 copies the input's dim, -1 is inferred")
def _reshape_op(ctx, ins, attrs, n):
    x = ins[0]
    shape = _ints(ctx, ins[1], "the shape")
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not attrs["allowzero"]:
            if i >= x.rank:
                ctx.fail(f"shape {shape} copies dim {i} of a rank-{x.rank} input")
            d = x.shape[i]
        out.append(d)
    if out.count(-1) > 1 or any(d < -1 for d in out):
        ctx.fail(f"bad shape {shape}")
    known = int(np.prod([d for d in out if d != -1]))
    if -1 in out:
        if known == 0 or x.array.size % known:
            ctx.fail(f"cannot reshape {list(x.shape)} into {shape}")
        out[out.index(-1)] = x.array.size // known
    if int(np.prod(out)) != x.array.size:
        ctx.fail(f"cannot reshape {list(x.shape)} into {shape}")
    return _reshape(ctx, x, out)


@onnx_op("Flatten", attrs={"axis": ("int", 1)}, aten="aten.view.default")
def _flatten(ctx, ins, attrs, n):
    x = ins[0]
    axis = attrs["axis"] % (x.rank + 1) if x.rank else 0
    lead = int(np.prod(x.shape[:axis])) if axis else 1
    return _reshape(ctx, x, [lead, int(np.prod(x.shape[axis:]))])


@onnx_op("Transpose", attrs={"perm": ("ints", None)}, aten="aten.permute.default")
def _transpose(ctx, ins, attrs, n):
    x = ins[0]
    perm = attrs["perm"] if attrs["perm"] is not None else list(range(x.rank))[::-1]
    if sorted(perm) != list(range(x.rank)):
        ctx.fail(f"perm {perm} is not a permutation of {x.rank} dims")
    return ctx.emit("aten.permute.default", [x], {"dims": perm})


@onnx_op("Squeeze", attrs={"axes": ("ints", None)}, aten="aten.squeeze.dims",
         doc="axes as attribute or input")
def _squeeze(ctx, ins, attrs, n):
    x = ins[0]
    axes = attrs["axes"]
    if axes is None and len(ins) > 1 and ins[1] is not None:
        axes = _ints(ctx, ins[1], "axes")
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted({_axis(ctx, a, x.rank) for a in axes})
    for a in axes:
        if x.shape[a] != 1:
            ctx.fail(f"cannot squeeze dim {a} of size {x.shape[a]}")
    return ctx.emit("aten.squeeze.dims", [x], {"dim": axes})


@onnx_op("Unsqueeze", attrs={"axes": ("ints", None)}, aten="aten.unsqueeze.default",
         doc="axes as attribute or input")
def _unsqueeze(ctx, ins, attrs, n):
    x = ins[0]
    axes = attrs["axes"]
    if axes is None:
        axes = _ints(ctx, ins[1], "axes")
    rank = x.rank + len(axes)
    for a in sorted({_axis(ctx, a, rank) for a in axes}):
        x = ctx.emit("aten.unsqueeze.default", [x], {"dim": a})
    return x


@onnx_op("Concat", attrs={"axis": ("int", None)}, aten="aten.cat.default")
def _concat(ctx, ins, attrs, n):
    if attrs["axis"] is None:
        ctx.fail("missing attribute 'axis'")
    parts = [v for v in ins if v is not None]
    return ctx.emit("aten.cat.default", [parts], {"dim": _axis(ctx, attrs["axis"],
                                                               parts[0].rank)})


@onnx_op("Split", attrs={"axis": ("int", 0), "split": ("ints", None),
                         "num_outputs": ("int", None)},
         aten="aten.split.Tensor aten.split_with_sizes.default",
         doc="equal chunks: split.Tensor; else split_with_sizes")
def _split(ctx, ins, attrs, n):
    x = ins[0]
    axis = _axis(ctx, attrs["axis"], x.rank)
    sizes = attrs["split"]
    if sizes is None and len(ins) > 1 and ins[1] is not None:
        sizes = _ints(ctx, ins[1], "split")
    if sizes is None:
        parts = attrs["num_outputs"] or n
        step = -(-x.shape[axis] // parts)
        sizes = [min(step, x.shape[axis] - i * step) for i in range(parts)]
    if sum(sizes) != x.shape[axis] or len(sizes) != n:
        ctx.fail(f"split sizes {sizes} do not cut dim {axis} of size {x.shape[axis]} into "
                 f"{n} outputs")
    step = sizes[0]
    if step > 0 and all(z == step for z in sizes[:-1]) and 0 < sizes[-1] <= step:
        # equal chunks (the last may be shorter): what ``Tensor.split(int)`` records
        return ctx.emit("aten.split.Tensor", [x], {"split_size": step, "dim": axis})
    return ctx.emit("aten.split_with_sizes.default", [x], {"split_sizes": sizes, "dim": axis})


@onnx_op("Slice", attrs={"starts": ("ints", None), "ends": ("ints", None),
                         "axes": ("ints", None)}, aten="aten.slice.Tensor aten.flip.default",
         doc="constant starts/ends/axes/steps; negative steps: flip")
def _slice(ctx, ins, attrs, n):
    x = ins[0]
    if attrs["starts"] is not None:
        starts, ends, axes, steps = attrs["starts"], attrs["ends"], attrs["axes"], None
    else:
        starts = _ints(ctx, ins[1], "starts")
        ends = _ints(ctx, ins[2], "ends")
        axes = _ints(ctx, ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
        steps = _ints(ctx, ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        ctx.fail("starts, ends, axes and steps differ in length")
    out = x
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(ctx, a, x.rank)
        size = x.shape[a]
        if st == 0:
            ctx.fail("a step of 0")
        if st > 0:
            s = min(max(s + size if s < 0 else s, 0), size)
            e = min(max(e + size if e < 0 else e, 0), size)
            if s == 0 and e == size and st == 1:
                continue
            out = ctx.emit("aten.slice.Tensor", [out], {"dim": a, "start": s, "end": max(e, s),
                                                         "step": st})
        else:
            # x[s:e:st] with st < 0 is flip(x)[size-1-s : size-1-e : -st]
            s = min(max(s + size if s < 0 else s, -1), size - 1)
            e = min(max(e + size if e < 0 else e, -1), size - 1)
            out = ctx.emit("aten.flip.default", [out], {"dims": [a]})
            fs, fe = size - 1 - s, size - 1 - e
            out = ctx.emit("aten.slice.Tensor", [out], {"dim": a, "start": fs,
                                                         "end": max(fe, fs), "step": -st})
    return out


@onnx_op("Expand", aten="aten.expand.default", doc="bidirectional broadcast")
def _expand(ctx, ins, attrs, n):
    x = ins[0]
    shape = _ints(ctx, ins[1], "the shape")
    try:
        target = list(np.broadcast_shapes(tuple(shape), x.shape))
    except ValueError:
        ctx.fail(f"cannot expand {list(x.shape)} to {shape}")
    ctx.check_size(target, x.dtype, "its result")
    if target == list(x.shape):
        return x
    return ctx.emit("aten.expand.default", [x], {"size": target})


@onnx_op("Tile", aten="aten.repeat.default")
def _tile(ctx, ins, attrs, n):
    x = ins[0]
    reps = _ints(ctx, ins[1], "repeats")
    ctx.check_size([a * b for a, b in zip(x.shape, reps)], x.dtype, "its result")
    return ctx.emit("aten.repeat.default", [x], {"repeats": reps})


@onnx_op("Gather", attrs={"axis": ("int", 0)},
         aten="aten.embedding.default aten.select.int aten.index_select.default "
         "aten.view.default",
         doc="constant scalar index: select; a weight table on axis 0: embedding; "
         "else index_select")
def _gather(ctx, ins, attrs, n):
    x, idx = ins
    axis = _axis(ctx, attrs["axis"], x.rank)
    if idx.dtype.kind not in "iu":
        ctx.fail(f"indices must be integers, not {idx.dtype}")
    if not idx.dynamic:
        ids = np.asarray(idx.array, dtype=np.int64)
        if ids.size and (ids.min() < -x.shape[axis] or ids.max() >= x.shape[axis]):
            ctx.fail(f"index out of range for dim {axis} of size {x.shape[axis]}")
        if ids.ndim == 0:
            return ctx.emit("aten.select.int", [x], {"dim": axis, "index": int(ids)})
        idx = ctx.constant(ids % max(x.shape[axis], 1))
    if axis == 0 and x.rank == 2 and x.dtype.type in FLOATS and x.name in ctx.tensors:
        return ctx.emit("aten.embedding.default", [x, idx])
    flat = idx if idx.rank == 1 else _reshape(ctx, idx, [idx.array.size])
    out = ctx.emit("aten.index_select.default", [x, flat], {"dim": axis})
    shape = list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:])
    return _reshape(ctx, out, shape)


@_family({"ArgMax": "aten.argmax.default", "ArgMin": "aten.argmin.default"},
         attrs={"axis": ("int", 0), "keepdims": ("int", 1), "select_last_index": ("int", 0)},
         doc="the first index of the extreme (select_last_index 0)")
def _argmax(ctx, ins, attrs, n, op):
    x = ins[0]
    if attrs["select_last_index"]:
        ctx.fail("select_last_index=1 is not supported (PyTorch returns the first index)")
    return ctx.emit(op, [x], {"dim": _axis(ctx, attrs["axis"], x.rank),
                              "keepdim": bool(attrs["keepdims"])})


@onnx_op("CumSum", attrs={"exclusive": ("int", 0), "reverse": ("int", 0)},
         aten="aten.cumsum.default aten.flip.default aten.sub.Tensor",
         doc="reverse: flip, cumsum, flip; exclusive: cumsum - x")
def _cumsum(ctx, ins, attrs, n):
    x = ins[0]
    (axis,) = _ints(ctx, ins[1], "axis")
    axis = _axis(ctx, axis, x.rank)
    if attrs["reverse"]:
        x = ctx.emit("aten.flip.default", [x], {"dims": [axis]})
    out = ctx.emit("aten.cumsum.default", [x], {"dim": axis})
    if attrs["exclusive"]:
        out = ctx.emit("aten.sub.Tensor", [out, x])
    if attrs["reverse"]:
        out = ctx.emit("aten.flip.default", [out], {"dims": [axis]})
    return out


@onnx_op("GatherElements", attrs={"axis": ("int", 0)}, aten="aten.gather.default")
def _gather_elements(ctx, ins, attrs, n):
    x, idx = ins
    axis = _axis(ctx, attrs["axis"], x.rank)
    return ctx.emit("aten.gather.default", [x, idx], {"dim": axis})


@onnx_op("GatherND", attrs={"batch_dims": ("int", 0)}, aten="aten.index.Tensor",
         doc="batch_dims 0, constant indices: x[i0, i1, ...] (advanced indexing)")
def _gather_nd(ctx, ins, attrs, n):
    # x[idx[..., 0], idx[..., 1], ...]: what ``x[i, j]`` records in PyTorch (aten.index), the
    # op torch's exporter writes as GatherND
    x, idx = ins
    if attrs["batch_dims"] != 0:
        ctx.fail(f"batch_dims {attrs['batch_dims']} is not supported (only 0)")
    if idx.dynamic:
        ctx.fail("indices computed from the inputs are not supported")
    ids = np.asarray(idx.array, dtype=np.int64)
    if ids.ndim == 0 or not 1 <= ids.shape[-1] <= x.rank:
        ctx.fail(f"indices of shape {list(ids.shape)} do not index a rank-{x.rank} tensor")
    for k in range(ids.shape[-1]):
        part = ids[..., k]
        if part.size and (part.min() < -x.shape[k] or part.max() >= x.shape[k]):
            ctx.fail(f"index out of range for dim {k} of size {x.shape[k]}")
    parts = [ctx.constant(ids[..., k]) for k in range(ids.shape[-1])]
    return ctx.emit("aten.index.Tensor", [x, parts])


@onnx_op("Pad", attrs={"mode": ("string", "constant"), "pads": ("ints", None),
                       "value": ("float", 0.0)},
         aten="aten.constant_pad_nd.default aten.reflection_pad1d.default "
         "aten.reflection_pad2d.default aten.replication_pad1d.default "
         "aten.replication_pad2d.default",
         doc="constant, reflect, edge")
def _pad(ctx, ins, attrs, n):
    x = ins[0]
    pads = attrs["pads"] if attrs["pads"] is not None else _ints(ctx, ins[1], "pads")
    value = attrs["value"]
    if len(ins) > 2 and ins[2] is not None:
        value = _scalar(ins[2])
        if value is None:
            ctx.fail("the constant value must be a constant scalar")
    axes = list(range(x.rank))
    if len(ins) > 3 and ins[3] is not None:
        axes = [_axis(ctx, a, x.rank) for a in _ints(ctx, ins[3], "axes")]
    if len(pads) != 2 * len(axes):
        ctx.fail(f"pads has {len(pads)} values for {len(axes)} axes")
    per = {a: (pads[i], pads[i + len(axes)]) for i, a in enumerate(axes)}
    padded = [a for a, p in per.items() if p != (0, 0)]
    flat = []                       # PyTorch's pad: last dim first, (begin, end) pairs
    for a in range(x.rank - 1, min(padded, default=x.rank) - 1, -1):
        flat += list(per.get(a, (0, 0)))
    if not flat:
        return x
    ctx.check_size([d + sum(per.get(i, (0, 0))) for i, d in enumerate(x.shape)], x.dtype,
                   "its result")
    mode = attrs["mode"]
    if mode == "constant":
        return ctx.emit("aten.constant_pad_nd.default", [x], {"pad": flat, "value": value})
    if mode in ("reflect", "edge"):
        spatial = len(flat) // 2
        if spatial not in (1, 2) or x.rank not in (spatial + 1, spatial + 2):
            ctx.fail(f"{mode} padding of {spatial} trailing dims of a rank-{x.rank} tensor "
                     "is not supported")
        kind = "reflection" if mode == "reflect" else "replication"
        return ctx.emit(f"aten.{kind}_pad{spatial}d.default", [x], {"padding": flat})
    ctx.fail(f"mode must be constant, reflect or edge, not {mode!r}")


@onnx_op("Resize", attrs={"mode": ("string", "nearest"),
                          "coordinate_transformation_mode": ("string", "half_pixel"),
                          "nearest_mode": ("string", "round_prefer_floor"),
                          "cubic_coeff_a": ("float", -0.75), "exclude_outside": ("int", 0),
                          "extrapolation_value": ("float", 0.0), "antialias": ("int", 0),
                          "axes": ("ints", None),
                          "keep_aspect_ratio_policy": ("string", "stretch")},
         aten="aten.upsample_nearest2d.vec aten.upsample_bilinear2d.vec",
         doc="4-d; nearest (asymmetric, floor) and linear (half_pixel or align_corners)")
def _resize(ctx, ins, attrs, n):
    x = ins[0]
    if x.rank != 4:
        ctx.fail(f"only 4-d Resize is supported (input of shape {list(x.shape)})")
    scales = _floats(ctx, ins[2]) if len(ins) > 2 and ins[2] is not None else None
    sizes = _ints(ctx, ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    if sizes:
        out = list(sizes[-2:])
    elif scales:
        if scales[:2] != [1.0, 1.0]:
            ctx.fail("Resize of the batch or channel dims is not supported")
        out = [int(np.floor(d * s)) for d, s in zip(x.shape[2:], scales[2:])]
    else:
        ctx.fail("Resize needs scales or sizes")
    ctx.check_size(list(x.shape[:2]) + out, x.dtype, "its result")
    # as F.interpolate records it: sizes -> output_size; scales -> scale_factors (the source
    # index is then out_index / scale, ONNX's asymmetric and half_pixel rules)
    size_args = (dict(output_size=out, scale_factors=None) if sizes else
                 dict(output_size=None, scale_factors=scales[2:]))
    mode, coord = attrs["mode"], attrs["coordinate_transformation_mode"]
    if mode == "nearest":
        if coord != "asymmetric" or attrs["nearest_mode"] != "floor":
            ctx.fail("nearest Resize needs coordinate_transformation_mode asymmetric and "
                     "nearest_mode floor (PyTorch's nearest)")
        return ctx.emit("aten.upsample_nearest2d.vec", [x], size_args)
    if mode == "linear":
        if coord not in ("half_pixel", "pytorch_half_pixel", "align_corners"):
            ctx.fail(f"linear Resize with {coord} coordinates is not supported")
        return ctx.emit("aten.upsample_bilinear2d.vec", [x], dict(
            size_args, align_corners=coord == "align_corners"))
    ctx.fail(f"Resize mode {mode!r} is not supported")


def _floats(ctx, value):
    """A float list from a constant, or from an initializer of the file (a leaf: its values
    are the file's, and reading them as sizes gives it no gradient path)."""
    if value is None or value.array.size == 0:
        return None
    if value.dynamic and value.name not in ctx.tensors:
        ctx.fail("scales computed from the inputs are not supported")
    return [float(v) for v in value.array.reshape(-1)]
