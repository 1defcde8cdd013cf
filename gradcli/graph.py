"""Graph: a loaded graph file, its forward pass and its backward pass."""
from __future__ import annotations

import contextlib
import time
import weakref

import numpy as np

from .collector import paused
from .devices import share, to_device, to_host
from .errors import BackwardError, GraphError
from .records import Record      # not dataclasses (Note [Record classes])


class LeafSpec(Record):
    _fields = ("name", "shape", "dtype", "device", "requires_grad", "make", "line")

    def __init__(self, name: str, shape: tuple | None, dtype, device, requires_grad: bool,
                 make, line: int | None = None):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad
        self.make = make                # make(shape) -> np.ndarray on the CPU
        self.line = line
        self._made = {}                 # shape -> the host array, read-only (Note [Leaves made once])
        self._placed = None             # (host array, its copy on the device), shared likewise

    # Note [A leaf's run]: what a run of a loaded graph needs of a host leaf (its shared
    # array, whether that array has the declared shape and dtype, its accumulator's
    # metadata and stamp) is the same at every run, so it is worked out once, at the
    # first run: ``_run``, dropped whenever a field of the spec is assigned (``make``
    # replaced, ``requires_grad`` turned off, ...). A leaf on an accelerator keeps none:
    # its copy may be made per run (Note [Shared device arrays]).
    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if name in LeafSpec._fields:
            object.__setattr__(self, "_run", None)

    def run_tuple(self):
        """``(array, fits, metadata, stamp)`` for a run (Note [A leaf's run]): ``fits`` when
        the array has the declared shape and dtype; ``metadata`` the accumulator's (None
        for an accelerator's array).

        >>> from gradcli.devices import CPU
        >>> leaf = LeafSpec("w", (2,), np.float64, CPU, True, lambda s: np.zeros(s))
        >>> leaf.run_tuple() is leaf.run_tuple(), leaf.run_tuple()[1]
        (True, True)
        >>> leaf.make = lambda s: np.ones(s)       # a field assigned: worked out again
        >>> leaf._run is None, leaf.run_tuple()[0]
        (True, array([1., 1.]))
        """
        if self._run is not None:
            return self._run
        from .autograd.node import InputMetadata  # noqa: PLC0415 - the first run's

        data = self.array()
        fits = self.shape is not None and data.shape == tuple(self.shape) and data.dtype == self.dtype
        if type(data) is not np.ndarray:
            return data, fits, None, self.stamp()
        run = self._run = (data, fits, InputMetadata.cpu(data), self.stamp())
        return run

    # Note [Leaves made once]: a leaf's array (read from a weight file, drawn from its
    # seeded initializer or given inline) is the same at every run of a loaded graph,
    # so it is made at the first run and shared, read-only, by the runs after it: a
    # run cannot alter the next one (an op that writes into an input copies it first,
    # Note [Copy on write of leaves]). ``make`` is still there for whoever wants an
    # array of their own (gradcheck's replay).
    def shared(self, shape=None):
        """The leaf's host array for ``shape`` (its own shape when it has one), made
        once per loaded graph and read-only (Note [Leaves made once]).

        >>> leaf = LeafSpec("w", (2,), np.float64, None, True, lambda s: np.zeros(s))
        >>> leaf.shared() is leaf.shared(), leaf.shared().flags.writeable
        (True, False)
        """
        key = self.shape if self.shape is not None else (None if shape is None else tuple(shape))
        make = self.make
        made = self._made.get(key)
        if made is not None and made[0] is make:    # (a ``make`` replaced since: made again)
            return made[1]
        data = make(key)
        if isinstance(data, np.ndarray) and data.flags.writeable:
            data = data.view()          # read-only here, whoever else holds the array
            data.flags.writeable = False
        self._made[key] = (make, data)
        return data

    def array(self, shape=None):
        """The leaf's array on its device: the host array of ``shared``, or its copy on
        an accelerator, made once too where the device can share it read-only
        (devices.share, Note [Shared device arrays])."""
        host = self.shared(shape)
        if not self.device.kind.is_accelerator:
            return host
        placed = self._placed
        if placed is not None and placed[0] is host:
            return placed[1]
        data = to_device(host, self.device)
        if share(data):
            self._placed = (host, data)
        return data

    def stamp(self):
        """What a run stamps on the leaf's accumulator (Note [Metadata stamps]): the
        (key, value) pairs ``op_id``, ``line`` and ``leaf``, made once and shared by the
        runs (a node's ``metadata`` becomes a dict of its own when read).

        >>> LeafSpec("w", (2,), np.float64, None, True, None, 4).stamp()
        (('op_id', 'w'), ('line', 4), ('leaf', True))
        """
        stamp = self.__dict__.get("_stamp")
        if stamp is None or stamp[0][1] != self.name or stamp[1][1] != self.line:
            stamp = self._stamp = (("op_id", self.name), ("line", self.line), ("leaf", True))
        return stamp


# Note [Lines on demand for ops]: the line of an entry of a JSON file is found
# when something asks for it (an error message, a node's metadata read), by
# ``find_line(index)``, a locator the loader shares between the entries of one
# list of ops: finding the lines of a million entries up front (a scan of the
# whole ops list, then a lookup per entry: ~5 us per op) cost more than the rest
# of loading them (the document's Note [Lines on demand]). The graph keeps the
# file's text for that (~90 bytes per op of a chain), not its parsed tree. A
# YAML file's reader has the line of every entry at hand: ``lineno`` is set at
# load and nothing of the document is kept.
class LineOnDemand:
    """``line``: ``lineno``, or the first time it is asked ``find_line(index)``
    (Note [Lines on demand for ops]). The subclass has the three slots."""

    __slots__ = ()

    @property
    def line(self):
        line = self.lineno
        if line is None and self.find_line is not None:
            line = self.lineno = self.find_line(self.index)
            self.find_line = None
        return line

    @line.setter
    def line(self, value):
        self.lineno = value
        self.find_line = None


class OpSpec(Record, LineOnDemand):
    # one per op of the file: no __dict__ each
    __slots__ = ("index", "id", "label", "op", "inputs", "outputs", "args", "retain_grad",
                 "lineno", "find_line", "_stamp", "call", "call_proved", "no_grad")
    _fields = ("index", "id", "label", "op", "inputs", "outputs", "args", "retain_grad",
               "lineno", "find_line")
    _repr_fields = ("index", "id", "label", "op", "inputs", "outputs", "args", "retain_grad",
                    "line")

    def __init__(self, index: int, id: str, label: str, op, inputs: list, outputs: list,
                 args: dict, retain_grad: bool = False, lineno: int | None = None,
                 find_line=None):
        self.index = index
        self.id = id
        self.label = label              # "ops[3] 'id' (mul)" for messages
        self.op = op
        self.inputs = inputs
        self.outputs = outputs
        self.args = args
        self.retain_grad = retain_grad
        self.lineno = lineno            # the entry's line, once known (see ``line``)
        self.find_line = find_line
        self._stamp = None
        # run(inputs, proved): the op with ``args`` bound at load, or None (Note
        # [ATen calls bound at load]; Note [Checks proved at load] in loader/bound_op.py)
        self.call = None
        # what ``call`` runs on proved inputs, called by the Graph itself (its failures
        # sorted by the op's ``failed``), or None: ``call`` then runs on every input
        self.call_proved = None
        # run with grad mode off, as under torch.no_grad() (Note [Ops run with grad mode off]
        # in loader/bound_op.py): the entry's ``no_grad: true``
        self.no_grad = False

    def _values(self):
        # equality as the dataclass had it: the locator of lines is not compared
        return (self.index, self.id, self.label, self.op, self.inputs, self.outputs,
                self.args, self.retain_grad, self.lineno)


    @property
    def stamp(self):
        """What the forward stamps on the op's node (Note [Metadata stamps]), made once:
        the (key, value) pairs, or with the line not found yet a ``_Stamp`` that finds
        it when the node's metadata is first read."""
        stamp = self._stamp
        if stamp is None or stamp.op_id != self.id:
            stamp = self._stamp = _Stamp(self.id, self)
        return stamp


class _Stamp:
    """The shared metadata pairs of one op's nodes: ``op_id`` and ``line``, the line
    read from the spec (found on demand) when a node's metadata is first read."""

    __slots__ = ("op_id", "spec")

    def __init__(self, op_id, spec):
        self.op_id = op_id
        self.spec = spec

    def __iter__(self):
        return iter((("op_id", self.op_id), ("line", self.spec.line)))

    def __len__(self):
        return 2


class BackwardSpec(Record):
    _fields = ("roots", "grad_roots", "inputs", "retain_graph", "create_graph", "allow_unused",
               "line")

    def __init__(self, roots: list, grad_roots: dict, inputs: list | None,
                 retain_graph: bool = False, create_graph: bool = False,
                 allow_unused: bool = False, line: int | None = None):
        self.roots = roots
        self.grad_roots = grad_roots
        self.inputs = inputs
        self.retain_graph = retain_graph
        self.create_graph = create_graph
        self.allow_unused = allow_unused
        self.line = line


class ForwardSpec(Record):
    """``expect.forward``: tensor name -> value spec, and the tolerance to compare with."""

    _fields = ("values", "rtol", "atol")

    def __init__(self, values: dict, rtol: float = 1e-7, atol: float = 0.0):
        self.values = values
        self.rtol = rtol
        self.atol = atol


class ExpectSpec(Record):
    """``reference``: {name: LeafSpec} of float64 reference gradients (``expect.reference``,
    see ``gradcli.verdict``); ``rounding``: {name: PyTorch's own float64 rounding spread}
    (``expect.rounding``, Note [The float64 yardstick]); ``perturbed``: {name: [LeafSpec]}
    of PyTorch's gradients with its leaves moved by one ulp (``expect.reference.perturbed``,
    Note [The float32 yardstick]); ``elementwise``: judge every gradient element-wise;
    ``forward``: values another runtime computed (``expect.forward``)."""
    _fields = ("grads", "numeric", "rtol", "atol", "order", "error", "reference", "elementwise",
               "forward", "rounding", "perturbed")

    def __init__(self, grads: dict, numeric: bool = False, rtol: float = 1e-7,
                 atol: float = 0.0, order: list | None = None, error: str | None = None,
                 reference: dict | None = None, elementwise: bool = False,
                 forward: ForwardSpec | None = None, rounding: dict | None = None,
                 perturbed: dict | None = None):
        self.forward = forward
        self.perturbed = perturbed or {}
        self.rounding = rounding or {}
        self.grads = grads
        self.numeric = numeric
        self.rtol = rtol
        self.atol = atol
        self.order = order
        self.error = error
        self.reference = reference or {}
        self.elementwise = elementwise


class NodeRun(Record):
    """One node evaluation of a backward, in the order they started."""

    # one per node that ran
    __slots__ = ("node", "op", "sequence_nr", "topological_nr", "device", "thread",
                 "graph_task", "depth", "start_s", "end_s")
    _fields = __slots__

    def __init__(self, node: str, op: str | None, sequence_nr: int, topological_nr: int,
                 device: str, thread: str, graph_task: int, depth: int, start_s: float,
                 end_s: float):
        self.node = node
        self.op = op
        self.sequence_nr = sequence_nr
        self.topological_nr = topological_nr
        self.device = device
        self.thread = thread
        self.graph_task = graph_task
        self.depth = depth
        self.start_s = start_s
        self.end_s = end_s

    def to_json(self):
        return {"node": self.node, "op": self.op, "sequence_nr": self.sequence_nr,
                "topological_nr": self.topological_nr, "device": self.device}


class Result(Record):
    _fields = ("graph", "grads", "order", "forward_s", "backward_s", "nodes_run", "file")

    def __init__(self, graph: str, grads: dict, order: list | None, forward_s: float,
                 backward_s: float, nodes_run: int = 0, file: str | None = None):
        self.graph = graph
        self.grads = grads              # name -> array (on its device)
        self.order = order              # [NodeRun], or None when the run was asked not to record it
        self.forward_s = forward_s
        self.backward_s = backward_s
        self.nodes_run = nodes_run      # how many nodes ran (recorded or not)
        self.file = file                # the graph file, for errors

    def to_json(self, with_data=True):
        grads = {}
        for name, g in self.grads.items():
            if g is None:               # an unused input (allow_unused)
                grads[name] = None
                continue
            arr = to_host(g)
            entry = {"shape": list(arr.shape), "dtype": str(arr.dtype), "device": _device_str(g)}
            if with_data:
                if arr.size == 0:       # otherwise the lists are bounded by the elements
                    _check_json_lists(name, arr.shape, self.file)
                entry["data"] = arr.tolist()
            grads[name] = entry
        if self.order is None:
            raise ValueError("this run did not record its execution order (order=False)")
        return {"graph": self.graph, "grads": grads, "order": [r.node for r in self.order],
                "timing": {"forward_s": self.forward_s, "backward_s": self.backward_s}}

    def save_npz(self, path):
        np.savez(path, **{name: to_host(g) for name, g in self.grads.items() if g is not None})


# Note [Empty tensors in JSON]: a tensor with no element takes no memory (the budgets
# count bytes), but its JSON data nests one empty list per index of its leading dims:
# [4, 2**31, 6, 0] is 8.6e9 lists (MemoryError, or a 17 GB document). Over
# MAX_JSON_EMPTY_LISTS the gradient is refused in one line instead.
MAX_JSON_EMPTY_LISTS = 10 ** 6


def _check_json_lists(name, shape, file):
    lists, run = 0, 1
    for s in shape[:-1]:
        run *= s
        if run == 0:
            break
        lists += run
    if lists > MAX_JSON_EMPTY_LISTS:
        raise GraphError(f"the gradient of shape {list(shape)} has no element, but its JSON data "
                         f"would nest {lists} empty lists (over {MAX_JSON_EMPTY_LISTS}): use "
                         f"--format table or --out FILE.npz", file, None, f"gradient {name!r}")


def _device_str(array):
    from .devices import device_of

    return str(device_of(array))


class Graph:
    """A loaded graph file. ``run()`` = ``forward()`` + ``backward()``."""

    def __init__(self, name, file, leaves, ops, backward, expect, base_dir):
        self.name = name
        self.file = file
        self.leaves = leaves
        self.ops = ops
        self.backward_spec = backward
        self.expect = expect
        self.base_dir = base_dir
        # name -> Tensor of the last forward that finished (Note [The last run's values])
        self.values = None
        self.seed = 0            # the file's seed: its random ops' generator (set by the loader)
        self._draws_random = None

    def fail(self, message, line=None, where=None):
        raise GraphError(message, self.file, line, where)

    # -- forward -----------------------------------------------------------------------
    # Note [The last run's values]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # ``values`` keeps the tensors of the last forward that finished, for what reads them
    # after a run (validate's forward check, precision, ``order --dot``): every op's output,
    # so all of that forward's activations. A forward (``forward()`` or ``run()``) lets go
    # of them as it starts, before it makes its own: holding them through the next forward
    # had two runs' activations alive at once (resnet18, three runs: a peak of 317 MB over
    # the loaded graph against 217 MB, PyTorch's loop 216 MB). Until the forward finishes
    # ``values`` is None, which every reader takes as "run a forward"; a reader reads the
    # attribute once, since a run in another thread may drop it (Note [Concurrent runs]).
    def forward(self):
        """Run the ops in order with recording on; returns the named tensors
        (kept as ``values`` for ``backward()``)."""
        self.values = None            # Note [The last run's values]
        with paused():                # Note [Collector pauses]
            values = self._forward()
        self.values = values
        return values

    def current_values(self):
        """``values``, or a forward's when none has finished (Note [The last run's values])."""
        values = self.values
        return values if values is not None else self.forward()

    def _forward(self):
        if not self.draws_random():
            return self._run_ops()
        from .ops.rng import seeded

        with seeded(self.seed):      # Note [the graph's generator] (gradcli/ops/rng.py)
            return self._run_ops()

    def draws_random(self):
        """Does an op of this graph draw random numbers (the op says so)? Asked once; a graph
        without one runs without importing the generator."""
        if self._draws_random is None:
            self._draws_random = any(getattr(spec.op, "draws_random", False) for spec in self.ops)
        return self._draws_random

    def _run_ops(self):
        from .autograd import Tensor, set_grad_enabled
        from .autograd.node import AccumulateGrad

        values = {}
        proved = True        # the leaves are those the file declares (Note [Checks proved at load])
        # (the leaves' accumulators, held through the forward: a leaf holds its own weakly,
        # Note [The leaf holds its accumulator weakly]; the nodes' edges hold them after)
        accumulators = []
        for name, leaf in self.leaves.items():
            run = leaf._run or leaf.run_tuple()          # Note [A leaf's run]
            t = values[name] = Tensor(run[0], leaf.requires_grad, name)
            if not run[1]:
                proved = False
            if t.requires_grad:      # (a fresh leaf: its accumulator made and stamped here)
                acc = AccumulateGrad(t, run[2])
                t._grad_accumulator = weakref.ref(acc)
                acc._metadata = run[3]
                accumulators.append(acc)
        with set_grad_enabled(True):
            for spec in self.ops:
                # The loader's checked ops turn every failure into a GraphError.
                call = spec.call
                if call is not None:     # (map: no comprehension frame per op)
                    inputs = list(map(values.__getitem__, spec.inputs))
                    fast = spec.call_proved if proved else None
                    if fast is None:
                        out = call(inputs, proved)
                    else:                # BoundOp.run's proved case inline
                        try:
                            out = fast(*inputs)
                        except Exception as exc:  # noqa: BLE001 - sorted by ``failed``
                            spec.op.failed(exc, inputs)
                else:
                    out = spec.op(*[values[n] for n in spec.inputs], **spec.args)
                if type(out) is Tensor and not spec.retain_grad and len(spec.outputs) == 1:
                    # the common case of the code below, without its lists
                    node = out.grad_fn
                    if node is not None:
                        if node._metadata is None:   # stamp_metadata's first case inline
                            node._metadata = spec.stamp
                        else:
                            node.stamp_metadata(spec.stamp)
                    name = out.name = spec.outputs[0]
                    values[name] = out
                    continue
                outs = out if isinstance(out, list) else [out]
                if len(outs) != len(spec.outputs):
                    self.fail(f"produces {len(outs)} outputs but {len(spec.outputs)} names are given",
                              spec.line, spec.label)
                node = outs[0].grad_fn
                if node is not None:
                    node.stamp_metadata(spec.stamp)
                for name, t in zip(spec.outputs, outs):
                    t.name = name
                    values[name] = t
                    if spec.retain_grad:
                        if not t.requires_grad:
                            self.fail(f"retain_grad on {name!r}, which does not require grad",
                                      spec.line, spec.label)
                        t.retain_grad()
        return values

    # -- backward ------------------------------------------------------------------------
    def root_grads(self, values=None):
        values = self.values if values is None else values
        spec = self.backward_spec
        roots, grads = [], []
        for name in spec.roots:
            t = values[name]
            if not t.requires_grad:
                self.fail(f"root {name!r} does not require grad (no input of the ops that "
                          "compute it requires grad)", spec.line, "backward")
            g = spec.grad_roots.get(name)
            if g is None:
                if t.data.size != 1:
                    self.fail(f"root {name!r} has shape {list(t.shape)}: a non-scalar root needs "
                              "an entry in grad_roots", spec.line, "backward")
                g = np.ones(t.shape, t.dtype)
            elif isinstance(g, float):
                g = np.full(t.shape, g, t.dtype)
            else:
                g = g.array(t.shape)
                if g.shape != t.shape:
                    self.fail(f"grad_roots.{name} has shape {list(g.shape)} but the root has shape "
                              f"{list(t.shape)}", g.line if hasattr(g, "line") else spec.line, "backward")
            roots.append(t)
            grads.append(to_device(g, t.device))
        return roots, grads

    def check_inputs_reachable(self, roots, inputs, values=None):
        """Each input must receive a gradient from some root: its own edge (the
        node *and* the output of it), as PyTorch's grad() checks per tensor."""
        edges = set()
        seen = set()
        stack = []
        for r in roots:
            edge = r.gradient_edge()
            edges.add(edge)
            stack.append(edge[0])
        while stack:
            fn = stack.pop()
            if fn in seen:
                continue
            seen.add(fn)
            for e in fn.next_edges:
                if e is not None:
                    edges.add(e)
                    stack.append(e[0])
        values = self.values if values is None else values
        for name in inputs:
            t = values[name]
            if not t.requires_grad:
                self.fail(f"input {name!r} does not require grad", self.backward_spec.line, "backward")
            if t.gradient_edge() not in edges and not self.backward_spec.allow_unused:
                self.fail(f"input {name!r} is not used to compute any root: One of the "
                          "differentiated Tensors appears to not have been used in the graph "
                          "(set allow_unused: true to allow it)", self.backward_spec.line,
                          "backward")

    def backward(self, *, inputs=None, retain_graph=None, engine=None, multithreading=True,
                 deterministic=False, anomaly=None, order=True):
        """Run the backward; returns (grads by name, [NodeRun] or with ``order=False``
        the number of nodes that ran, seconds)."""
        values = self.current_values()
        with paused():                # Note [Collector pauses]
            return self._backward(values, inputs, retain_graph, engine, multithreading,
                                  deterministic, anomaly, order)

    def _backward(self, values, inputs, retain_graph, engine, multithreading, deterministic,
                  anomaly, order=True):
        from .autograd import backward as autograd_backward
        from .autograd import detect_anomaly, grad as autograd_grad, set_multithreading_enabled
        from .autograd.graph_task import NodeCounter

        spec = self.backward_spec
        inputs = spec.inputs if inputs is None else inputs
        retain = spec.retain_graph if retain_graph is None else retain_graph
        roots, grads = self.root_grads(values)
        if inputs:
            for name in inputs:
                if name not in values:
                    self.fail(f"input {name!r} is not defined", spec.line, "backward")
            self.check_inputs_reachable(roots, inputs, values)
        # Note [Execution-order records]: a record per node (name, thread, times)
        # only when asked for (order, --trace, validation, --format json); a
        # plain run counts the nodes instead, which keeps the engine's fast path.
        trace = [] if order else NodeCounter()
        anomaly_ctx = detect_anomaly(*anomaly) if anomaly else contextlib.nullcontext()
        if spec.create_graph:      # the backward records itself (higher-order gradients)
            import functools

            autograd_grad = functools.partial(autograd_grad, create_graph=True)
            autograd_backward = functools.partial(autograd_backward, create_graph=True)
        start = time.perf_counter()
        try:
            with set_multithreading_enabled(multithreading), anomaly_ctx:
                if inputs:
                    result = autograd_grad(roots, [values[n] for n in inputs], grads,
                                           retain_graph=retain, allow_unused=spec.allow_unused,
                                           engine=engine, trace=trace,
                                           deterministic=deterministic)
                    named = dict(zip(inputs, result))
                else:
                    autograd_backward(roots, grads, retain_graph=retain, engine=engine,
                                      trace=trace, deterministic=deterministic)
                    named = None
        except Exception as exc:  # noqa: BLE001 - reported with the node and op
            node = getattr(exc, "gradcli_node", None)
            raise BackwardError(self.describe_failure(exc, node), exc, node, self.file) from exc
        elapsed = time.perf_counter() - start
        if named is None:
            named = {}
            for name, t in values.items():      # (is_leaf inline: grad_fn is None)
                if (t.requires_grad and t.grad_fn is None) or t.retains_grad:
                    named[name] = t.grad
        if spec.create_graph:      # differentiable gradients (Tensors) are reported as arrays
            from .autograd import Tensor

            named = {k: g.data if isinstance(g, Tensor) else g for k, g in named.items()}
        return named, (self._order(trace, start) if order else trace.count), elapsed

    # -- naming nodes in messages ------------------------------------------------------
    def describe_failure(self, exc, node):
        """The one-line message of a failed backward (see BackwardError)."""
        from .autograd.engine import AnomalyError

        msg = str(exc).strip().replace("\n", " ") or type(exc).__name__
        line = node.metadata.get("line") if node is not None else None
        loc = "" if not self.file else (f"{self.file}:{line}: " if line else f"{self.file}: ")
        if node is None:
            return f"{loc}backward failed: {msg}"
        if not isinstance(exc, AnomalyError):     # anomaly errors keep PyTorch's wording
            msg = f"backward failed in {node.name}: {msg}"
        return f"{loc}{msg}{self.describe_node(node)}"

    def describe_node(self, node):
        """`` (node created by op ops[3] 'mylog' at g.yaml:14)``, or for a leaf's
        accumulator `` (node accumulates into tensor 'W' at g.yaml:5)``; empty
        for a node the graph did not record."""
        meta = node.metadata
        op_id, line = meta.get("op_id"), meta.get("line")
        if not op_id:
            return ""
        at = f" at {self.file}:{line}" if self.file and line else ""
        if meta.get("leaf"):
            return f" (node accumulates into tensor {op_id!r}{at})"
        for spec in self.ops:
            if spec.id == op_id and (line is None or spec.line == line):
                default = f"ops[{spec.index}]"
                label = default if spec.id == default else f"{default} {spec.id!r}"
                return f" (node created by op {label}{at})"
        # An op inside a checkpoint body.
        label = op_id if op_id.startswith("ops[") else repr(op_id)
        return f" (node created by op {label}{at})"

    def _order(self, trace, t0):
        import threading

        names = {t.ident: t.name for t in threading.enumerate()}
        return [NodeRun(node=fn.name, op=fn.metadata.get("op_id"), sequence_nr=fn.sequence_nr,
                        topological_nr=fn.topological_nr, device=str(fn.device),
                        thread=names.get(tid, str(tid)), graph_task=gt, depth=depth,
                        start_s=start - t0, end_s=(end or start) - t0)
                for fn, tid, start, end, gt, depth in trace]

    def run(self, *, inputs=None, retain_graph=None, engine=None, multithreading=True,
            deterministic=False, anomaly=None, order=True) -> Result:
        """Forward then backward, timed separately. With ``order=False`` the
        Result's ``order`` is None (Note [Execution-order records]).

        Note [Concurrent runs]: each call runs its own forward (its own leaf
        tensors, nodes and gradients) and returns its own Result, so one Graph
        may be run from several threads at once. ``values`` is left holding
        the last forward that finished (Note [The last run's values]).
        """
        self.values = None            # Note [The last run's values]
        with paused():                # Note [Collector pauses]
            t0 = time.perf_counter()
            values = self._forward()
            forward_s = time.perf_counter() - t0
            grads, ran, backward_s = self._backward(values, inputs, retain_graph, engine,
                                                    multithreading, deterministic, anomaly, order)
        self.values = values
        if order:
            return Result(self.name, grads, ran, forward_s, backward_s, len(ran), self.file)
        return Result(self.name, grads, None, forward_s, backward_s, ran, self.file)

    def predicted_order(self):
        """The order a single-threaded backward runs nodes in (before running it)."""
        from .autograd import predicted_execution_order

        values = self.current_values()
        roots, _ = self.root_grads(values)
        inputs = self.backward_spec.inputs
        if inputs:      # as run does: an input must require grad and be reachable
            self.check_inputs_reachable(roots, inputs, values)
        return predicted_execution_order(
            [r.gradient_edge() for r in roots],
            [values[n].gradient_edge() for n in inputs] if inputs else None)
