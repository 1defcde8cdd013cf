"""The adapter that turns ATen table entries into registered ops.

An entry is a forward on raw arrays declared with its PyTorch schema and its
backward node's name::

    @aten("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
          "AddmmBackward0")
    def addmm(self, mat1, mat2, beta=1, alpha=1): ...

    defvjp(addmm, vjp_self, vjp_mat1, vjp_mat2)    # one per schema tensor input

The op is registered in ``OPS`` under ``aten.addmm.default`` (exactly
``str(torch.ops.aten.addmm.default)``). The forward and the VJPs see the
schema's tensor inputs in order: arrays, ``None`` for an absent ``Tensor?``,
a list for a ``Tensor[]``, or a Python number passed for a Tensor (a wrapped
number); the other arguments come by schema name, defaults filled in. A VJP
is ``vjp(g, ans, *inputs, **args)`` (``g``/``ans`` are lists for several
outputs); for a ``Tensor[]`` input it returns one gradient per element.
``defvjp_joint`` gives instead one function computing several inputs'
gradients, told which are wanted (``output_mask``, as PyTorch's
``grad_input_mask``).

Note [flattened inputs]: one call records one ``OpBackward`` node (through
``core.record``) whose next edges are the tensor inputs flattened in schema
order, a ``Tensor[]`` contributing its elements, less the inputs that are
not differentiable (Note [non-differentiable inputs]), so that the engine sees
exactly PyTorch's edges. ``fn`` therefore accepts the inputs both flattened
(as ``record`` passes them) and as the schema lays them out (as callers on
raw arrays do); the VJPs are indexed by edge and map it back to the flat input,
schema input and list element it belongs to.
"""
from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ...devices import writeable
from ..core import OPS, Op, record
from .schema import Schema
from .tensor_iterator import lays_out

ATEN_OPS: dict[str, "AtenOp"] = {}

# Note [numbers as tensors]: PyTorch takes a Python number for a Tensor argument
# (a wrapped number) only in the ops torch._C._should_allow_numbers_as_tensors
# names (python_arg_parser.cpp): the arithmetic ones and the copies. Any other op
# refuses it ("aten::embedding() Expected a value of type 'Tensor' for argument
# 'indices' but instead found type 'float'"), and its forward and shape rule
# would not know what to do with a number: the loader asks ``numbers_as_tensors``.
NUMBERS_AS_TENSORS = frozenset({
    "_to_copy", "add", "copy", "div", "divide", "floor_divide", "mul", "multiply", "sub",
    "subtract", "to", "true_divide"})


class AtenOp(Op):
    """An op defined by an ATen entry; called like the ATen overload it is."""

    __slots__ = ("schema", "forward", "defaults", "differentiable_outputs", "differentiable_inputs",
                 "schema_vjps", "joint_vjp", "first_order_only", "meta", "_list_pos",
                 "numbers_as_tensors", "mutated", "draws_random", "_plain", "beyond_message",
                 "reads_complex", "saved_outputs", "_layouts")

    def __init__(self, schema, forward, node_name, saves, differentiable_outputs, meta=None,
                 mutates=()):
        multi = schema.list_output or schema.n_outputs > 1
        n = len(schema.tensors)
        list_pos = [i for i, p in enumerate(schema.tensors) if p.is_list]
        # arity counts schema tensor inputs (a Tensor[] is one input: a list)
        super().__init__(name=schema.name, fn=forward, node_name=node_name, saves=saves, arity=n,
                         args=schema.args, multi_output=multi, doc=f"ATen {schema.text}",
                         view=schema.returns_view)
        self.schema = schema
        self.forward = forward
        self.fn = self._forward_any
        self.defaults = {k: a.default for k, a in schema.args.items() if not a.required}
        self.differentiable_outputs = differentiable_outputs
        self.differentiable_inputs = [True] * n
        self.schema_vjps = None
        self.joint_vjp = None
        self.first_order_only = False
        self.meta = meta      # ELEMENTWISE, fn(*metas, **args) -> [(shape, dtype)], or None
        # the outputs PyTorch's node saves (None: all; Note [What a node saved])
        self.saved_outputs = None
        self._list_pos = list_pos[0] if list_pos else None
        self._layouts = None        # see flat_layout
        # a Python number may stand for a Tensor input (Note [numbers as tensors])
        self.numbers_as_tensors = schema.name.split(".")[1].rstrip("_") in NUMBERS_AS_TENSORS
        # the schema positions of the tensor inputs the forward writes into
        names = [p.name for p in schema.tensors]
        self.mutated = tuple(names.index(m) for m in mutates)
        self.draws_random = False   # draws from the graph's generator (ops/rng.py; sampling.py sets it)
        # Note [Raw calls]: no Tensor[] input, no input written into, at least one tensor input
        self._plain = not list_pos and not self.mutated and n > 0
        self.beyond_message = None  # Note [a derivative gradcli does not go beyond]
        # reads a complex tensor, as its real view (Note [complex as its real view]; fft.py sets it)
        self.reads_complex = False

    # -- as a graph file names it -----------------------------------------------------
    @property
    def tensor_inputs(self):
        """The schema's tensor arguments in order (``name``, ``optional``, ``is_list``):
        how a graph entry lays out its ``inputs`` (the loader reads this)."""
        return self.schema.tensors

    def bind(self, layout):
        """This op called with one graph entry's input layout (see module ``bind``)."""
        return AtenCall(self, layout)

    # -- inputs: schema layout <-> flat ------------------------------------------
    def flatten(self, inputs):
        if self._list_pos is None:
            return list(inputs)
        p = self._list_pos
        return list(inputs[:p]) + list(inputs[p]) + list(inputs[p + 1:])

    def structure(self, flat):
        p = self._list_pos
        if p is None:
            return flat
        n_after = len(self.schema.tensors) - p - 1
        end = len(flat) - n_after
        return tuple(flat[:p]) + (list(flat[p:end]),) + tuple(flat[end:])

    def _is_structured(self, inputs):
        p = self._list_pos
        return len(inputs) == len(self.schema.tensors) and (p is None or isinstance(inputs[p], (list, tuple)))

    def locate(self, i, n_flat):
        """The schema input (and list element, or None) of flat input ``i``."""
        p = self._list_pos
        if p is None or i < p:
            return i, None
        n_list = n_flat - (len(self.schema.tensors) - 1)
        if i < p + n_list:
            return p, i - p
        return i - n_list + 1, None

    # Note [an argument named self]: pow.Scalar's ``Scalar self`` comes by name, so the
    # methods that take the schema's arguments as keywords take the op positionally only
    def _forward_any(self, /, *inputs, **args):
        if self._list_pos is not None and not self._is_structured(inputs):
            inputs = self.structure(inputs)
        if self.mutated:
            inputs = self._writable(inputs)
        full = self.defaults.copy()
        full.update(args)
        return self.forward(*inputs, **full)

    # Note [Copy on write of leaves]: a loaded graph's leaves share read-only arrays
    # between runs (Note [Leaves made once] in graph.py). An op that writes into an
    # input (``mutates``: batch norm's running statistics, as PyTorch's training
    # forward updates the module's buffers) first gives a read-only input a copy of
    # its own: the Tensor's data for a Tensor, so the run sees the update; a new
    # array for a raw read-only one (its caller cannot see the update, as it could
    # not have written it).
    def _writable(self, inputs):
        inputs = list(inputs)
        for p in self.mutated:
            x = inputs[p]
            if type(x) is Tensor:
                if not writeable(x.data):
                    x.data = x.data.copy()
            elif (isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__")) \
                    and not writeable(x):
                inputs[p] = x.copy()
        return inputs

    # -- calling --------------------------------------------------------------------
    # Note [Raw calls]: the VJPs call ATen ops on raw arrays (``mm(g, t(mat2))``), a
    # dozen calls per node of a transformer's backward. Such a call of an op with no
    # ``Tensor[]`` input and no input it writes into, given all its tensor inputs and
    # none of them a Tensor, is the forward with the schema's defaults merged: the
    # first branch below does that without the schema layout's work (structure check,
    # flattening) that ``__call__`` does for the general case. Same result, same
    # errors (the forward's own checks run either way).
    def __call__(self, /, *inputs, **args):
        if self._plain and len(inputs) == self.arity:
            for x in inputs:
                if type(x) is Tensor:
                    break
            else:
                if args:
                    full = self.defaults.copy()
                    full.update(args)
                    return self.forward(*inputs, **full)
                return self.forward(*inputs, **self.defaults)
        if not self._is_structured(inputs):
            raise TypeError(f"{self.name} takes {len(self.schema.tensors)} tensor inputs "
                            f"({self.schema.text}), got {len(inputs)}")
        if self.mutated:
            self._writable(inputs)
        full = self.defaults.copy()
        full.update(args)
        flat = self.flatten(inputs)
        if not self.schema.tensors:
            # Note [factories make Tensors]: an op with no tensor input (arange, full, rand)
            # makes Tensors, as a PyTorch factory does, so that a graph entry's result is one
            out = self.forward(**full)
            return [Tensor(o) for o in out] if self.multi_output else Tensor(out)
        if not any(type(x) is Tensor for x in flat):
            return self.forward(*inputs, **full)
        diff = self.differentiable_flat(len(flat))
        # Note [non-differentiable inputs]: PyTorch's node has edges only to the
        # inputs derivatives.yaml differentiates (not where's condition, embedding's
        # indices, nll_loss's target and weight): those are passed on as plain
        # arrays, so they never make the output require grad, and their (empty)
        # edge slots are dropped from the node below.
        passed = [x if d or type(x) is not Tensor else x.data for x, d in zip(flat, diff)]
        out = record(self, passed, full)
        outs = out if self.multi_output else [out]
        node = next((o.grad_fn for o in outs if o.grad_fn is not None), None)
        if node is not None and not all(diff):
            keep = [i for i, d in enumerate(diff) if d]
            node.next_edges = [node.next_edges[i] for i in keep]
            if node.input_devices is not None:
                node.input_devices = [node.input_devices[i] for i in keep]
        keep_out = self.differentiable_outputs
        if keep_out is not None and self.multi_output:   # e.g. pooling indices: no grad_fn
            out = [o if k < len(keep_out) and keep_out[k] or not o.requires_grad else Tensor(o.data)
                   for k, o in enumerate(out)]
        return out

    def differentiable_flat(self, n_flat):
        """For each flat input: does the node have an edge for it?"""
        return list(self.flat_layout(n_flat)[0])

    def flat_layout(self, n_flat):
        """For ``n_flat`` flat inputs: whether the node has an edge for each, the flat input
        of each edge, and each flat input's schema input and list element (``locate``).
        The same for every node of the op with that many inputs, so worked out once per
        count (again if ``differentiable_inputs`` is replaced)."""
        diffs = self.differentiable_inputs
        cached = self._layouts
        if cached is None or cached[0] is not diffs:
            cached = self._layouts = (diffs, {})
        layout = cached[1].get(n_flat)
        if layout is None:
            located = tuple(self.locate(i, n_flat) for i in range(n_flat))
            diff = tuple(diffs[p] for p, _ in located)
            layout = cached[1][n_flat] = (diff, tuple(f for f, d in enumerate(diff) if d), located)
        return layout


class _FlatVJPs:
    """``op.vjps`` for an AtenOp: indexed by flat input position (Note [flattened inputs])."""

    __slots__ = ("op", "_made")

    def __init__(self, op):
        self.op = op
        self._made = {}             # i -> the VJP of edge i (made once: it depends on i alone)

    def __getitem__(self, i):
        vjp = self._made.get(i)
        if vjp is None:
            vjp = self._made[i] = self._make(i)
        return vjp

    def _make(self, i):
        op = self.op

        def vjp(g, ans, *flat, **args):
            if op.first_order_only and _records(op, g, flat):
                return _not_differentiable(op, vjp, g, ans, flat, args)
            _, to_flat, located = op.flat_layout(len(flat))
            p, k = located[to_flat[i]]              # edge -> flat input -> schema input
            inputs = op.structure(flat)
            if op.joint_vjp is not None:
                mask = [q == p for q in range(len(op.schema.tensors))]
                grad = op.joint_vjp(g, ans, *inputs, output_mask=mask, **args)[p]
            else:
                fn = op.schema_vjps[p]
                grad = None if fn is None else fn(g, ans, *inputs, **args)
            return grad if k is None or grad is None else grad[k]
        return vjp


def _records(op, g, flat):
    """Note [no double backward]: does this call of a ``first_order_only`` op's VJP record
    (create_graph)? Under create_graph the saved inputs are Tensors, and the gradient depends
    on them as on ``g``: a constant ``g`` is no reason to compute raw."""
    return (any(type(x) is Tensor for x in (g if op.multi_output else [g]))
            or any(type(x) is Tensor and x.requires_grad for x in flat))


def _all_vjps(op):
    """``op.vjp_all`` of an AtenOp with a ``Tensor[]`` input or a joint VJP (Note [one call for
    all inputs' gradients] in core.py): each schema input's VJP (or the joint one, told every
    wanted input) runs once per node, and a list's gradients are handed out to its edges.
    A ``first_order_only`` op's gradients that record (create_graph) come out of one
    NotImplemented node (Note [no double backward])."""
    def vjp_all(g, ans, flat, needed, args):
        if op.first_order_only and _records(op, g, flat):
            return _not_differentiable_all(op, vjp_all, g, ans, flat, needed, args)
        _, to_flat, located = op.flat_layout(len(flat))       # edge -> flat input -> schema input
        wanted = {}                                                        # schema input -> [(edge, k)]
        for e, need in enumerate(needed):
            if need:
                p, k = located[to_flat[e]]
                wanted.setdefault(p, []).append((e, k))
        inputs = op.structure(list(flat))
        if op.joint_vjp is not None:
            mask = [q in wanted for q in range(len(op.schema.tensors))]
            grads = op.joint_vjp(g, ans, *inputs, output_mask=mask, **args)
        else:
            grads = {p: None if op.schema_vjps[p] is None else op.schema_vjps[p](g, ans, *inputs, **args)
                     for p in wanted}
        out = [None] * len(needed)
        for p, edges in wanted.items():
            grad = grads[p]
            for e, k in edges:
                out[e] = grad if k is None or grad is None else grad[k]
        return out
    return vjp_all


def _value(x):
    return x.data if type(x) is Tensor else x


class _RaiseOnBackward:
    """The VJPs of a NotImplemented node: every one raises PyTorch's error."""

    __slots__ = ("message",)

    def __init__(self, message):
        self.message = message

    def __getitem__(self, i):
        def vjp(*_, **__):
            raise RuntimeError(self.message)
        return vjp


def _not_differentiable(op, vjp, g, ans, flat, args):
    """Note [no double backward]: where PyTorch has no derivative for an op's backward,
    create_graph still gives the first-order gradient, as a Tensor whose ``grad_fn`` is
    a ``torch::autograd::NotImplemented`` node (PyTorch's name) with edges to what it
    depends on; differentiating through it raises PyTorch's error then, not before."""
    gs = [_value(x) for x in g] if op.multi_output else _value(g)
    raw = vjp(gs, [_value(x) for x in ans] if op.multi_output else _value(ans),
              *[_value(x) for x in flat], **args)
    deps = _requiring_grad(op, g, flat)
    if raw is None or not deps:
        return raw
    (raw,) = _on_gradients_device(op, gs, [raw])
    marker = _not_implemented_marker(op, lambda value, *_: value)
    return record(marker, [raw] + deps, {})


def _requiring_grad(op, g, *more):
    """The Tensors that require grad among the incoming gradients ``g`` and ``more``: the
    edges of a NotImplemented node (Note [no double backward])."""
    found = [x for x in (g if op.multi_output else [g]) if type(x) is Tensor and x.requires_grad]
    for xs in more:
        found += [x for x in xs if type(x) is Tensor and x.requires_grad]
    return found


def _on_gradients_device(op, gs, values):
    """``values`` on the device of the incoming gradients ``gs`` (raw arrays). A formula
    run on raw arrays may return host arrays (NumPy functions that are not ufuncs, such as
    np.where, do): the gradient goes on its gradient's device, as the engine puts a raw
    VJP output there (found by scripts/fuzz_cli.py: hardsigmoid on sim:0 under create_graph
    failed with "Expected all tensors to be on the same device")."""
    from ...devices import device_of, on_device  # noqa: PLC0415

    ref = next((x for x in gs if x is not None), None) if op.multi_output else gs
    if ref is None:
        return values
    dev = device_of(ref)
    return [on_device(v, dev) if hasattr(v, "shape") and device_of(v) is not dev else v for v in values]


def _not_implemented_marker(op, fn, multi_output=False):
    """The op whose node is PyTorch's ``torch::autograd::NotImplemented`` for ``op``'s
    gradients: ``fn`` hands on the values, and differentiating them raises PyTorch's error."""
    marker = Op(f"{op.name}:not_implemented", fn, "torch::autograd::NotImplemented", saves=False,
                arity=(1, None), multi_output=multi_output, public=False,
                doc="gradients PyTorch cannot differentiate")
    marker.vjps = _RaiseOnBackward(op.beyond_message or f"derivative for aten::{op.first_order_only} is not "
                                   f"implemented (the backward of {op.name}; as PyTorch 2.13)")
    return marker


def _not_differentiable_all(op, vjp_all, g, ans, flat, needed, args):
    """``_not_differentiable`` for an op with one formula for all its inputs' gradients
    (attention's): the formula runs once on raw arrays and one NotImplemented node makes
    every wanted gradient, its outputs in edge order, as PyTorch's one node does. Its edges
    go to what requires grad among the incoming gradients, the inputs and the forward's
    differentiable outputs, in that order: PyTorch's for attention, whose formula reads
    all of them."""
    gs = [_value(x) for x in g] if op.multi_output else _value(g)
    raws = vjp_all(gs, [_value(x) for x in ans] if op.multi_output else _value(ans),
                   [_value(x) for x in flat], needed, args)
    keep_out = op.differentiable_outputs
    outputs = ([x for i, x in enumerate(ans) if keep_out is None or i < len(keep_out) and keep_out[i]]
               if op.multi_output else [ans])
    deps = _requiring_grad(op, g, flat, outputs)
    wanted = [e for e, r in enumerate(raws) if r is not None]
    if not deps or not wanted:
        return raws
    values = _on_gradients_device(op, gs, [raws[e] for e in wanted])
    n = len(values)
    marker = _not_implemented_marker(op, lambda *values: list(values[:n]), multi_output=True)
    made = record(marker, values + deps, {})
    node = made[0].grad_fn
    node.next_edges = node.next_edges[n:]           # (none for the values themselves)
    if node.input_devices is not None:
        node.input_devices = node.input_devices[n:]
    out = [None] * len(raws)
    for e, t in zip(wanted, made):
        out[e] = t
    return out


def aten(schema, node_name, saves=True, differentiable_outputs=None, meta=None, mutates=(),
         own_layout=False, iterator_order=None):
    """Register ``forward(*inputs, **args)`` as the ATen overload ``schema`` declares.

    ``meta``: how the loader infers the outputs without computing them (Note [ATen
    infer on stand-ins]): ``ELEMENTWISE`` (the tensor inputs broadcast; the dtype is
    the forward's on 0-d stand-ins), or ``fn(*inputs, **args) -> [(shape, dtype)]``
    called with ``Meta`` objects (``shape``, ``dtype``, ``ndim``) for the tensors,
    raising ValueError as the forward would (meta.py attaches the non-elementwise ones).
    ``differentiable_outputs``: one bool per output (PyTorch's
    ``output_differentiability``); outputs marked False get no ``grad_fn``.
    ``saves=False``: the VJPs get inputs' InputMetadata, not their values.
    ``mutates``: the names of the tensor inputs the forward writes into (Note [Copy on
    write of leaves]).
    ``own_layout``: an ELEMENTWISE entry whose PyTorch kernel does not lay out its output
    as TensorIterator does (``clone``'s memory_format, ``masked_fill``'s row-major copy):
    the forward gives the layout itself. The other ELEMENTWISE entries' outputs get
    TensorIterator's layout (Note [TensorIterator's layout] in tensor_iterator.py);
    ``iterator_order``: the tensor inputs' positions in the order PyTorch's kernel hands
    them to TensorIterator, where it is not the schema's.
    """
    parsed = Schema(schema)
    if differentiable_outputs is not None and len(differentiable_outputs) != parsed.n_outputs:
        raise ValueError(f"{parsed.name}: {len(differentiable_outputs)} differentiable_outputs flags for "
                         f"{parsed.n_outputs} outputs")

    def decorate(forward):
        if meta == ELEMENTWISE and not own_layout:
            forward = lays_out(forward, iterator_order)
        op = AtenOp(parsed, forward, node_name, saves, differentiable_outputs, meta, mutates)
        OPS[op.name] = op
        ATEN_OPS[op.name] = op
        return op
    return decorate


def defvjp(op, *vjps, first_order_only=False, beyond=None):
    """One VJP per schema tensor input (None: not differentiable, e.g. indices).

    ``first_order_only``: False, or the name of PyTorch's backward op that has no
    derivative (e.g. ``"hardsigmoid_backward"``): the VJPs then compute on raw arrays
    and under create_graph their result records a node that raises PyTorch's error
    when differentiated (Note [no double backward]).
    """
    if len(vjps) != len(op.schema.tensors):
        raise ValueError(f"{op.name}: {len(vjps)} VJPs for {len(op.schema.tensors)} tensor inputs")
    op.beyond_message = beyond          # as for defvjp_joint
    op.schema_vjps = vjps
    op.first_order_only = first_order_only
    op.differentiable_inputs = [v is not None for v in vjps]
    # Note [Direct VJPs]: where every schema input is differentiable, none is a Tensor[]
    # and the formulas differentiate (not ``first_order_only``), edge i is schema input i
    # and the flat inputs are the schema's: ``_FlatVJPs``' mapping is the identity, so
    # the node calls the formulas themselves (one frame and one closure less per call).
    if op._list_pos is None and not first_order_only and all(op.differentiable_inputs):
        op.vjps = tuple(vjps)
    else:
        op.vjps = _FlatVJPs(op)
    if op._list_pos is not None and not first_order_only:
        op.vjp_all = _all_vjps(op)      # a Tensor[]'s VJP once per node, not once per element


def defvjp_joint(op, fn, differentiable_inputs, first_order_only=False, beyond=None):
    """``fn(g, ans, *inputs, output_mask, **args)`` -> one gradient (or None) per tensor input;
    ``differentiable_inputs``: one bool per tensor input (those the node has edges to);
    ``first_order_only`` as for ``defvjp``.

    ``beyond``: with ``first_order_only``, the error raised when the gradient is differentiated
    (Note [a derivative gradcli does not go beyond]): where PyTorch can differentiate further
    but gradcli cannot, the error says so instead of claiming PyTorch's limit.
    """
    # Note [a derivative gradcli does not go beyond]: a gradient computed on raw arrays under
    # create_graph would be a constant, and its derivative silently zero; it records instead a
    # node that raises when the backward reaches it, naming what gradcli does not compute
    op.beyond_message = beyond
    op.joint_vjp = fn
    op.first_order_only = first_order_only
    op.differentiable_inputs = list(differentiable_inputs)
    op.vjps = _FlatVJPs(op)
    # one call for every wanted input, as PyTorch's one formula (an attention node's backward
    # kernel computes the query's, key's and value's gradients together: once, not three times)
    op.vjp_all = _all_vjps(op)


def not_implemented(name):
    """Note [a backward without a derivative]: the VJP of an input that derivatives.yaml marks
    ``not_implemented("NAME")``: the node is recorded (under its own name, as PyTorch's
    ``PdistBackwardBackward0``) and raises PyTorch's error only when the backward reaches it.

    >>> vjp = not_implemented("_pdist_backward")
    >>> vjp(None, None)
    Traceback (most recent call last):
    RuntimeError: the derivative for '_pdist_backward' is not implemented.
    """
    def vjp(*_, **__):
        raise RuntimeError(f"the derivative for '{name}' is not implemented.")
    return vjp


def not_differentiable(op):
    """Note [ops without a node]: ``op`` is not differentiable (derivatives.yaml lists it as
    ``non_differentiable``, or not at all: comparisons, ``argmax``, the factories): its tensor
    inputs are passed on as plain arrays, so its result never requires grad and no node is
    recorded, whatever its dtype, as in PyTorch. ``gradcli ops`` shows no node name."""
    op.node_name = None
    op.differentiable_inputs = [False] * len(op.schema.tensors)
    return op


# -- one graph entry's call --------------------------------------------------------------
ELEMENTWISE = "elementwise"


class Meta:
    """A tensor input as a ``meta`` rule sees it: shape, dtype and ndim, no values."""

    __slots__ = ("shape", "dtype", "ndim")

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)

    def __repr__(self):
        return f"Meta({list(self.shape)}, {self.dtype})"


class Slot(int):
    """In a call layout: the flat tensor input at this index (the graph entry's k-th name)."""

    __slots__ = ()


def _put(v, flat):
    """An entry of an AtenCall's layout with the entry's tensors ``flat`` put in (a
    function of the module, not a closure: a closure that calls itself is a reference
    cycle per call, Note [Collector pauses])."""
    if type(v) is Slot:
        return flat[v]
    if isinstance(v, list):
        return [_put(x, flat) for x in v]
    return v


class AtenCall:
    """An AtenOp bound to one graph entry's ``layout``: its inputs in schema order, a
    ``Slot`` for a named tensor, None for an absent ``Tensor?``, a Python number for a
    wrapped number, a list of those for a ``Tensor[]``. It takes the entry's named
    tensors (flat, in order) wherever the op takes its schema inputs (``__call__``, ``fn``,
    ``infer_outputs``), and is the op for anything else."""

    __slots__ = ("op", "layout")

    def __init__(self, op, layout):
        self.op = op
        self.layout = layout

    def __getattr__(self, name):
        return getattr(self.op, name)

    def __repr__(self):
        return repr(self.op)

    def structure(self, flat):
        return tuple(_put(v, flat) for v in self.layout)

    def __call__(self, /, *flat, **args):
        return self.op(*self.structure(flat), **args)

    def bind_args(self, args):
        """This call with its args bound (Note [ATen calls bound at load]): a function of
        the entry's tensors alone that does what ``__call__`` does, the schema's
        defaults merged once and the layout's work done at load."""
        # Note [ATen calls bound at load]: what a call would work out from the layout
        # every time is worked out here once: whether the entry's tensors are the
        # schema's inputs as they are (no list, null or number to place), which flat
        # inputs the node has edges to (Note [non-differentiable inputs]) and the args
        # with the schema's defaults. The node recorded, its edges and its outputs are
        # those ``AtenOp.__call__`` makes.
        op = self.op
        layout = self.layout
        full = {**op.defaults, **args}
        forward = op.forward
        keep_out = op.differentiable_outputs if op.multi_output else None
        # (an op class with a call of its own, such as the in-place overloads, keeps it)
        # (and a factory, which makes Tensors from no tensor input: Note [factories make Tensors])
        if (op._list_pos is not None or op.mutated or type(op).__call__ is not AtenOp.__call__
                or not op.schema.tensors
                or not all(type(v) is Slot and v == k for k, v in enumerate(layout))):
            def general(*flat):
                return op(*self.structure(flat), **args)
            return general
        diff = op.differentiable_flat(len(layout))
        keep = None if all(diff) else tuple(diff)
        edges = None if keep is None else [i for i, d in enumerate(keep) if d]
        if keep is None and keep_out is None:
            def plain(*flat):           # (``call`` below, with nothing to keep or drop)
                for x in flat:
                    if type(x) is Tensor:
                        return record(op, flat, full, forward)
                return forward(*flat, **full)
            return plain

        def call(*flat):
            for x in flat:
                if type(x) is Tensor:
                    break
            else:
                return forward(*flat, **full)
            passed = flat if keep is None else [
                x if d or type(x) is not Tensor else x.data for x, d in zip(flat, keep)]
            out = record(op, passed, full, forward)     # (record calls forward(*arrays, **full))
            if edges is not None:
                node = out.grad_fn if type(out) is Tensor else next(
                    (o.grad_fn for o in out if o.grad_fn is not None), None)
                if node is not None:
                    node.next_edges = [node.next_edges[i] for i in edges]
                    if node.input_devices is not None:
                        node.input_devices = [node.input_devices[i] for i in edges]
            if keep_out is not None:
                out = [o if k < len(keep_out) and keep_out[k] or not o.requires_grad else Tensor(o.data)
                       for k, o in enumerate(out)]
            return out
        return call

    def fn(self, /, *flat, **args):
        return self.op.fn(*self.structure(flat), **args)

    def infer_outputs(self, shapes, dtypes, args):
        """Note [ATen infer on stand-ins]: the outputs' shapes and dtypes, computed by the
        op's shape rule without allocating (meta.py's Note [shape rules allocate nothing]):
        elementwise ops broadcast the input shapes and take the dtype the forward makes of
        0-d stand-ins; every other op has a ``meta`` rule called with ``Meta`` inputs
        (view ops run the forward on zero-stride stand-ins). None (unknown) for an op
        without a rule (tests/test_aten_ops.py requires one for every op)."""
        args = {**self.op.defaults, **args}
        meta = self.op.meta
        if meta == ELEMENTWISE:
            from ..shapes import broadcast  # noqa: PLC0415

            shape = broadcast(shapes)
            # Note [stand-ins keep their rank]: a tensor with dims promotes differently from a
            # 0-dim one (promotion.py's Note [wrapped numbers]: uint8 [2, 3] & int64 [] is uint8),
            # so a stand-in has the input's number of dims, each of size one, at zero stride
            with np.errstate(all="ignore"):
                out = self.op.fn(*self.structure([np.broadcast_to(np.zeros((), d), (1,) * len(s))
                                                  for s, d in zip(shapes, dtypes)]), **args)
            return [(shape, np.dtype(out.dtype))]
        if meta is None:
            return None
        return meta(*self.structure([Meta(s, d) for s, d in zip(shapes, dtypes)]), **args)
