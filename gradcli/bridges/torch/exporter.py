"""Trace a PyTorch module into a graph file of ATen ops (spec: "ATen ops").

The steps, in order:

1. ``make_fx`` traces ``loss(functional_call(module, params, buffers, inputs))``
   with the parameters requiring grad. The trace records ATen ops below the
   autograd layer, so each traced op is one op autograd records a node for:
   replaying the trace records PyTorch's own backward graph for the module.
2. One pass over the traced nodes (``_Converter``) re-runs them on the real
   tensors (same seed, so random masks such as dropout's are the trace's),
   marks which values derive from a parameter, a model input or the loss
   target ("dynamic"), folds every other op into a constant tensor captured
   when a dynamic op reads it, keeps in-place ops on activations as traced
   (Note [In-place kept]), turns the other in-place ops into their
   out-of-place overloads and drops what no kept op reads (``detach``, ``empty``,
   ``num_batches_tracked`` updates).
3. The real module (a copy) runs forward and backward once more with the same
   seed: its parameter gradients and the order PyTorch ran its backward nodes
   (a pre-hook on every node) become the ``expect`` section.
4. The written graph is replayed in PyTorch (``gradcli.bridges.torch.compare``): its
   gradients and node order must equal the module's, or the export fails
   (Note [Exported order]).

Names in the file: leaves keep the module's parameter and buffer names
(``fc1.weight``; one the format does not allow, such as an ``nn.Sequential``'s
``0.weight``, gets the prefix ``m.``), the inputs are ``input`` (``input0``,
``input1``, ... for several; a keyword input is named after its keyword,
``input_ids``), the loss target ``target``, folded constants
``const.NODE``; every op's ``id`` and output names are the traced node names
(``addmm``, ``getitem_3``; ``NODE.i`` for a result no traced node reads; ``NODE.op``
where a leaf has the node's name, Note [Op names apart from leaves]).

Note [Projection loss]: without a loss the exported scalar is
``sum_i sum(out_i * R_i)`` over the module's floating outputs ``out_0, out_1, ...``
(an integer output, such as the indices ``torch.max(x, 1)`` returns, is not
projected), where ``R_i`` is
a standard-normal array of ``out_i``'s shape and dtype drawn from
``numpy.random.default_rng(seed + i)``. A random projection (rather than
``sum(out)``) gives every output element a different upstream gradient, so a
wrong index or transpose in any backward formula shows up in the gradients.
The ``R_i`` are leaf tensors ``loss.projection.i`` in ``weights.npz``.

Note [Folding]: a folded op's value is captured when a kept op reads it,
not when it is computed: a constant updated in place later (a mask filled by
``masked_fill_``) is written as the value the reading op saw. A constant read
with two different values (updated between two reads) becomes two tensors,
``const.NAME`` and ``const.NAME.v2``.

Note [Composites]: a traced op gradcli has no kernel for, outside the core
ATen opset, with a PyTorch decomposition, is written as a composite (spec:
"Composite ops"): its decomposition, traced by ``make_fx`` on the op's own
inputs and converted as the module is, becomes the body; PyTorch's node name
for the op (run once with gradients on) names the composite's node, so the
replay (PyTorch runs the op itself) and the order keep the module's node.
Core ops get kernels of their own and are never decomposed; every op that is
still missing is collected and reported in one message.

Note [Data-dependent paths]: control flow on the data (``.item()``, ``if
x.sum() > 0``, ``nonzero``, mixture-of-experts routing) is traced on the real
inputs (``make_fx`` with data-dependent ops allowed): the trace is the path
these inputs took. Ops that return such decisions without a gradient (tagged
``data_dependent_output`` or ``dynamic_output_shape``, with no floating
result) are folded into constants, so the file replays that path; the file
says so (its header and ``x-data-dependent``, each op with its source line),
and validate checks that path. Other inputs may take another path: export
again for them.

Note [In-place kept]: an in-place op gradcli has a kernel for (``relu_``,
``add_``, ``mul_``, ``index_put_``, ``copy_``, ...) whose ``self`` is an
activation (an op's output, or a view of one, through any chain of views and
kept in-place ops) is written as traced: the engine rebases a view's base
through ``CopySlices`` and regenerates the base's other views
(``AsStridedBackward0``) as PyTorch's does, so the written graph replays the
module's own order node for node and the export's order check is the exact
one. The op is needed when its result is read or when the tensor it writes
(or a view of it) is. An in-place op on a leaf (a model input, a buffer, a
folded constant) stays out of place: the file's leaf would change under the
ops that read it before. So does one whose ``self`` comes from an in-place op
written out of place (``transpose_``: its result is a new tensor in the file,
no longer the traced memory); and one without a kernel falls back to the note
below.

Note [In-place on views]: an in-place op without a kernel on a view of an activation
(``out[:, :k].relu_()``, an in-place dropout after ``flatten``) makes
PyTorch's engine rebase the view: the base's node becomes ``CopySlices``
(wrapping the op's node) and the view's node ``AsStridedBackward0``. The file
holds no in-place op, so the export writes the op out of place on the view;
PyTorch's replay of the file then runs the op's node and the view's own nodes
(``ViewBackward0``, ``SliceBackward0``) instead. The export accepts exactly
that difference: the gradients must agree, and the two orders must agree
once view nodes are left out of both and each ``CopySlices`` stands for the
replayed op's node. ``expect.order`` is the order of the written graph. An
in-place op on a view whose base (or another view of it) is read afterwards
is still refused: writing it needs ``slice_scatter``/``as_strided_scatter``
kernels and PyTorch's CopySlices in the engine.

Note [Exported order]: ``expect.order`` is the order PyTorch runs the nodes of
the written graph. It equals the module's own order except where the spec
says an in-place op is written out of place and PyTorch names the two
differently (``transpose_`` records ``TransposeBackward1``, ``transpose.int``
``TransposeBackward0``); and where eager ``reshape`` records ``_reshape_alias``
(``ReshapeAliasBackward0``) while the trace records ``view``
(``ViewBackward0``: ``reshape`` takes the ``view`` path for tensors under a
Python dispatch mode). The export checks that the two orders differ only
there (same position, same op) and that the gradients agree.
"""
from __future__ import annotations

import copy
import operator
import os
import re

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from .errors import CROSS_ENTROPY, ExportError, ExportMismatch
from . import prims
from . import schema as S
from ..graphfile import ExportedGraph, c_array
from .detach_marks import LEAF as LEAF_MARK, MARK as DETACH_MARK, NO_GRAD as NO_GRAD_MARK
from .detach_marks import DetachMarks, NoGradMarks
from . import functions as F
from .reference import attach_reference, attach_rounding, reference_note
from .versions import differs

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
# Ops whose result depends on their inputs' shapes and dtypes only, never their values.
METADATA_ONLY = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
                 "randint_like", "new_empty", "new_zeros", "new_ones", "new_full",
                 "new_empty_strided", "empty_strided"}
DETACH = {"detach"}
# Note [detach traced as alias]: from torch 2.14 (versions.py, "make_fx_detach_as_alias")
# make_fx records `x.detach()` as aten.alias, and its nodes carry no requires_grad to tell
# a detach from a plain alias. In the module's own trace an alias is then taken as the
# detach it was (written as aten.detach, a gradient stop), and the exported graph's
# backward order is still checked against the module's real backward, so a plain alias
# taken for a detach is a one-line ExportMismatch, never a silently wrong file. Where the
# release lets it, the trace marks the nodes of the module's detach calls (detach_marks.py):
# an alias so marked is a detach, any other (a slice over a whole dim) a plain alias.
DETACH_FROM_2_14 = {"detach", "alias"}
# (node in the replay, node in the module's own run) for the same op: see Note [Exported order].
EAGER_RENAMES = {("ViewBackward0", "ReshapeAliasBackward0")}
_TORCH_DIR = os.path.dirname(torch.__file__)
_GRADCLI_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def from_module(module, example_inputs, *, loss=None, target=None, dtype=None, train=True,
                seed=0, name=None, keyword_inputs=None) -> ExportedGraph:
    """Trace ``module`` on ``example_inputs``; see the module docstring.

    ``loss``: None or ``"projection"`` (Note [Projection loss]), ``"cross_entropy"``
    (needs ``target``, integer class labels), or a callable ``loss(output)`` /
    ``loss(output, target)`` made of torch operations. ``dtype``: cast the
    module and its floating inputs (``torch.float64`` or ``"float64"``).
    ``train``: the module's mode. ``keyword_inputs``: ``{name: array}`` passed by
    keyword (``input_ids``, ``attention_mask``), leaf tensors named after their
    keyword. Raises ExportError for what it cannot express.

    >>> graph = from_module(torch.nn.Linear(3, 2), (torch.randn(4, 3),))  # doctest: +SKIP
    """
    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"expected a torch.nn.Module, got {type(module).__name__}")
    dtype = _dtype(dtype)
    work = copy.deepcopy(module)
    if dtype is not None:
        work = work.to(dtype)
    work.train(bool(train))
    inputs = _inputs(example_inputs, dtype)
    kw = _keyword_inputs(keyword_inputs, dtype)
    for what, t in [*work.named_parameters(), *work.named_buffers(),
                    *((f"input {i}", x) for i, x in enumerate(inputs)), *kw.items()]:
        if t.dtype in _UNWRITABLE:
            raise ExportError(f"{what} is {_UNWRITABLE[t.dtype]}, which graph files do not hold "
                              "(float16, float32, float64): export with --dtype float32 or float64")
    target_t = None if target is None else torch.as_tensor(np.asarray(target) if not isinstance(
        target, torch.Tensor) else target)
    loss_fn, extras = _loss(work, inputs, kw, loss, target_t, seed)
    reference = copy.deepcopy(work)             # runs the real backward (step 3)

    params = dict(work.named_parameters())
    buffers0 = {k: b.detach().clone() for k, b in work.named_buffers()}
    names = _leaf_names(params, buffers0, inputs, kw, extras)

    marks = DetachMarks()                       # Note [detach traced as alias]

    def traced(params, buffers, inputs, kw, extras):
        with marks, NoGradMarks():              # Note [Ops run with grad mode off]
            out = torch.func.functional_call(work, (params, buffers), inputs, kw)
            return loss_fn(out, extras)

    python_functions = F.PythonFunctions()      # Note [Python Functions as composites]
    _seed(seed)
    with python_functions:
        gm = _call_module(lambda: make_fx(traced, record_stack_traces=True,
                                          _error_on_data_dependent_ops=False)(
            params, {k: v.clone() for k, v in buffers0.items()}, inputs, kw, extras))

    leaf_values = pytree.tree_leaves((params, buffers0, inputs, kw, extras))
    kinds = _leaf_kinds(params, buffers0, inputs, kw, extras)
    conv = _Converter(gm, names, leaf_values, kinds, seed)
    conv.python_functions = python_functions
    if differs("make_fx_detach_as_alias", torch.__version__):
        conv.detach_ops = DETACH_FROM_2_14      # Note [detach traced as alias]
    conv.detach_marked = marks.working
    doc_ops, tensors, arrays, root = conv.run()

    _seed(seed)
    grads, order, functions = _call_module(lambda: _reference_backward(reference, inputs, kw,
                                                                       extras, loss_fn),
                                           "running the backward of")
    functions = {k: n for k, n in functions.items() if k not in conv.function_nodes}
    if functions:
        raise ExportError(_python_functions_message(functions))
    grad_names = {f"param:{k}": v for k, v in grads.items()}
    expect_grads = {}
    for leaf, kind_name in zip(names, kinds):
        if kind_name in grad_names and leaf in tensors:
            expect_grads[leaf] = grad_names[kind_name].detach().cpu().numpy(force=True)
    graph = ExportedGraph.build(
        name=name or type(module).__name__, tensors=tensors, arrays=arrays, ops=doc_ops,
        root=root, grads=expect_grads, order=order,
        floating=str(_float_dtype(inputs, params)).removeprefix("torch."))
    _check_replay(graph, expect_grads, order, conv.inplace_on_views)
    attach_reference(graph)                     # float64 gradients for the float32 verdict
    attach_rounding(graph)                      # PyTorch's own float64 spread, for float64
    graph.header = _header(module, inputs, kw, params, train, loss, target_t is not None, seed)
    if conv.data_dependent:
        graph.document["x-data-dependent"] = list(dict.fromkeys(conv.data_dependent))
        graph.header += ("\ndata-dependent: this graph is the path these inputs took; "
                         f"{len(conv.data_dependent)} decision(s) the data made are fixed "
                         "(x-data-dependent lists them); other inputs may need another export.")
    graph.header += reference_note(graph)
    return graph


def _header(module, inputs, kw, params, train, loss, has_target, seed):
    floating = str(_float_dtype(inputs, params)).removeprefix("torch.")
    shapes = ", ".join(["x".join(map(str, x.shape)) or "scalar" for x in inputs] +
                       [f"{k}={'x'.join(map(str, x.shape)) or 'scalar'}" for k, x in kw.items()])
    if callable(loss):
        loss_text = f"loss: {getattr(loss, '__name__', 'a callable')}(output"
        loss_text += ", target)" if has_target else ")"
    elif loss == CROSS_ENTROPY:
        loss_text = "loss: cross_entropy(output, target)"
    else:
        loss_text = ("loss: sum_i sum(out_i * R_i), R_i = loss.projection.i: standard normal from "
                     f"numpy.random.default_rng({seed} + i)")
    return (f"Exported from {type(module).__name__} by gradcli export (torch "
            f"{torch.__version__}): {'train' if train else 'eval'} mode, {floating}, "
            f"inputs {shapes}, seed {seed}.\n{loss_text}.\n"
            "expect: PyTorch's gradients (weights.npz, keys grad:NAME) and the order PyTorch "
            "ran the backward nodes.")


def _call_module(run, what="tracing"):
    """``run()``, with the module's own exceptions as a one-line ExportError."""
    try:
        return run()
    except ExportError:
        raise
    except Exception as exc:  # noqa: BLE001 - the module's own failure, reported in one line
        text = str(exc).strip()
        raise ExportError(f"{what} the module failed: {type(exc).__name__}: "
                          f"{text.splitlines()[0] if text else ''}") from None


# -- inputs, loss, names ---------------------------------------------------------------------
def _dtype(dtype):
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ExportError(f"dtype must be a floating dtype such as float64, not {dtype!r}")
    return value


def _inputs(example_inputs, dtype):
    if isinstance(example_inputs, (torch.Tensor, np.ndarray)):
        example_inputs = (example_inputs,)
    out = []
    for x in example_inputs:
        t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
        t = t.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        out.append(t)
    return tuple(out)


def _keyword_inputs(keyword_inputs, dtype):
    if not keyword_inputs:
        return {}
    if not isinstance(keyword_inputs, dict) or not all(
            isinstance(k, str) and k.isidentifier() for k in keyword_inputs):
        raise ExportError("keyword inputs must be a mapping from argument names to arrays")
    names = list(keyword_inputs)
    return dict(zip(names, _inputs([keyword_inputs[k] for k in names], dtype)))


def _float_dtype(inputs, params):
    for t in list(params.values()) + list(inputs):
        if t.is_floating_point():
            return t.dtype
    return torch.get_default_dtype()


def _loss(work, inputs, kw, loss, target, seed):
    """(loss_fn(out, extras), extras): extras are the loss's own leaf tensors."""
    if callable(loss):
        if target is None:
            return (lambda out, extras: loss(out)), {}
        return (lambda out, extras: loss(out, extras["target"])), {"target": target}
    if loss == CROSS_ENTROPY:
        if target is None:
            raise ExportError("--loss cross_entropy needs a target (class labels)")
        if target.is_floating_point():
            raise ExportError("the cross_entropy target must hold integer class labels")

        def ce(out, extras):
            if not isinstance(out, torch.Tensor):
                raise ExportError("cross_entropy needs a module that returns one tensor")
            return torch.nn.functional.cross_entropy(out, extras["target"])

        return ce, {"target": target.to(torch.int64)}
    if loss not in (None, "projection"):
        raise ExportError(f"unknown loss {loss!r} (expected projection or cross_entropy)")
    with torch.no_grad():                       # only the output shapes are needed here
        probe = _call_module(lambda: copy.deepcopy(work)(
            *(x.clone() for x in inputs), **{k: v.clone() for k, v in kw.items()}), "running")
    outs = [o for o in pytree.tree_leaves(probe) if isinstance(o, torch.Tensor)]
    # one R per floating output (none for indices): the traced function's placeholders are
    # the pytree leaves of its arguments, and torch's pytree counts a None as one
    floating = [o for o in outs if o.is_floating_point()]
    rs = [torch.as_tensor(np.random.default_rng(seed + i).standard_normal(tuple(o.shape))
                          ).to(o.dtype) for i, o in enumerate(floating)]
    if not rs:
        raise ExportError("the module returns no floating-point tensor to project into a loss")

    def projection(out, extras):
        total = None
        leaves = [o for o in pytree.tree_leaves(out)
                  if isinstance(o, torch.Tensor) and o.is_floating_point()]
        for o, r in zip(leaves, extras["projection"]):
            term = (o * r).sum()
            total = term if total is None else total + term
        return total

    return projection, {"projection": rs}


def _leaf_kinds(params, buffers, inputs, kw, extras):
    kinds = ([f"param:{k}" for k in params] + [f"buffer:{k}" for k in buffers] +
             [f"input:{i}" for i in range(len(inputs))] + [f"input:{k}" for k in kw])
    if "projection" in extras:
        kinds += [f"projection:{i}" for i in range(len(extras["projection"]))]
    if "target" in extras:
        kinds.append("target")
    return kinds


def _leaf_names(params, buffers, inputs, kw, extras):
    """Graph names of the traced function's placeholders, in pytree order."""
    used = set()

    def unique(base):
        base = base if NAME_RE.match(base) else "m." + base
        name, i = base, 1
        while name in used:
            i += 1
            name = f"{base}.{i}"
        used.add(name)
        return name

    names = [unique(k) for k in params] + [unique(k) for k in buffers]
    names += [unique("input" if len(inputs) == 1 else f"input{i}") for i in range(len(inputs))]
    names += [unique(k) for k in kw]
    if "projection" in extras:
        names += [unique(f"loss.projection.{i}") for i in range(len(extras["projection"]))]
    if "target" in extras:
        names.append(unique("target"))
    return names


# -- step 2: the traced nodes to graph ops ----------------------------------------------------
def _source_line(node) -> str:
    """``file:line (code)`` of the module source that produced ``node``."""
    trace = node.meta.get("stack_trace") if node is not None else None
    if not trace:
        return "at an unknown line of the module (no stack trace recorded)"
    frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)', trace)
    if not frames:
        return "at an unknown line of the module"
    user = [f for f in frames if not f[0].startswith((_TORCH_DIR, _GRADCLI_DIR))]
    path, line, code = (user or frames)[-1]
    return f"at {path}:{line} ({code.strip()})"


def _is_random(node) -> bool:
    """A random op (dropout's ``dropout_p: 0.0`` in attention kernels draws nothing)."""
    if torch.Tag.nondeterministic_seeded not in node.target.tags:
        return False
    bound = dict((a.name, v) for a, v in S.bind(node.target._schema, node.args, node.kwargs))
    if "dropout_p" in bound and bound["dropout_p"] in (0, 0.0, S.MISSING):
        return False
    # rrelu_with_noise draws only in training (its schema's default is training=False):
    # in eval it is leaky_relu with the mean slope
    return not ("training" in bound and bound["training"] in (False, S.MISSING))


def _data_dependent(node, value) -> bool:
    """Note [Data-dependent paths]: an op whose result is a decision the data made
    (``.item()``, ``nonzero``, ``masked_select`` of indices...) and carries no gradient."""
    tags = node.target.tags
    if torch.Tag.data_dependent_output not in tags and torch.Tag.dynamic_output_shape not in tags:
        return False
    return not any(isinstance(v, torch.Tensor) and v.is_floating_point()
                   for v in pytree.tree_leaves(value))


def _fail(node, message):
    raise ExportError(f"cannot export {node.target if node is not None else 'the module'}: "
                      f"{message} {_source_line(node)}")


# dtypes a computation may have in a graph file (bool and the integers besides, as data)
_UNWRITABLE = {torch.bfloat16: "bfloat16"}


def _check_file_dtype(node, value):
    """Refuse, in one line, an op that computes in a floating dtype graph files do not hold
    (NumPy has no bfloat16: the export would fail converting it)."""
    for t in pytree.tree_leaves(value):
        name = _UNWRITABLE.get(getattr(t, "dtype", None))
        if name is not None:
            _fail(node, f"it computes in {name}, which graph files do not hold (float16, "
                        "float32, float64): export with --dtype float32 or float64")


def _metadata_only(target) -> bool:
    """Whether a traced call makes a tensor from its inputs' metadata alone (METADATA_ONLY)."""
    return isinstance(target, torch._ops.OpOverload) and \
        target._schema.name.split("::", 1)[1] in METADATA_ONLY


def _keeps_mutation(node) -> bool:
    """Whether traced op ``node`` updates an input besides its result and gradcli's kernel
    makes that update too (batch norm's running statistics, rrelu's noise): then the file
    keeps the op as traced (spec). Asked of gradcli's op (the inputs it declares it writes)."""
    from ...ops import OPS  # noqa: PLC0415

    op = OPS.get(S.op_name(node.target))
    return bool(getattr(op, "mutated", ()))


def _has_kernel(name) -> bool:
    """Whether gradcli runs ATen op ``name`` with a kernel of its own."""
    from ...ops import OPS  # noqa: PLC0415

    op = OPS.get(name)
    return op is not None and op.public and op.supported


def _reads_complex(name) -> bool:
    """Whether ATen op ``name`` reads a complex tensor (as its real view, the op says)."""
    from ...ops import OPS  # noqa: PLC0415

    return bool(getattr(OPS.get(name), "reads_complex", False))


def _decompositions():
    """PyTorch's decompositions of the NON-core ATen ops gradcli has no kernel for
    (Note [Composites]): core ops get kernels of their own, never a composite."""
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import core_aten_decompositions, decomposition_table

        table = dict(decomposition_table)
        table.update(core_aten_decompositions())
        _DECOMPS = {op: fn for op, fn in table.items()
                    if isinstance(op, torch._ops.OpOverload) and torch.Tag.core not in op.tags
                    and not _has_kernel(S.op_name(op))}
    return _DECOMPS


_DECOMPS = None


def _missing_message(missing) -> str:
    """All the ops an export lacks, in one message (core ops first: they need kernels)."""
    core = [n for n in missing if missing[n][0]]
    other = [n for n in missing if not missing[n][0]]
    parts = []
    if core:
        parts.append(f"{len(core)} core ATen op{'s' if len(core) > 1 else ''} without a kernel: "
                     + "; ".join(f"{n} ({missing[n][1]})" for n in core))
    if other:
        parts.append(f"{len(other)} op{'s' if len(other) > 1 else ''} without a kernel nor a "
                     "PyTorch decomposition into ops gradcli has: "
                     + "; ".join(f"{n} ({missing[n][1]})" for n in other))
    return "cannot export: gradcli has no op for " + " | ".join(parts) + \
        " (see `gradcli ops` for the ops it runs)"


class _Converter:
    def __init__(self, gm, leaf_names, leaf_values, leaf_kinds, seed, const_prefix="const."):
        self.gm = gm
        self.const_prefix = const_prefix   # a composite's body names its constants apart
        self.missing = {}           # op name -> (is core, source line): all of them, one message
        self.outputs = []           # the traced function's result nodes
        self.stops = set()          # detach nodes that stop a gradient
        self.detach_ops = DETACH    # the traced ops that are a detach (Note [detach traced as alias])
        self.detach_marked = False  # the trace marks the module's detach calls (detach_marks.py)
        self.data_dependent = []    # Note [Data-dependent paths]: what the inputs decided
        self.inplace_on_views = 0   # in-place ops on views, written out of place
        self.kept_inplace = set()   # in-place ops written as traced (Note [In-place kept])
        self.made_leaves = set()    # Note [Leaves made in the forward]
        self.nodes = list(gm.graph.nodes)
        self.leaf_names = leaf_names
        self.reserved = set(leaf_names)    # Note [Op names apart from leaves]
        self.leaf_values = leaf_values
        # Buffers and the projection count as constants (spec); they stay leaf tensors.
        self.leaf_dynamic = [not k.startswith(("buffer:", "projection:")) for k in leaf_kinds]
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.params = {n: leaf for n, leaf, k in zip(placeholders, leaf_names, leaf_kinds)
                       if k.startswith("param:")}   # placeholder -> its parameter's leaf name
        self.seed = seed
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.const_at = {}          # (constant node, reading op) -> constant tensor's name
        self.consts_used = set()    # constant tensors that written ops read
        self.python_functions = None    # Note [Python Functions as composites] (functions.py)
        self.function_nodes = set()     # the node names of the Functions written
        self.no_grad = set()        # ops traced with grad mode off (Note [Ops run with grad mode off])

    def run(self):
        torch.manual_seed(self.seed)
        env, dynamic, requires = {}, set(), set()
        names = {}                  # node -> graph name (leaves and single-result ops)
        tensors, arrays = {}, {}
        const_names = {}            # node -> [(name, captured value)]
        leaf_iter = iter(zip(self.leaf_names, self.leaf_values, self.leaf_dynamic))
        pending = []                # (node, value) of kept (dynamic) ops, in traced order
        root = None
        fresh = self._fresh_roots()     # Note [Fresh memory written in place]
        with torch.no_grad():
            for node in self.nodes:
                if node.op == "placeholder":
                    leaf, value, is_dynamic = next(leaf_iter)
                    # a copy: ops such as native_batch_norm update their inputs in place, and
                    # the file must hold the values before the forward
                    env[node] = value.detach().clone()
                    names[node] = leaf
                    if is_dynamic:
                        dynamic.add(node)
                    if value.requires_grad:
                        requires.add(node)
                    continue
                if node.op == "get_attr":
                    env[node] = getattr(self.gm, node.target)
                    continue
                if node.op == "output":
                    self.outputs = [n for n in pytree.tree_leaves(node.args)
                                    if isinstance(n, torch.fx.Node)]
                    root = self.outputs[0] if self.outputs else None
                    continue
                args = torch.fx.node.map_arg(node.args, env.__getitem__)
                kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                before = self._before_mutation(node, env, dynamic)
                env[node] = node.target(*args, **kwargs)
                inputs = node.all_input_nodes
                if node.target is operator.getitem:
                    if inputs[0] in dynamic:
                        dynamic.add(node)
                    if inputs[0] in requires:
                        requires.add(node)
                    continue
                if not isinstance(node.target, torch._ops.OpOverload):
                    if any(i in dynamic for i in inputs):
                        _fail(node, "it is not an ATen operator")
                    continue
                base = node.target._schema.name.split("::", 1)[1]
                if node.meta.get(LEAF_MARK) and not any(i in requires for i in inputs):
                    self.made_leaves.add(node)      # Note [Leaves made in the forward]
                    dynamic.add(node)
                    requires.add(node)
                    continue
                if (base in METADATA_ONLY or not any(i in dynamic for i in inputs)) \
                        and node not in fresh:
                    continue                        # folded (or dropped when nothing reads it)
                if _data_dependent(node, env[node]):
                    self.data_dependent.append(f"{node.target} {_source_line(node)}")
                    continue                        # Note [Data-dependent paths]: folded
                dynamic.add(node)
                self._check_complex(node, env, dynamic)
                _check_file_dtype(node, env[node])
                if any(i in requires for i in inputs):
                    if base in self.detach_ops and (base == "detach" or not self.detach_marked
                                                    or node.meta.get(DETACH_MARK, False)):
                        self.stops.add(node)        # written as itself (Note [detach in graphs])
                    elif node.meta.get(NO_GRAD_MARK):
                        # Note [Ops run with grad mode off]: no gradient flows through it;
                        # an in-place op leaves its target's history (and need) as it was
                        self.no_grad.add(node)
                        target = node.args[0] if node.args else None
                        if S.mutated_arguments(node.target._schema) and target in requires:
                            requires.add(node)
                    else:
                        requires.add(node)
                if _is_random(node):
                    _fail(node, "a random op on data the loss depends on has no fixed result")
                if S.mutated_arguments(node.target._schema) and not _keeps_mutation(node):
                    if self._keeps_inplace(node, dynamic):
                        self.kept_inplace.add(node)     # Note [In-place kept]
                    else:
                        self._check_no_parameter_write(node)
                        self._check_no_alias_reader(node)
                        target = node.args[0]
                        if isinstance(getattr(target, "target", None), torch._ops.OpOverload) \
                                and S.is_view(target.target._schema):
                            self.inplace_on_views += 1  # Note [In-place on views]
                for i in inputs:                    # capture constants as this op reads them
                    if (i not in dynamic or i in self.made_leaves) and i.op != "placeholder":
                        self.const_at[(i, node)] = self._capture(i, before.get(i, env[i]),
                                                                 const_names, tensors, arrays)
                pending.append((node, env[node]))
        if root is None or root not in dynamic:
            raise ExportError("the loss does not depend on any parameter, input or target")
        needed = self._needed([o for o in self.outputs if o in dynamic], dynamic)
        ops = []
        leaves_used = set()
        self.env, self.tensors, self.arrays = env, tensors, arrays
        for node, value in pending:
            if node not in needed:
                continue
            entry = self._op(node, value, names, const_names, dynamic, requires, leaves_used)
            if node in self.no_grad:
                ops.extend(self._no_grad_entries(node, entry, names))
            else:
                ops.append(entry)
        if self.missing and self.const_prefix == "const.":
            raise ExportError(_missing_message(self.missing))
        self.names = names
        for node in self.nodes:
            if node.op == "placeholder" and node in leaves_used:
                leaf = names[node]
                value = self.leaf_values[self.leaf_names.index(leaf)]
                tensors[leaf] = {"requires_grad": bool(value.requires_grad)}
                arrays[leaf] = c_array(value.detach().cpu().numpy())
        captured = {name for seen in const_names.values() for name, _ in seen}
        for name in captured - self.consts_used:
            del tensors[name], arrays[name]         # read only by ops the loss does not need
        ordered = {}
        for node in self.nodes:                 # tensors section: leaves first, then constants
            if node.op == "placeholder" and names[node] in tensors:
                ordered[names[node]] = tensors[names[node]]
        for k, v in tensors.items():
            ordered.setdefault(k, v)
        return ops, ordered, arrays, self._name_of(root, names)

    def _check_complex(self, node, env, dynamic):
        """Note [complex as its real view] (gradcli/ops/aten_kernels/fft.py): gradcli holds a
        complex tensor as its real view; only the ops that say they read one may, any other
        would compute on real and imaginary parts as if they were real numbers. A complex
        leaf or constant cannot be written at all (graph files hold real arrays)."""
        reads = [i for i in node.all_input_nodes if isinstance(env.get(i), torch.Tensor) and env[i].is_complex()]
        if reads and not _reads_complex(S.op_name(node.target)):
            _fail(node, "it computes on a complex tensor: gradcli holds complex values as their real view "
                        "(torch.view_as_real), which only the real FFTs' inverse and view_as_real read; "
                        "write the computation on torch.view_as_real(...) instead")
        if any(i.op == "placeholder" or i not in dynamic for i in reads):
            _fail(node, "it reads a complex parameter, input or constant (graph files hold real arrays; "
                        "keep it as torch.view_as_real(...) of itself)")

    @staticmethod
    def _before_mutation(node, env, dynamic):
        """{input node: a copy of its value} for the constant inputs an in-place op is about
        to write into. Note [Constants written in place]: the re-run mutates the constant
        (``final = zeros_like(x)`` then ``final.index_add_(0, idx, y)`` per expert, as a
        mixture-of-experts layer sums its experts); the op reads it as it was before, so
        that is the value the file captures, not the one the op leaves behind."""
        target = node.target
        if not isinstance(target, torch._ops.OpOverload) or not S.mutated_arguments(target._schema):
            return {}
        return {i: env[i].clone() for i in node.all_input_nodes
                if i not in dynamic and i.op != "placeholder" and isinstance(env.get(i), torch.Tensor)}

    def _capture(self, node, value, const_names, tensors, arrays):
        """The name of a constant tensor holding ``value`` as it is now (Note [Folding])."""
        if not isinstance(value, torch.Tensor):
            return None
        seen = const_names.setdefault(node, [])
        for name, captured in seen:
            if captured.shape == value.shape and captured.dtype == value.dtype and \
                    torch.equal(captured, value):
                return name
        base = f"{self.const_prefix}{node.name}"
        name = base if not seen else f"{base}.v{len(seen) + 1}"
        captured = value.detach().clone()
        seen.append((name, captured))
        tensors[name] = {"requires_grad": True} if node in self.made_leaves else {}
        arrays[name] = c_array(captured.cpu().numpy())
        return name

    def _needed(self, roots, dynamic):
        needed, stack = set(), list(roots)
        while True:
            self._walk_needed(needed, stack, dynamic)
            # Note [In-place kept]: an in-place op whose result nothing reads is still
            # needed when the tensor it writes (or a view of it) is
            stack = [k for k in self.kept_inplace if k not in needed and
                     any(m in needed for m in self._alias_group(k.args[0], writes=True))]
            if not stack:
                return needed

    def _walk_needed(self, needed, stack, dynamic):
        while stack:
            node = stack.pop()
            if node in needed or node not in dynamic or node in self.made_leaves:
                continue
            needed.add(node)
            for i in node.all_input_nodes:
                if i.target is operator.getitem and i.op == "call_function":
                    needed.add(i)
                    stack.append(i.all_input_nodes[0])
                else:
                    stack.append(i)

    def _name_of(self, node, names, reader=None):
        if (node, reader) in self.const_at:
            self.consts_used.add(self.const_at[(node, reader)])
            return self.const_at[(node, reader)]
        if node in names:
            return names[node]
        return self._out(node)          # a getitem: named by its op's ``outputs``

    # Note [Op names apart from leaves]: an op's outputs are named after its traced node
    # (``t``, ``add``, ``sub_1``) and leaves after the module's parameters and buffers,
    # which a user may name alike (a buffer ``t`` beside the ``t`` of a linear layer's
    # weight): such an output is named ``NODE.op`` instead.
    def _out(self, node):
        return f"{node.name}.op" if node.name in self.reserved else node.name

    def _op(self, node, value, names, const_names, dynamic, requires, leaves_used):
        overload = node.target
        if overload.namespace == F.OP_NAMESPACE:
            return self._function(node, value, names, const_names, requires, leaves_used)
        schema = overload._schema
        base = schema.name.split("::", 1)[1]
        mutated = S.mutated_arguments(schema)
        if base in self.detach_ops:
            # Note [detach in graphs] (gradcli/ops/aten/pointwise.py): on the gradient
            # path it is written as a detach, stopping the gradient as in PyTorch
            overload = torch.ops.aten.detach.default if node in self.stops else torch.ops.aten.alias.default
            schema = overload._schema
        elif mutated and not _keeps_mutation(node) and node not in self.kept_inplace:
            if mutated != [0]:
                _fail(node, "it updates an argument other than its first in place")
            functional = S.out_of_place(overload)
            if functional is None:
                _fail(node, "in-place op without an out-of-place overload")
            overload, schema = functional, functional._schema
        entry = {"op": S.op_name(overload)}
        inputs, args = [], {}
        for arg, val in S.bind(schema, node.args, node.kwargs):
            kind = S.tensor_kind(arg)
            if kind is not None:
                inputs.append(self._input(val, names, const_names, leaves_used, node))
            elif val is not S.MISSING and not S.is_default(arg, val):
                if isinstance(val, torch.fx.Node):
                    _fail(node, f"argument {arg.name} is computed from the data")
                try:
                    args[arg.name] = S.write_value(val)
                except TypeError as exc:
                    _fail(node, f"cannot write {exc} for argument {arg.name}")
        entry["inputs"] = inputs
        if isinstance(value, (tuple, list)):
            outs = [f"{node.name}.{i}" for i in range(len(value))]
            for user in node.users:
                if user.target is operator.getitem:
                    outs[user.args[1]] = self._out(user)
            for i, v in enumerate(value):
                if not isinstance(v, torch.Tensor):
                    _fail(node, "it returns a non-tensor value")
            entry["outputs"] = outs
        elif isinstance(value, torch.Tensor):
            entry["output"] = self._out(node)
        else:
            _fail(node, f"it returns a {type(value).__name__}, not a tensor, from data the loss "
                        "depends on")
        if args:
            entry["args"] = args
        entry["id"] = node.name
        names[node] = entry.get("output", node.name)
        if not _has_kernel(entry["op"]):
            self._composite(node, overload, entry, names)
        return entry

    def _composite(self, node, overload, entry, names):
        """Give ``entry`` (an op gradcli has no kernel for) a composite body from
        PyTorch's decomposition, or note it as missing (Note [Composites])."""
        is_core = torch.Tag.core in overload.tags
        decomp = None if is_core else _decompositions().get(overload)
        if decomp is None:
            self.missing.setdefault(entry["op"], (is_core, _source_line(node)))
            return
        tensors, leaf_names = [], []

        def collect(v):
            if isinstance(v, torch.fx.Node):
                tensors.append(self.env[v])
                leaf_names.append(self._name_of(v, names, node))
                return _Slot(len(tensors) - 1)
            if isinstance(v, (list, tuple)):
                return type(v)(collect(x) for x in v)
            return v

        args, kwargs = collect(tuple(node.args)), {k: collect(v) for k, v in node.kwargs.items()}

        def call(*ts):
            def put(v):
                if isinstance(v, _Slot):
                    return ts[v.index]
                if isinstance(v, (list, tuple)):
                    return type(v)(put(x) for x in v)
                return v
            return overload(*put(args), **{k: put(v) for k, v in kwargs.items()})

        node_name = _backward_node_name(call, tensors)
        if node_name is None:
            self.missing.setdefault(entry["op"], (False, _source_line(node) +
                                                  " (PyTorch records no backward node for it)"))
            return
        torch.manual_seed(self.seed)
        table = {**_decompositions(), **prims.decompositions()}    # Note [Prims as ATen]
        try:
            inner = make_fx(call, decomposition_table=table)(*tensors)
        except prims.PrimLoop as loop:
            self.missing.setdefault(S.op_name(loop.prim), (False, f"in the decomposition of "
                                    f"{entry['op']} {_source_line(node)}"))
            return
        kinds = [f"input:{k}" for k in range(len(tensors))]
        sub = _Converter(inner, leaf_names, tensors, kinds, self.seed,
                         const_prefix=f"const.{node.name}.")
        try:
            body, sub_tensors, sub_arrays, _ = sub.run()
        except ExportError as exc:      # a random op, data-dependent argument, ...
            self.missing.setdefault(entry["op"], (False, f"{_source_line(node)}: its "
                                                  f"decomposition: {exc}"))
            return
        for name, (core, where) in sub.missing.items():
            self.missing.setdefault(name, (core, f"in the decomposition of {entry['op']} "
                                           f"{_source_line(node)}"))
        if sub.missing:
            return
        outer = entry.get("outputs", [entry.get("output")])
        inner_out = [sub._name_of(o, sub.names) for o in sub.outputs]
        if len(inner_out) != len(outer) or any(o.op == "placeholder" or o not in sub.names
                                               for o in sub.outputs):
            self.missing.setdefault(entry["op"], (False, _source_line(node) + " (its "
                                                  "decomposition returns an input or a constant)"))
            return
        body = _body_names(body, dict(zip(inner_out, outer)), set(outer) | set(leaf_names))[0]
        constants = [n for n in sub_tensors if n.startswith(sub.const_prefix)]
        for n in constants:
            self.tensors[n] = sub_tensors[n]
            self.arrays[n] = sub_arrays[n]
            self.consts_used.add(n)
        entry["composite"] = {"node": node_name, **({"constants": constants} if constants else {}),
                              "body": body}

    def _function(self, node, value, names, const_names, requires, leaves_used):
        """The ``function.CLASS`` composite of a traced Python Function application
        (Note [Python Functions as composites]; functions.py traces its two bodies)."""
        applied = self.python_functions.applied[F.key_of(node)]
        cls = applied.cls.__name__
        arg_nodes = list(node.args[0])
        inputs = [self._input(v, names, const_names, leaves_used, node) for v in arg_nodes]
        tensors = [self.env[v] for v in arg_nodes]
        needs = [v in requires and t.is_floating_point() for v, t in zip(arg_nodes, tensors)]
        outs = [f"{node.name}.{i}" for i in range(len(value))]
        for user in node.users:
            if user.target is operator.getitem:
                outs[user.args[1]] = self._out(user)
        names[node] = node.name
        entry = {"op": f"function.{cls}", "inputs": inputs, "outputs": outs, "id": node.name}
        node_name, differentiable = F.node_name_and_outputs(applied, tensors, needs)
        if node_name is None:
            _fail(node, f"the Function {cls} records no backward node")
        prefix = f"const.{node.name}."
        try:
            body, consts, body_out = self._traced_body(
                F.trace_forward(applied, tensors, self.seed), inputs, tensors, prefix)
            gm, _ = F.trace_backward(applied, tensors, needs, differentiable, self.seed)
            grads = [f"{o}.grad" if d else None for o, d in zip(outs, differentiable)]
            backward, b_consts, b_out = self._traced_body(
                gm, inputs + [g or f"{o}.grad" for g, o in zip(grads, outs)],
                tensors + [torch.ones_like(v) for v in value], prefix + "backward.")
        except ExportError as exc:
            _fail(node, f"its Python Function {cls}: {exc}")
        if len(body_out) != len(outs) or any(o in inputs for o in body_out):
            _fail(node, f"the Function {cls} returns one of its inputs as it is")
        body = _body_names(body, dict(zip(body_out, outs)), set(outs) | set(inputs))[0]
        backward, rename = _body_names(backward, {}, set(inputs) | set(outs))
        it, grad_of = iter(b_out), []
        for need in needs:              # b_out: one result per input that needs a gradient
            g = next(it) if need else None
            grad_of.append(None if g is None else rename.get(g, g))
        entry["composite"] = {
            "node": node_name, **({"constants": consts + b_consts} if consts + b_consts else {}),
            "body": body,
            "backward": {"grads": grads, "body": backward, "outputs": grad_of}}
        self.function_nodes.add(node_name)
        return entry

    def _traced_body(self, gm, leaf_names, tensors, prefix):
        """(body ops, constants, the names of the trace's results; None for a result
        that is None) of a Function's traced ``gm``, whose placeholders are
        ``leaf_names`` holding ``tensors``."""
        kinds = [f"input:{k}" for k in range(len(tensors))]
        sub = _Converter(gm, leaf_names, tensors, kinds, self.seed, const_prefix=prefix)
        sub.python_functions = self.python_functions
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        results = list(pytree.tree_flatten(out_node.args[0], is_leaf=lambda x: x is None)[0])
        if all(r is None for r in results):     # a backward that returns no gradient
            return [], [], results
        body, sub_tensors, sub_arrays, _ = sub.run()
        for name, (core, where) in sub.missing.items():
            self.missing.setdefault(name, (core, where))
        constants = [n for n in sub_tensors if n.startswith(prefix)]
        for n in constants:
            self.tensors[n] = sub_tensors[n]
            self.arrays[n] = sub_arrays[n]
            self.consts_used.add(n)
        return body, constants, [None if r is None else sub._name_of(r, sub.names)
                                 for r in results]

    def _input(self, val, names, const_names, leaves_used, node):
        if val is None or val is S.MISSING:
            return None
        if isinstance(val, (list, tuple)):
            return [self._input(v, names, const_names, leaves_used, node) for v in val]
        if isinstance(val, torch.fx.Node):
            if val.op == "placeholder":
                leaves_used.add(val)
            if (val, node) in self.const_at and self.const_at[(val, node)] is None:
                _fail(node, f"its input {val.name} is not a tensor")
            return self._name_of(val, names, node)
        if isinstance(val, (bool, int, float)):
            return val
        _fail(node, f"cannot write a {type(val).__name__} as a tensor input")

    def _no_grad_entries(self, node, entry, names):
        """Note [Ops run with grad mode off] (gradcli/loader/bound_op.py): ``entry`` with
        ``no_grad: true``. An in-place op that is written out of place (gradcli has no
        in-place kernel for it: cosine_similarity's ``clamp_min_``) must still write into its
        target, which keeps its history: it becomes its out-of-place op into a new tensor
        and a ``copy_`` of that into the target, both with grad mode off."""
        entry["no_grad"] = True
        if not S.mutated_arguments(node.target._schema) or node in self.kept_inplace:
            return [entry]
        out = entry["output"]
        value = f"{out}.value"
        copy = {"op": "aten.copy_.default", "inputs": [entry["inputs"][0], value],
                "output": out, "no_grad": True}
        entry["output"] = value
        for op in (entry.get("composite") or {}).get("body", ()):   # the body defines it
            if op.get("output") == out:
                op["output"] = value
        return [entry, copy]

    def _keeps_inplace(self, node, dynamic):
        """Whether ``node`` (an in-place op) is written as traced (Note [In-place kept])."""
        schema = node.target._schema
        if S.mutated_arguments(schema) != [0] or not _has_kernel(S.op_name(node.target)):
            return False
        target = node.args[0] if node.args else None
        if not isinstance(target, torch.fx.Node):
            return False
        n = target
        while _aliases_first_input(n, writes=True):
            if S.mutated_arguments(n.target._schema) and n not in self.kept_inplace:
                return False        # written out of place: ``self`` is no longer its memory
            n = n.args[0]
        return n in dynamic and n.op != "placeholder"

    # Note [Fresh memory written in place]: a module may make a tensor from its input's
    # metadata alone and fill it in place with values that need gradients (circular
    # padding: ``out = x.new_empty(...)``, then ``copy_`` into its slices, then copies from
    # some of its slices into others). Folded as a constant, ``out`` would be a leaf of the
    # file, written out of place and read again through other views: the aliasing cannot
    # be written. So such a factory (one of METADATA_ONLY, or one with no tensor input,
    # that gradcli has a kernel for), when an in-place op writes into it (through views) a
    # value computed from something that requires grad, is written as the op it is: fresh
    # memory at every run, the in-place ops on it kept as traced (Note [In-place kept]),
    # and PyTorch's CopySlices nodes replayed by the engine. Factories that in-place ops
    # fill with constants only (attention masks) stay folded (Note [Folding]).
    def _fresh_roots(self):
        carries = set()
        placeholders = iter(self.leaf_values)
        fresh = set()
        for node in self.nodes:
            if node.op == "placeholder":
                value = next(placeholders, None)
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    carries.add(node)
                continue
            if node.op != "call_function":
                continue
            target = node.target
            if not _metadata_only(target) and any(i in carries for i in node.all_input_nodes):
                carries.add(node)
            if not isinstance(target, torch._ops.OpOverload) or \
                    S.mutated_arguments(target._schema) != [0] or not node.args or \
                    not isinstance(node.args[0], torch.fx.Node):
                continue
            written = [i for i in node.all_input_nodes if i is not node.args[0]]
            if not any(i in carries for i in written):
                continue
            root = self._alias_root(node.args[0], writes=True)
            if root.op == "call_function" and isinstance(root.target, torch._ops.OpOverload) \
                    and root not in carries and _has_kernel(S.op_name(root.target)) \
                    and not S.mutated_arguments(root.target._schema) \
                    and (_metadata_only(root.target) or not root.all_input_nodes):
                fresh.add(root)
            carries.update(self._alias_group(root, writes=True))
        return fresh

    def _check_no_parameter_write(self, node):
        """Refuse a forward that writes into a parameter in place (under ``no_grad``: RWKV
        rescales its weights on its first eval call): the file's parameter is a leaf that
        every run starts from, and the module's own backward then sees other weights."""
        root = self._alias_root(node.args[0], writes=True)
        if root in self.params:
            _fail(node, f"the module writes into its parameter {self.params[root]} in place during "
                        "the forward; if that is a one-time setup (RWKV rescales its layers on its "
                        "first eval call), run the module once before exporting it")

    def _check_no_alias_reader(self, node):
        """Refuse an in-place update whose tensor is read again under another name."""
        target = node.args[0]
        group = self._alias_group(target)
        after = self.index[node]
        for member in group:
            for user in member.users:
                if user is node or self.index[user] <= after:
                    continue
                _fail(node, f"it updates {target.name} in place while {user.name} reads it "
                            "(or a view of it) afterwards: aliasing mutation cannot be expressed")

    @staticmethod
    def _alias_root(n, writes=False):
        """The tensor ``n`` is a view of, through any chain of views (``n`` if none);
        ``writes``: through the results of in-place ops too (each is its ``self``)."""
        while _aliases_first_input(n, writes):
            n = n.args[0]
        return n

    def _alias_group(self, node, writes=False):
        """``node`` and every view chain it belongs to (its bases and views); ``writes``:
        the results of in-place ops on any of them too."""
        root = self._alias_root(node, writes)
        group, stack = set(), [root]
        while stack:
            n = stack.pop()
            if n in group:
                continue
            group.add(n)
            for u in n.users:
                if _aliases_first_input(u, writes) and u.args[0] is n:
                    stack.append(u)
        return group


def _aliases_first_input(n, writes=False):
    """Whether fx node ``n`` returns its first input's memory: a view, or with ``writes``
    an in-place op (``relu_`` returns its ``self``)."""
    target = getattr(n, "target", None)
    if not isinstance(target, torch._ops.OpOverload) or not n.args or \
            not isinstance(n.args[0], torch.fx.Node):
        return False
    schema = target._schema
    return S.is_view(schema) or (writes and S.mutated_arguments(schema) == [0] and
                                 bool(schema.returns) and schema.returns[0].alias_info is not None)


class _Slot:
    """Where a tensor argument goes in a re-traced call (Note [Composites])."""

    def __init__(self, index):
        self.index = index


def _body_names(body, rename, taken):
    """A composite's body with its own names set apart, in order: an op's inputs read the
    names defined so far (a name the body has not defined yet is one of the composite's
    inputs), and each name it defines becomes its ``rename`` (an inner output -> the
    entry's output), or ``NAME.body`` where ``NAME`` is ``taken`` (an output of the entry,
    or an input: the decomposition of log_sigmoid_forward of a tensor named ``sub`` defines
    its own ``sub``, which must not become the input's name)."""
    current, out = {}, []
    for op in body:
        op = _renamed(op, current, outputs=False)
        defined = [op["output"]] if "output" in op else list(op.get("outputs", []))
        for n in defined:
            current[n] = rename.get(n, f"{n}.body" if n in taken else n)
        out.append(_renamed(op, current, inputs=False))
    return out, current


def _renamed(op, rename, inputs=True, outputs=True):
    def ren(v):
        if isinstance(v, list):
            return [ren(x) for x in v]
        return rename.get(v, v) if isinstance(v, str) else v

    out = dict(op)
    if inputs:
        out["inputs"] = ren(op["inputs"])
    if outputs and "output" in op:
        out["output"] = ren(op["output"])
    if outputs and "outputs" in op:
        out["outputs"] = ren(op["outputs"])
    return out


def _backward_node_name(call, tensors):
    """The name of the node PyTorch records for ``call`` on ``tensors`` (floating ones
    requiring grad), or None when it records none."""
    from .compare import node_name

    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors]
        out = call(*leaves)
    for o in pytree.tree_leaves(out):
        if isinstance(o, torch.Tensor) and o.grad_fn is not None:
            return node_name(o.grad_fn)
    return None


# -- step 3: the module's own backward --------------------------------------------------------
def _reference_backward(module, inputs, kw, extras, loss_fn):
    """The module's parameter gradients, its backward order and the names of the
    ``torch.autograd.Function`` nodes its backward runs (Note [Python Functions])."""
    from .compare import node_order

    out = module(*inputs, **kw)
    loss = loss_fn(out, extras)
    functions = _python_function_nodes(loss)
    order = node_order([loss], loss.backward)
    grads = {k: p.grad for k, p in module.named_parameters() if p.grad is not None}
    return grads, order, functions


# Note [Seeded draws]: train-mode randomness draws from torch's generator (dropout) or,
# in some models, from NumPy's global one (wav2vec2's SpecAugment time masks come from
# ``np.random``): the trace and the module's own backward must draw the same, so both
# start from the export's seed in both generators. The trace keeps NumPy's draws as the
# constants they became; torch's random ops stay ops drawing from the file's seed.
def _seed(seed):
    torch.manual_seed(seed)
    np.random.seed(seed % 2 ** 32)


# Note [Leaves made in the forward]: a module may make a tensor it computed from its
# inputs require grad (wav2vec2's feature encoder: ``hidden_states = input_values[:, None];
# hidden_states.requires_grad = True`` in train mode, for gradient checkpointing). In
# PyTorch that tensor is then a leaf: its consumers' gradients stop there, in an
# AccumulateGrad node of the backward's order. The trace records no op for it;
# DetachMarks marks its node, and the exporter writes its value as a constant leaf that
# requires grad (``const.NODE``, requires_grad: true), read by its consumers, which the
# module's gradient then reaches as it does in PyTorch. A tensor that already requires
# grad cannot be made a leaf (PyTorch refuses that), so only values computed from data
# without gradients are marked.
# Note [Python Functions]: a ``torch.autograd.Function`` (BLOOM's GeLUFunction, a
# straight-through estimator) records one node whose backward is the class's Python
# ``backward``. The trace captures each application as one node (functions.py) and
# writes it as a ``function.CLASS`` composite with both of its bodies (Note [Python
# Functions as composites]). An application the trace did not capture (arguments by
# keyword, or a class with an ``apply`` of its own) would be traced as its forward's
# ops, which record other nodes and compute the forward's derivative, not what the
# module's backward runs: the export compares the Function nodes of the module's
# backward with those it wrote and refuses the module, naming the others.
def _python_function_nodes(loss):
    """{node name: count} of the Python ``autograd.Function`` nodes under ``loss``."""
    from .compare import node_name

    found, seen = {}, set()
    stack = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if isinstance(fn, torch.autograd.function.BackwardCFunction):
            found[node_name(fn)] = found.get(node_name(fn), 0) + 1
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return found


def _python_functions_message(functions):
    names = ", ".join(f"{n} ({k}x)" if k > 1 else n for n, k in sorted(functions.items()))
    return (f"the module's backward runs torch.autograd.Function nodes that the export did "
            f"not capture as Functions: {names} (applied with keyword arguments, or by a class "
            f"with an apply of its own); pass the Function's arguments by position")


# -- step 4: the file replays as the module ---------------------------------------------------
def _check_replay(graph, grads, order, inplace_on_views=0):
    from . import compare as compare_torch

    result = compare_torch.replay(graph.document, arrays=graph.file_arrays())
    if inplace_on_views and _same_up_to_inplace_views(result.order, order):
        pass                            # Note [In-place on views]
    elif len(result.order) != len(order) or any(
            not _same_node(a, b) for a, b in zip(result.order, order)):
        raise ExportMismatch("the exported graph's backward order differs from the "
                          f"module's ({_first_difference(result.order, order)})")
    rtol, atol = graph.document["expect"]["rtol"], graph.document["expect"]["atol"]
    for name, expected in grads.items():
        got = result.grads.get(name)
        if got is None or got.shape != expected.shape or not np.allclose(
                got, expected, rtol=rtol, atol=atol, equal_nan=True):
            raise ExportMismatch(f"the exported graph's gradient for {name} differs from the "
                                 "module's")
    graph.document["expect"]["order"] = list(result.order)


# Backward nodes of view ops: Note [In-place on views] compares orders without them.
VIEW_NODES = re.compile(r"^(View|AsStrided|Slice|Select|Transpose|Permute|Unsqueeze|Squeeze|"
                        r"Expand|Alias|UnsafeView|ReshapeAlias|T|Unbind|Split)Backward\d+$")


def _same_up_to_inplace_views(replayed, module):
    """Note [In-place on views]: the two orders agree once view nodes are left out and
    each of the module's CopySlices stands for the in-place op's node of the replay."""
    a = [n for n in replayed if not VIEW_NODES.match(n)]
    b = [n for n in module if not VIEW_NODES.match(n)]
    return len(a) == len(b) and all(y == "CopySlices" or _same_node(x, y) for x, y in zip(a, b))


def _same_node(replayed, module):
    """Whether two node names are the same node up to Note [Exported order]'s renames."""
    return (replayed == module or replayed.split("Backward")[0] == module.split("Backward")[0]
            or (replayed, module) in EAGER_RENAMES)


def _first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"node {i}: {x} vs {y}"
    return f"{len(a)} vs {len(b)} nodes"
