"""The op registry: ``primitive`` defines an op's forward and contract, ``defvjp`` its backward.

Every op is one ``Op`` object. Called on raw arrays it just computes; called
with a ``Tensor`` among its arguments it records a backward node
(``OpBackward``) when grad mode is on and an input requires grad. Backward
formulas are written with these same ops, so they work on raw arrays now
and would record themselves if handed Tensors (higher-order gradients).

Note [Ops carry their contract]: everything the rest of gradcli asks about
an op is an attribute of its ``Op`` (its args and their checks, rules across
args, how many outputs, output shapes and dtypes, whether a graph file may
name it, whether it moves data between devices, whether it is built from a
body of ops or from user code). The loader, gradcheck and the CLI ask the op
object and never match op names, so adding an op is one ``primitive`` in
``gradcli/ops/`` plus its row in the op test table.
"""
from __future__ import annotations

import numpy as np

from ..autograd import dispatch
from ..autograd.input_buffer import FreshGrads
from ..autograd.node import _CPU_METAS, ERR_BACKWARD_TWICE, AccumulateGrad, InputMetadata, Node
from ..autograd.saved import check_saved_version, unpack_output
from ..autograd.state import ENGINE_TLS, STATE
from ..autograd.tensor import Tensor
from ..devices import CPU, device_of, on_device
from .shapes import ELEMENTWISE, ShapeMismatch  # noqa: F401 - ShapeMismatch is re-exported


class OpRegistry(dict):
    """``name -> Op``: every op of the library, a ``dict`` whose deferred modules
    load on first need.

    Note [Deferred op namespaces]: the ATen ops (``aten.NAME.OVERLOAD``, about 80
    schema-declared entries, their kernels and shape rules) are most of the op
    library's import time, and a graph of version-1 ops never names one; nor do
    most graphs name ``custom`` (user code) or ``grad``. The modules that register
    them are recorded here with the names they register (``defer``: a name prefix,
    or the names themselves) and imported the first time a question needs them: a
    lookup of such a name (``[]``, ``get``, ``in``, ``pop``), or anything that sees
    every op (iteration, ``len``, ``keys``/``values``/``items``, ``copy``; the
    unknown-op hint, ``gradcli ops``, the catalog). So the registry answers every
    question as if everything were loaded; lookups of loaded names stay plain dict
    lookups (``get`` costs one Python call). No deferred op is a function of
    ``gradcli.ops`` (a prefix is dotted, so its names are not identifiers; the
    deferred names are ops without a forward of their own), so that module's
    functions come from the loaded ops only. Lookups from several threads wait for
    the one import (a re-entrant lock: the importing thread may look up ops while
    its import runs); a failed import raises again at the next question.
    """

    __slots__ = ("_deferred", "_lock")

    def __init__(self):
        super().__init__()
        self._deferred = {}          # module -> (name prefix or None, frozenset of names)
        import _thread  # noqa: PLC0415 - a lock without importing threading

        self._lock = _thread.RLock()

    def defer(self, module, *, prefix=None, names=()):
        """Import ``module`` on first need: it registers the ops named ``prefix...``
        (a dotted prefix) and those in ``names`` (ops without a forward function)."""
        if prefix is not None and "." not in prefix:
            raise ValueError(f"a deferred op namespace is dotted (not an identifier): {prefix!r}")
        self._deferred[module] = (prefix, frozenset(names))

    def _load(self, name=None) -> bool:
        """Import the deferred modules that may register ``name`` (all for None);
        True when one was imported."""
        if not self._deferred:
            return False
        loaded = False
        with self._lock:
            for module, (prefix, names) in list(self._deferred.items()):
                if name is None or name in names or (prefix is not None
                                                     and name.startswith(prefix)):
                    import importlib  # noqa: PLC0415 - only when a deferred module loads

                    importlib.import_module(module)     # raises: stays deferred
                    self._deferred.pop(module, None)
                    loaded = True
        return loaded

    def __missing__(self, name):
        if type(name) is str and self._load(name):
            return dict.__getitem__(self, name)
        raise KeyError(name)

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name):
        return dict.__contains__(self, name) or (
            type(name) is str and self._load(name) and dict.__contains__(self, name))

    def pop(self, name, *default):
        if type(name) is str and not dict.__contains__(self, name):
            self._load(name)
        return dict.pop(self, name, *default)


def _after_loading(method):
    def whole(self, *args):
        self._load()
        return method(self, *args)

    whole.__name__, whole.__doc__ = method.__name__, method.__doc__
    return whole


# What sees every op loads every deferred module first (Note [Deferred op namespaces]).
for _name in ("__iter__", "__len__", "__reversed__", "__eq__", "__ne__", "__or__", "__ror__",
              "__repr__", "keys", "values", "items", "copy", "popitem"):
    setattr(OpRegistry, _name, _after_loading(getattr(dict, _name)))
del _name


OPS: OpRegistry = OpRegistry()

_NO_ARG = object()
_ndarray = np.ndarray   # (one global lookup, not two, on record's path per input)
_NO_ARGS = {}           # the args of a node recorded without any (shared, never mutated)


class Arg:
    """One attribute of an op in a graph file: its default and how to check it."""

    __slots__ = ("default", "check", "doc", "names_tensor")

    def __init__(self, default=_NO_ARG, check=None, doc="", names_tensor=False):
        self.default = default
        self.check = check           # fn(value) -> value, raising ValueError
        self.doc = doc
        # The value is the name of a tensor of the graph (``grad``'s grad_outputs):
        # the loader checks it is defined above the op and passes that tensor as
        # one more input, after the listed ones (the arg keeps the name).
        self.names_tensor = names_tensor

    @property
    def required(self):
        return self.default is _NO_ARG


class Op:
    """An operation: forward on raw arrays, one VJP per input, its node's name and its
    contract (see Note [Ops carry their contract]).

    Attributes the rest of gradcli reads:

    - ``name``, ``doc`` (one line), ``node_name_for(datas, args)``;
    - ``arity``: number of inputs, or ``(min, max)`` (``max`` None: unbounded);
    - ``args``: ``{name: Arg}``; ``check_args(args)`` applies the rules across args;
    - ``multi_output`` (the forward returns a list) and ``num_outputs(args)``
      (an int, or None when only the inputs tell);
    - ``broadcasts``: inputs broadcast against each other (NumPy rules);
    - ``infer_outputs(shapes, dtypes, args)`` -> ``[(shape, dtype), ...]``,
      raising ValueError (``ShapeMismatch`` naming inputs) when inputs do not fit;
    - ``public``: a graph file may name it (False for internal helpers);
    - ``moves_device``: its output is on another device than its input (``to``);
    - ``dtype_arg``: the arg that names the output dtype (``cast``), if any;
    - ``has_body``: built by the loader from a body of ops (``checkpoint``);
    - ``needs_code``: runs user code, refused without allow_code (``custom``);
    - ``supported``: False for ops of the format this version cannot run yet;
    - ``view``: its outputs are views of (or are) its first input: they allocate
      nothing (the loader's whole-graph memory budget counts them as free; the
      ops that read them allocate their own results in full);
    - ``backward_ms(args)``: the most milliseconds one call of its backward may
      spend waiting on purpose (``delay``), or None: the loader bounds the sum
      over a file (Note [Time bounds] in loader/checker.py).
    - ``for_entry(entry, site)``: the op that runs one entry of a graph file (itself,
      or an op made for that entry: ``custom`` resolves its user code there);
    - ``vjp_all``: None, or one function giving all its inputs' gradients in one call per
      node (``defvjp_all``; Note [one call for all inputs' gradients]);
    - ``runs_backward``: its forward runs a backward of the graph recorded so far
      (``grad``): gradcheck replays such a graph on Tensors, and validate also
      checks its second derivatives.
    """

    __slots__ = ("name", "fn", "vjps", "vjp_all", "node_name", "saves", "arity", "args", "multi_output",
                 "doc", "check", "outputs", "broadcasts", "infer", "public", "moves_device",
                 "dtype_arg", "has_body", "needs_code", "supported", "view", "backward_ms",
                 "entry_binder", "aliases", "branch")

    def __init__(self, name, fn, node_name=None, saves=True, arity=1, args=None,
                 multi_output=False, *, doc=None, check=None, outputs=None, broadcasts=False,
                 infer=None, public=True, moves_device=False, dtype_arg=None, has_body=False,
                 needs_code=False, supported=True, view=False, backward_ms=None,
                 entry_binder=None):
        self.name = name
        self.fn = fn
        self.vjps = None
        self.vjp_all = None               # see defvjp_all
        self.node_name = node_name or (name.title().replace("_", "") + "Backward0")
        self.saves = saves                # does the backward need input/output values?
        self.arity = arity                # number of inputs, or (min, max)
        self.args = args or {}
        self.multi_output = multi_output or callable(outputs) or (outputs or 1) != 1
        if doc is None:
            doc = (fn.__doc__ or "").strip().splitlines()[0].strip() if fn is not None and fn.__doc__ else ""
        self.doc = doc
        self.check = check                # fn(args) raising ValueError: rules across args
        self.outputs = outputs            # int, fn(args) -> int | None, or None (one, or unknown)
        self.broadcasts = broadcasts
        if infer is None and broadcasts:
            infer = ELEMENTWISE
        if hasattr(infer, "bind"):        # a rule that runs the forward (shapes.Infer)
            infer = infer.bind(fn)
        self.infer = infer                # fn(shapes, dtypes, **args) -> [(shape, dtype)]
        self.public = public
        self.moves_device = moves_device
        self.dtype_arg = dtype_arg
        self.has_body = has_body
        self.needs_code = needs_code
        self.supported = supported
        self.view = view
        # Note [Views that may copy]: whether an output may share its input's memory (a
        # view, or ``reshape``, which views a contiguous input and copies another one):
        # such an output is marked a view when it does (``_mark_view``), so an in-place
        # op on it bumps its base's version and rebases its history. ``view`` promises
        # more (the loader counts no allocation for it), so ``reshape`` sets only this.
        self.aliases = view
        self.backward_ms = backward_ms    # fn(args) -> ms, or None
        self.entry_binder = entry_binder  # fn(op, entry, site) -> Op, or None
        self.branch = None                # see defbranch

    runs_backward = False

    def for_entry(self, entry, site):
        """The op that runs this entry of a graph file (``site``: an ``ops.site.EntrySite``)."""
        return self if self.entry_binder is None else self.entry_binder(self, entry, site)

    def __call__(self, *inputs, **args):
        fn = self.fn
        if fn is None:
            how = "from its body of ops" if self.has_body else "from user code"
            raise TypeError(f"op {self.name!r} has no forward of its own: the loader builds it {how}")
        for x in inputs:
            if type(x) is Tensor:
                return record(self, inputs, args)
        return fn(*inputs, **args)           # (backward formulas on raw arrays)

    def node_name_for(self, datas, args):
        name = self.node_name
        return name(datas, args) if callable(name) else name

    # -- the contract -----------------------------------------------------------------
    def defaults(self):
        """``{arg: default}`` for the args that have one."""
        return {k: a.default for k, a in self.args.items() if not a.required}

    def check_args(self, args):
        """Apply the rules across args (``args`` already checked one by one); raises ValueError."""
        if self.check is not None:
            self.check({**self.defaults(), **args})

    def num_outputs(self, args):
        """How many outputs the op makes with ``args``: an int, or None when the
        inputs decide (or the op does not say)."""
        n = self.outputs
        if callable(n):
            return n({**self.defaults(), **args})
        if n is None:
            return None if self.multi_output else 1
        return n

    def infer_outputs(self, shapes, dtypes, args):
        """``[(shape, dtype), ...]`` of the outputs for inputs of these shapes and
        dtypes, or None when the op cannot tell without running. Raises ValueError
        (``ShapeMismatch`` when the message names inputs) when the inputs do not fit."""
        if self.infer is None:
            return None
        shapes = [shape if type(shape) is tuple else tuple(shape) for shape in shapes]
        dtypes = [d if isinstance(d, np.dtype) else np.dtype(d) for d in dtypes]
        with np.errstate(all="ignore"):
            outs = self.infer(shapes, dtypes, **{**self.defaults(), **args})
        return [(tuple(int(s) for s in shape), dtype if isinstance(dtype, np.dtype) else np.dtype(dtype))
                for shape, dtype in outs]

    def worst_backward_ms(self, args):
        """The most milliseconds one call of the backward may wait on purpose (0 for
        ops that do not wait)."""
        if self.backward_ms is None:
            return 0
        return self.backward_ms({**self.defaults(), **args})

    def __repr__(self):
        return f"<op {self.name}>"


def primitive(name, node_name=None, saves=True, arity=1, args=None, multi_output=False, *,
              check=None, outputs=None, broadcasts=False, infer=None, public=True,
              moves_device=False, dtype_arg=None, has_body=False, needs_code=False,
              supported=True, doc=None, view=False, backward_ms=None):
    """Register ``fn(*arrays, **args)`` as the forward of op ``name``, with its contract
    (the keyword-only arguments; see ``Op``). ``infer`` defaults to the elementwise rule
    when ``broadcasts`` is true; ``doc`` to the first line of ``fn``'s docstring."""
    def decorate(fn):
        op = Op(name, fn, node_name, saves, arity, args, multi_output, check=check,
                outputs=outputs, broadcasts=broadcasts, infer=infer, public=public,
                moves_device=moves_device, dtype_arg=dtype_arg, has_body=has_body,
                needs_code=needs_code, supported=supported, doc=doc, view=view,
                backward_ms=backward_ms)
        OPS[name] = op
        return op
    return decorate


def declare(name, doc, node_name=None, arity=1, args=None, **contract):
    """Register an op of the graph format that the loader builds from more than
    its args (a body of ops, user code): it has no forward function of its own."""
    op = Op(name, None, node_name, False, arity, args, doc=doc, **contract)
    OPS[name] = op
    return op


def defvjp(op, *vjps):
    """Give ``op`` one VJP per input: ``vjp(g, ans, *inputs, **args) -> grad``.

    For ops created with ``saves=False`` the inputs passed to a VJP are
    their InputMetadata (shape, dtype, device) and ``ans`` is None.
    """
    op.vjps = vjps


# Note [Branches]: an op whose derivative changes formula at a kink (relu at 0, hardtanh
# at its bounds) says where: ``branch(self, **args)`` labels each element of its first
# input with the piece of the function it falls on. Two runs of one graph in two
# precisions may put an element that lies within rounding of a kink on two pieces;
# ``gradcli.branches`` asks the op for its labels to find those elements, and the
# float32 verdict then judges a gradient against the float64 gradient of the piece the
# float32 run took (Note [Kinks] in gradcli/verdict.py). The labels are computed on the
# first input only: these ops are element-wise in it, their other arguments scalars.
def defbranch(op, fn):
    """Say where ``op``'s derivative changes formula: ``fn(self, **args)`` -> an array of
    labels, one per element of ``self`` (equal labels: the same piece); or ``ChosenBy(k)``
    for an op that selects (max pooling: output ``k`` holds, per result element, the position
    it took in its plane of ``self``'s last two dims, and a near tie is its kink).

    >>> defbranch(relu, lambda self: self > 0)       # doctest: +SKIP
    >>> defbranch(max_pool2d_with_indices, ChosenBy(1))   # doctest: +SKIP
    """
    op.branch = fn


class ChosenBy:
    """Note [Branches] for a selecting op: ``output`` is the index of its output that
    says which element of each plane (``self``'s last two dims, flattened) it chose."""

    __slots__ = ("output",)

    def __init__(self, output):
        self.output = output


# Note [one call for all inputs' gradients]: a node calls one VJP per input that needs a
# gradient, each given all the inputs; for an op with many inputs (a concat of N tensors)
# that is N calls each handed N inputs, quadratic in N, and a formula that computes every
# input's gradient together (batch norm's backward, one node in PyTorch) would run once
# per input. ``defvjp_all`` gives such an op one function called once per node, as
# PyTorch's CatBackward0 and NativeBatchNormBackward0 compute all their gradients at once.
def defvjp_all(op, fn):
    """Give ``op`` one function for all its gradients: ``fn(g, ans, inputs, needed, args)``
    -> one gradient per edge of the node (None where ``needed[i]`` is false), ``inputs``
    the node's inputs as a sequence, ``args`` its args dict. ``op.vjps[i]`` still gives
    input ``i``'s alone (one call of ``fn``)."""
    op.vjp_all = fn
    op.vjps = _OneOfAll(fn)


class _OneOfAll:
    """``op.vjps`` of an op with ``vjp_all``: input ``i``'s gradient alone."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, i):
        def vjp(g, ans, *inputs, **args):
            needed = [False] * len(inputs)
            needed[i] = True
            return self.fn(g, ans, inputs, needed, args)[i]
        return vjp


class OpBackward(Node):
    """The backward node of one recorded op."""

    __slots__ = ("op", "args", "saved", "input_devices", "versions", "view_fn")
    # (``view_fn``, set only on the node of an in-place op on a view: the view's
    # regenerated history, which its saved output leads to under create_graph, as
    # PyTorch's; Note [CopySlices under create_graph])

    def apply(self, grads):
        saved = self.saved
        if saved is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        op = self.op
        if dispatch.SAVED_CHECKS and op.saves:      # Note [Version counters]
            if type(saved) is not tuple:            # Note [Saved-tensor hooks]
                saved = saved.values()
            else:
                self._check_versions(saved)
        if not op.saves:                # (metadata..., None) (Note [Saved layout])
            inputs, ans = saved[:-1], None
        elif STATE.grad_enabled:
            # create_graph (or a backward called under enable_grad): the VJPs
            # get the saved Tensors so they record (Note [Saved tensors]).
            n = len(saved) >> 1         # (arrays..., output, Tensors...): n of each
            inputs = saved[n + 1:]
            ans = saved[n]
            if op.multi_output:
                keep = getattr(op, "differentiable_outputs", None)   # (an ATen op's flags)
                ans = [unpack_output(o, self, i, keep is None or i < len(keep) and keep[i])
                       for i, o in enumerate(ans)]
            else:
                ans = unpack_output(ans, getattr(self, "view_fn", None) or self, 0)
        else:
            n = len(saved) >> 1
            inputs, ans = saved[:n], saved[n]
        if op.multi_output:
            g = [self._zeros(i) if gi is None else gi for i, gi in enumerate(grads)]
        else:
            g = grads[0]
            if g is None:
                return [None] * len(self.next_edges)
        args = self.args
        to_leaf = False
        if op.vjp_all is not None:    # Note [one call for all inputs' gradients]
            out = list(op.vjp_all(g, ans, inputs, [edge is not None for edge in self.next_edges], args))
            to_leaf = any(edge is not None and type(edge[0]) is AccumulateGrad
                          for edge in self.next_edges)
        else:
            # A loop rather than a comprehension: no extra frame per node on Python
            # 3.11 (about 3% of a chain's backward); most ops have no keyword dict.
            vjps = op.vjps
            out = []
            append = out.append
            i = 0
            for edge in self.next_edges:
                if edge is None:
                    append(None)
                else:
                    if type(edge[0]) is AccumulateGrad and not to_leaf:
                        to_leaf = not _summed_into(edge)   # (a fan-in's later branches)
                    if args:
                        append(vjps[i](g, ans, *inputs, **args))
                    else:
                        append(vjps[i](g, ans, *inputs))
                i += 1
        devices = self.input_devices
        if devices is not None:
            out = [o if o is None or type(o) is Tensor else on_device(o, devices[i])
                   for i, o in enumerate(out)]
        if to_leaf and not (op.needs_code or op.runs_backward):
            return self._mark_fresh(out, grads, inputs, ans)
        return out

    # Note [Stealing gradients] (the producer's side): an array a VJP returns for an
    # edge into a leaf's AccumulateGrad is fresh when the VJP created it and nothing
    # else holds it: a plain ndarray that owns its memory and is writable (no view of
    # the incoming gradient, a saved input or anything else), and not the very object
    # of an incoming gradient (``AddBackward0`` hands its ``g`` on), of a saved value
    # the VJP was handed (an input array or Tensor: the leaf's own data; the forward's
    # output) or of another of the node's outputs. Those are all a VJP can hand back
    # without making it; the saved Tensors of a backward without create_graph are not
    # handed to it, and their data are the saved arrays it was handed. PyTorch asks
    # the tensor's use count; a reference count is not a stable fact across
    # interpreters, so the node that made the array says so. Ops running user code or
    # a backward of their own (``custom``, ``grad``) never do: their results may be
    # held by what they called.
    #
    # Whether an output is fresh decides something only when it is the one array in
    # its accumulator's slot: a slot that already holds a contribution gets a sum,
    # which its InputBuffer owns whatever this bit says. Such outputs (every branch of
    # a fan-in into one leaf but the first) are not looked for among the node's
    # inputs and saved values, and a node whose every edge into a leaf meets such a
    # slot does not look at all (``apply`` asks before calling ``_mark_fresh``). The
    # slot, once filled, stays in the graph task's ``not_ready`` until this
    # contribution arrives, so the answer cannot change.
    def _mark_fresh(self, out, grads, inputs, ans):
        # (plain loops, no generators: a node feeding a leaf's empty slot comes here)
        fresh = 0
        edges = self.next_edges
        for i in range(len(out)):
            edge = edges[i]
            if edge is None or type(edge[0]) is not AccumulateGrad or _summed_into(edge):
                continue                     # (summed: owned either way)
            o = out[i]
            if type(o) is not np.ndarray or o.base is not None:
                continue
            if (not o.flags.writeable or o is ans or _holds(grads, o) or _holds(inputs, o)
                    or type(ans) is not _ndarray and ans is not None and _holds((ans,), o)):
                continue
            k = 0
            for x in out:
                if x is o:
                    k += 1
            if k == 1:
                fresh |= 1 << i
        if not fresh:
            return out
        out = FreshGrads(out)
        out.fresh = fresh
        return out

    def _check_versions(self, saved):
        """Raise PyTorch's error when a saved input or output was changed in place since
        this node was recorded (its ``versions``: None when nothing was ever changed)."""
        versions = getattr(self, "versions", None)      # unset: recorded at version 0
        expected = versions[0] if versions is not None else None
        n = len(saved) >> 1
        used = None
        for k, x in enumerate(saved[n + 1:]):
            if type(x) is Tensor and (x._vc is not None or x._base is not None):
                if used is None:                         # Note [What a node saved]
                    used = self._saved_uses()[1]
                if k in used:
                    check_saved_version(x, 0 if expected is None else expected[k], self)
        if versions is not None and versions[1]:
            for output_nr, (vc, version) in versions[1].items():
                if vc[0] != version:
                    out = saved[n][output_nr] if self.op.multi_output else saved[n]
                    check_saved_version(None, version, self, vc=vc, data=out,
                                        output_of=(output_nr, self.name))

    def _saved_uses(self):
        from .uses import saved_uses  # noqa: PLC0415 - only once in-place ops are in use

        n = len(self.saved) >> 1
        valid = tuple(e is not None for e in self.next_edges)
        if len(valid) != n:                  # an ATen op dropped edges (its indices, ...)
            from .uses import saved_uses_by_schema  # noqa: PLC0415

            found = saved_uses_by_schema(self.op, n)
            return (True, frozenset(range(n))) if found is None else found
        return saved_uses(self.op, valid)

    def note_output_version(self, output_nr, vc, version):
        kept = getattr(self.op, "saved_outputs", None)     # Note [What a node saved]
        if kept is not None and output_nr not in kept:
            return
        if not (self.op.saves and type(self.saved) is tuple):   # (packed by hooks)
            return
        reads = self._saved_uses()[0]           # True, False or the outputs read
        if reads is True or (reads and output_nr in reads):
            versions = getattr(self, "versions", None)
            if versions is None or versions[1] is None:
                versions = self.versions = (None if versions is None else versions[0], {})
            versions[1][output_nr] = (vc, version)

    def _zeros(self, i):
        meta = self.input_metadata[i]
        if meta.device is CPU:          # (an output without a gradient: layer norm's statistics)
            return np.zeros(meta.shape, meta.dtype)
        from ..devices import xp_of

        return on_device(xp_of(meta.device).zeros(meta.shape, meta.dtype), meta.device)

    def release_variables(self):
        if self.op.saves:
            self.saved = None


def _summed_into(edge):
    """Does the slot ``edge`` leads to already hold a contribution in the running graph
    task's ``not_ready`` (so what arrives there is summed: Note [Stealing gradients])?"""
    task = ENGINE_TLS.current_graph_task
    buffer = task.not_ready.get(edge[0]) if task is not None else None
    return buffer is not None and buffer[edge[1]] is not None


def _holds(items, o):
    """Is ``o`` one of ``items``, the data of a Tensor among them or in a list among them?"""
    for x in items:
        if x is o:
            return True
        t = type(x)
        if t is Tensor:
            if x.data is o:
                return True
        elif t is list:
            for y in x:
                if y is o or (type(y) is Tensor and y.data is o):
                    return True
    return False


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


# Note [Saved layout]: a node's ``saved`` is one flat tuple: the input arrays (or,
# for an op that saves nothing, their metadata), the output (a list of them for a
# multi-output op; None when nothing is saved), then the input Tensors (the
# create_graph backward's inputs, Note [Saved tensors]); ``apply`` splits it by
# its length (2n + 1 for n inputs; n + 1 without saved values): not by the node's
# edges, which an ATen op may drop for inputs that take no gradient. Three tuples
# per node before: at 1,000,000 nodes the flat one saves about 90 bytes a node.
#
# Note [Recording on the CPU]: the common case of ``record`` (a single-output op
# whose inputs are all host arrays or plain values) takes a branch that does
# what the general code below does for it, in one pass over the inputs and
# without the device bookkeeping; and the backward node's input metadata for a
# CPU output is shared between nodes (InputMetadata.cpu): it is never mutated,
# and a million-node graph then keeps one instead of a million.
def record(op, inputs, args, forward=None):
    """Run ``op`` on Tensors; record an OpBackward node if a gradient is needed.
    ``forward``: what computes the outputs in place of ``op.fn`` (a call bound at load,
    Note [ATen calls bound at load]); the node is the op's all the same."""
    fn = op.fn if forward is None else forward
    # (one loop over the inputs for both paths: their arrays, whether one requires grad
    # and whether one is an accelerator's)
    datas = []
    on_accel = False
    requires_grad = False
    for x in inputs:
        if type(x) is Tensor:
            if x.requires_grad:
                requires_grad = True
            x = x.data
        if type(x) is not _ndarray and hasattr(x, "shape"):
            on_accel = True
        datas.append(x)
    if not (op.multi_output or on_accel):
        o = fn(*datas, **args)
        if type(o) is not _ndarray and device_of(o) is CPU:   # a host scalar
            o = np.asarray(o)
        if not (requires_grad and o.dtype.kind == "f" and STATE.grad_enabled):
            t = Tensor(o)
            if op.aliases:
                _mark_view(t, inputs)
            return t
        # (a tuple of edges and of saved arrays: smaller than lists, read-only here;
        # built in a loop: a comprehension is a frame of its own per call)
        edges = []
        for x in inputs:
            if type(x) is Tensor and x.requires_grad:
                # gradient_edge's common cases inline: an op's output, or a view
                # whose base's history is still the one it was made from
                grad_fn = x.grad_fn
                base = x._base
                if grad_fn is not None and (
                        base is None or getattr(x, "_view_of_fn", None) is base.grad_fn):
                    edges.append((grad_fn, x.output_nr))
                else:
                    edges.append(x.gradient_edge())
            else:
                edges.append(None)
        name = op.node_name
        if type(name) is not str:
            name = op.node_name_for(datas, args)
        if type(o) is _ndarray:           # InputMetadata.cpu's cached case inline
            node = OpBackward(name, tuple(edges),
                              _CPU_METAS.get((o.shape, o.dtype)) or InputMetadata.cpu(o), None, True)
        else:
            node = OpBackward(name, tuple(edges), [InputMetadata.of(o)])
        node.op = op
        node.args = args or _NO_ARGS
        if op.saves:
            node.saved = (*datas, o, *inputs)
        else:
            saved = []
            for d in datas:
                if type(d) is _ndarray:
                    saved.append((_CPU_METAS.get((d.shape, d.dtype)) or InputMetadata.cpu(d))[0])
                else:
                    saved.append(InputMetadata.of(d) if hasattr(d, "shape") else d)
            saved.append(None)
            node.saved = tuple(saved)
        node.input_devices = None
        t = Tensor(o, True)
        t.grad_fn = node
        if op.aliases:
            _mark_view(t, inputs)
        if dispatch.SAVED_CHECKS and op.saves:
            _save_checked(node, inputs, [t])
        return t
    # (a multi-output op, or an accelerator's arrays; the host outputs' shared metadata:
    # the norms and attention come here)
    dev = _common_device(datas) if on_accel and not op.moves_device else CPU
    out = fn(*datas, **args)
    outs = list(out) if op.multi_output else [out]
    floating = False
    for i, o in enumerate(outs):
        if type(o) is not _ndarray and device_of(o) is CPU:   # a host scalar
            o = np.asarray(o)
        if dev is not CPU:
            o = on_device(o, dev)
        outs[i] = o
        if o.dtype.kind == "f":
            floating = True
    if not (requires_grad and floating and STATE.grad_enabled):
        tensors = [Tensor(o) for o in outs]
        if op.aliases:
            for t in tensors:
                _mark_view(t, inputs, op.multi_output)
        return tensors if op.multi_output else tensors[0]

    edges = [x.gradient_edge() if type(x) is Tensor and x.requires_grad else None for x in inputs]
    metas = []
    on_cpu = True
    for o in outs:
        if type(o) is _ndarray:
            metas.append((_CPU_METAS.get((o.shape, o.dtype)) or InputMetadata.cpu(o))[0])
        else:
            metas.append(InputMetadata.of(o))
            on_cpu = False
    node = OpBackward(op.node_name_for(datas, args), edges, metas, None, on_cpu)
    node.op = op
    node.args = args
    if op.saves:
        node.saved = (*datas, outs if op.multi_output else outs[0], *inputs)
    else:
        node.saved = (*[InputMetadata.of(d) if hasattr(d, "shape") else d for d in datas], None)
    node.input_devices = [device_of(d) for d in datas] if on_accel else None
    tensors = []
    for i, o in enumerate(outs):
        t = Tensor(o, requires_grad=o.dtype.kind == "f")
        if t.requires_grad:
            t.grad_fn = node
            t.output_nr = i
        if op.aliases:
            _mark_view(t, inputs, op.multi_output)
        tensors.append(t)
    if dispatch.SAVED_CHECKS and op.saves:
        _save_checked(node, inputs, tensors)
    return tensors if op.multi_output else tensors[0]


def _save_checked(node, inputs, outputs):
    """Record the saved inputs' versions (Note [Version counters]), or pack the saved
    values through the thread's saved-tensor hooks (Note [Saved-tensor hooks])."""
    if STATE.saved_hooks:
        from ..autograd.graph import PackedSaved, current_hooks  # noqa: PLC0415

        hooks = current_hooks()              # (raises when hooks are disabled here)
        saved = node.saved
        n = len(saved) >> 1
        node.saved = PackedSaved(saved[:n], saved[n], inputs, outputs, hooks,
                                 node._saved_uses())
    elif dispatch.VERSIONS_IN_USE:
        node.versions = (saved_versions(inputs), None)


def saved_versions(inputs):
    """The version each Tensor input is at as a node saves it (Note [Version counters])."""
    return tuple(x._version if type(x) is Tensor else 0 for x in inputs)


# Note [Memory owners]: NumPy's ``base`` of a view is usually the array owning the
# memory, but ``as_strided`` (and CuPy's strided views) hand back an array whose
# ``base`` is an intermediate object (NumPy's ``DummyArray``) over another view. Two
# arrays share memory when following ``base`` from each ends at the same owner: an
# ``as_strided`` view is a view of its input, so an in-place op on it rebases its
# base's history (Note [CopySlices]) instead of changing the base's values behind its
# recorded history.
def _memory_owner(a):
    """The object at the end of ``a``'s ``base`` chain (Note [Memory owners])."""
    while True:
        b = getattr(a, "base", None)
        if b is None:
            return a
        a = b


def _mark_view(t, inputs, multi_output=False):
    """Make ``t`` a view of ``inputs[0]`` when its array is a view of that one's memory
    (an op flagged ``view`` may still copy: a reshape of a transposed array). A view
    shares its base's version counter; ``_base`` is the root base, as PyTorch's."""
    x = inputs[0] if inputs else None
    if type(x) is not Tensor:
        return
    o, d = t.data, x.data
    b = getattr(o, "base", None)
    if b is not None and (b is d or b is getattr(d, "base", None) or
                          _memory_owner(b) is _memory_owner(d)) or o is d:
        base = t._base = x._base if x._base is not None else x
        if x._vc is not None:
            t._vc = x._vc
        # Note [View creation]: as PyTorch's CreationMeta, what in-place ops on it refuse
        if not STATE.grad_enabled and (x.requires_grad or base.requires_grad):
            t._creation = "no_grad"
        elif multi_output:
            t._creation = "multi"
        elif x._creation is not None:
            t._creation = x._creation
        t._view_of_fn = base.grad_fn         # Note [Views of a changed base]
