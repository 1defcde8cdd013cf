"""The op registry: ``primitive`` defines an op's forward, ``defvjp`` its backward.

Every op is one ``Op`` object. Called on raw arrays it just computes; called
with a ``Tensor`` among its arguments it records a backward node
(``OpBackward``) when grad mode is on and an input requires grad. Backward
formulas are written with these same ops, so they work on raw arrays now
and would record themselves if handed Tensors (higher-order gradients).
"""
from __future__ import annotations

import numpy as np

from ..autograd.node import ERR_BACKWARD_TWICE, InputMetadata, Node
from ..autograd.state import STATE
from ..autograd.tensor import Tensor
from ..devices import CPU, device_of, on_device

OPS: dict[str, "Op"] = {}

_NO_ARG = object()


class Arg:
    """One attribute of an op in a graph file: its default and how to check it."""

    __slots__ = ("default", "check", "doc")

    def __init__(self, default=_NO_ARG, check=None, doc=""):
        self.default = default
        self.check = check           # fn(value) -> value, raising ValueError
        self.doc = doc

    @property
    def required(self):
        return self.default is _NO_ARG


class Op:
    """An operation: forward on raw arrays, one VJP per input, and its node's name."""

    __slots__ = ("name", "fn", "vjps", "node_name", "saves", "arity", "args", "multi_output",
                 "differentiable", "doc", "file_only")

    def __init__(self, name, fn, node_name, saves, arity, args, multi_output, differentiable,
                 file_only):
        self.name = name
        self.fn = fn
        self.vjps = None
        self.node_name = node_name or (name.title().replace("_", "") + "Backward0")
        self.saves = saves                # does the backward need input/output values?
        self.arity = arity                # number of inputs, or (min, max)
        self.args = args or {}
        self.multi_output = multi_output
        self.differentiable = differentiable
        self.doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        self.file_only = file_only        # handled by the loader (checkpoint, ...)

    def __call__(self, *inputs, **args):
        if len(inputs) == 2 and type(inputs[0]) is not Tensor and type(inputs[1]) is not Tensor:
            return self.fn(*inputs, **args)      # backward formulas on raw arrays
        for x in inputs:
            if type(x) is Tensor:
                return record(self, inputs, args)
        return self.fn(*inputs, **args)

    def node_name_for(self, datas, args):
        name = self.node_name
        return name(datas, args) if callable(name) else name

    def __repr__(self):
        return f"<op {self.name}>"


def primitive(name, node_name=None, saves=True, arity=1, args=None, multi_output=False,
              differentiable=True, file_only=False):
    """Register ``fn(*arrays, **args)`` as the forward of op ``name``."""
    def decorate(fn):
        op = Op(name, fn, node_name, saves, arity, args, multi_output, differentiable, file_only)
        OPS[name] = op
        return op
    return decorate


def defvjp(op, *vjps):
    """Give ``op`` one VJP per input: ``vjp(g, ans, *inputs, **args) -> grad``.

    For ops created with ``saves=False`` the inputs passed to a VJP are
    their InputMetadata (shape, dtype, device) and ``ans`` is None.
    """
    op.vjps = vjps


class OpBackward(Node):
    """The backward node of one recorded op."""

    __slots__ = ("op", "args", "saved", "input_devices")

    def apply(self, grads):
        saved = self.saved
        if saved is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        inputs, ans = saved
        op = self.op
        if op.multi_output:
            g = [self._zeros(i) if gi is None else gi for i, gi in enumerate(grads)]
        else:
            g = grads[0]
            if g is None:
                return [None] * len(self.next_edges)
        vjps = op.vjps
        args = self.args
        out = []
        for i, edge in enumerate(self.next_edges):
            out.append(None if edge is None else vjps[i](g, ans, *inputs, **args))
        devices = self.input_devices
        if devices is not None:
            out = [o if o is None else on_device(o, devices[i]) for i, o in enumerate(out)]
        return out

    def _zeros(self, i):
        meta = self.input_metadata[i]
        from ..devices import xp_of

        return on_device(xp_of(meta.device).zeros(meta.shape, meta.dtype), meta.device)

    def release_variables(self):
        if self.op.saves:
            self.saved = None


class DeviceMismatch(ValueError):
    pass


def _common_device(datas):
    """The device an op computes on: all inputs share it (0-dim CPU arrays excepted)."""
    found = None
    for d in datas:
        if not hasattr(d, "shape"):
            continue
        dev = device_of(d)
        if dev is CPU and d.ndim == 0:
            continue
        if found is None:
            found = dev
        elif dev is not found:
            raise DeviceMismatch(f"Expected all tensors to be on the same device, but found "
                                 f"at least two devices, {found} and {dev}!")
    return found or CPU


def record(op, inputs, args):
    """Run ``op`` on Tensors; record an OpBackward node if a gradient is needed."""
    datas = [x.data if type(x) is Tensor else x for x in inputs]
    on_accel = any(type(d) is not np.ndarray and hasattr(d, "shape") for d in datas)
    dev = _common_device(datas) if on_accel and op.name != "to" else CPU
    out = op.fn(*datas, **args)
    outs = list(out) if op.multi_output else [out]
    for i, o in enumerate(outs):
        if type(o) is not np.ndarray and device_of(o) is CPU:   # a host scalar
            o = np.asarray(o)
        outs[i] = on_device(o, dev) if dev is not CPU else o
    needs_grad = (STATE.grad_enabled and op.differentiable
                  and any(type(x) is Tensor and x.requires_grad for x in inputs)
                  and any(o.dtype.kind == "f" for o in outs))
    if not needs_grad:
        tensors = [Tensor(o) for o in outs]
        return tensors if op.multi_output else tensors[0]

    edges = [x.gradient_edge() if type(x) is Tensor and x.requires_grad else None for x in inputs]
    node = OpBackward(op.node_name_for(datas, args), edges, [InputMetadata.of(o) for o in outs])
    node.op = op
    node.args = args
    if op.saves:
        node.saved = (datas, outs if op.multi_output else outs[0])
    else:
        node.saved = ([InputMetadata.of(d) if hasattr(d, "shape") else d for d in datas], None)
    node.input_devices = [device_of(d) for d in datas] if on_accel else None
    tensors = []
    for i, o in enumerate(outs):
        t = Tensor(o, requires_grad=o.dtype.kind == "f")
        if t.requires_grad:
            t.grad_fn = node
            t.output_nr = i
        tensors.append(t)
    return tensors if op.multi_output else tensors[0]
