"""An ONNX model to a gradcli graph file: one pass over the nodes, run as they are mapped.

Note [Import runs the model]: the importer runs every op it writes on the real inputs
(gradcli's own op forwards on NumPy arrays) while it maps the nodes, as the PyTorch
exporter re-runs its trace. So every value has a concrete shape and dtype when the
next node is mapped (``Reshape``'s ``0`` and ``-1``, ``Gemm``'s transposes, negative
axes are resolved against real shapes), and every value that derives from no leaf of
the file (``Shape``-derived sizes, ``Constant`` nodes, integer initializers, the
branch condition of an ``If``) is a constant: it is folded (ONNX's reference
implementation computes it) and written as a tensor only when a written op reads it.
A value that derives from a graph input or a float initializer is dynamic: its node
becomes one or more written ops whose id is the node's name (``NODE``, then ``NODE#2``,
``NODE#3`` for the further ops of one node), so errors and ``gradcli order`` name
the ONNX node.

Names: initializers and graph inputs keep their ONNX names; other values too when
they fit the graph format's names (``[A-Za-z_][A-Za-z0-9_./-]*``), else their invalid
characters become ``_`` (and a ``v_`` prefix where the first one is not a letter).
The projection leaves are ``loss.projection.i`` (Note [Projection loss] in
bridges/torch/exporter.py); the loss ops are ``loss.*``.
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import WEIGHTS_FILE  # noqa: F401 - the file the arrays go to
from ..graphfile import FILE_DTYPES, ExportedGraph, c_array
from .errors import PROJECTION, SUM, OnnxError
from .reader import TensorReader, dtype_of, nbytes, read_model
from .values import FLOATS, Value

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
# expect.forward's tolerance by the model's floating dtype (onnxruntime's float32 kernels
# sum in other orders than NumPy's).
FORWARD_TOLERANCE = {"float64": (1e-6, 1e-9), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3)}


class Converter:
    """The state of one import: values by ONNX name, the written ops, tensors and arrays."""

    def __init__(self, path, model, reader, *, float_dtype, max_tensor_bytes):
        self.path = path
        self.model = model
        self.reader = reader
        self.float_dtype = float_dtype          # None: as the file has them
        self.max_tensor_bytes = max_tensor_bytes
        self.opset = {(d.domain or ""): d.version for d in model.opset_import}
        self.values = {}
        self.ops = []
        self.tensors = {}                       # written leaves and constants
        self.arrays = {}
        self.used = set()
        self.node = None
        self.node_id = None
        self.emitted = 0
        self.stats_only = set()                 # leaves read only as running statistics
        self.grad_reads = set()
        self.read = set()                       # names a written op reads
        self.made = {}                          # id(Value) -> (entry, index) of this node
        self.prefix = ""                        # op ids inside a Loop/Scan body: LOOP/iterN/
        self.data_dependent = []                # Note [Data-dependent branches]
        self.unrolled = 0                       # body runs so far (Note [Bodies unroll])
        self.lowest = None                      # Note [Lowest precision on the path]

    # -- names ---------------------------------------------------------------------------
    def unique(self, base):
        # as ``gradcli export`` names an ``nn.Sequential``'s ``0.weight``: ``m.0.weight``
        if not NAME_RE.fullmatch(base):
            base = "m." + base if NAME_RE.fullmatch("m." + base) else _sanitize(base)
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}.{i}"
        self.used.add(name)
        return name

    def fail(self, message):
        where = f"node {self.node_id} ({self.node.op_type})" if self.node is not None else "graph"
        raise OnnxError(f"{self.path}: {where}: {message}")

    # -- dtypes --------------------------------------------------------------------------
    def fdt(self, dtype):
        """The dtype a floating value takes in the file (``--dtype``), others unchanged."""
        dtype = np.dtype(dtype)
        if self.float_dtype is not None and dtype.type in FLOATS:
            return self.float_dtype
        return dtype

    def constant(self, array, onnx_name=None):
        array = np.asarray(array)
        if array.dtype.type in FLOATS:
            array = array.astype(self.fdt(array.dtype), copy=False)
        return Value(array, onnx_name=onnx_name)

    def check_size(self, shape, dtype, what):
        """Refuse a value whose shape needs more bytes than the tensor budget."""
        if any(int(d) < 0 for d in shape):
            self.fail(f"{what}: negative dimension in shape {list(shape)}")
        size = nbytes(shape, dtype)
        if size > self.max_tensor_bytes:
            self.fail(f"{what}: shape {[int(d) for d in shape]} needs {size} bytes, over the "
                      f"tensor budget of {self.max_tensor_bytes} bytes")

    # -- leaves and constants in the file -----------------------------------------------
    def leaf(self, onnx_name, array, requires_grad):
        name = self.unique(onnx_name)
        value = Value(array, name=name, dynamic=True, onnx_name=onnx_name)
        self.tensors[name] = {"requires_grad": bool(requires_grad), "read": False}
        self.arrays[name] = c_array(array)
        return value

    def tensor_name(self, value):
        """The file's name of ``value``, writing a constant the first time an op reads it."""
        if value.name is None:
            array = value.array
            if str(array.dtype) not in FILE_DTYPES:
                array = array.astype(np.int64 if array.dtype.kind in "iu" else self.fdt(
                    np.float32))
            value.name = self.unique(value.onnx_name or f"const.{self.node_id}")
            self.tensors[value.name] = {"requires_grad": False, "read": True}
            self.arrays[value.name] = c_array(array)
        elif value.name in self.tensors:
            self.tensors[value.name]["read"] = True
        return value.name

    # -- writing ops ---------------------------------------------------------------------
    def emit(self, op_name, inputs, args=None, outputs=1):
        """Run op ``op_name`` (gradcli's, ATen or version 1) on ``inputs`` and, when an
        input is dynamic, write it. ``inputs`` as a graph entry lays them out: Values, None
        for an absent ``Tensor?``, lists for a ``Tensor[]``, numbers for wrapped numbers.
        Returns a Value, or a list of ``outputs`` Values for an op with several results."""
        from ...ops import OPS  # noqa: PLC0415

        op = OPS.get(op_name)
        if op is None or not op.public or not op.supported:
            self.fail(f"needs gradcli op {op_name}, which this version does not have "
                      "(see `gradcli ops`)")
        args = dict(args or {})
        checked = {}
        for key, val in args.items():
            spec = op.args.get(key)
            if spec is None:
                raise AssertionError(f"{op_name} has no arg {key}")     # a bug in a mapping
            try:
                checked[key] = spec.check(val) if spec.check else val
            except ValueError as exc:
                self.fail(f"{op_name}: bad {key} {val!r}: {exc}")
        dynamic = False

        def arr(x):
            nonlocal dynamic
            if isinstance(x, Value):
                dynamic = dynamic or x.dynamic
                return x.array
            if isinstance(x, list):
                return [arr(v) for v in x]
            return x

        arrays = [arr(x) for x in inputs]
        try:
            with np.errstate(all="ignore"):
                out = op(*arrays, **checked)
        except (ValueError, TypeError, IndexError, ArithmeticError, MemoryError,
                RuntimeError) as exc:
            text = str(exc).strip().splitlines()
            self.fail(f"{op_name} failed on inputs of shapes "
                      f"{[_shape_of(a) for a in arrays]}: {text[0] if text else type(exc).__name__}")
        outs = out if isinstance(out, (list, tuple)) else [out]
        for o in outs:
            self.check_size(np.shape(o), np.asarray(o).dtype, f"the result of {op_name}")
        results = [Value(np.asarray(o), dynamic=dynamic) for o in outs]
        if dynamic:
            for r in results:
                if r.dtype.type in FLOATS and (self.lowest is None or
                                               r.dtype.itemsize < self.lowest.itemsize):
                    self.lowest = r.dtype
            self.emitted += 1
            op_id = self.node_id if self.emitted == 1 else f"{self.node_id}#{self.emitted}"
            base = self.node_id if self.emitted == 1 else f"{self.node_id}.{self.emitted}"

            def name(x):
                if isinstance(x, Value):
                    n = self.tensor_name(x)
                    self.read.add(n)
                    return n
                if isinstance(x, list):
                    return [name(v) for v in x]
                return x

            entry = {"op": op_name, "inputs": [name(x) for x in inputs]}
            if op.multi_output:
                for i, r in enumerate(results):
                    r.name = self.unique(f"{base}.out{i}")
                    self.made[id(r)] = (entry, i)
                entry["outputs"] = [r.name for r in results]
            else:
                results[0].name = self.unique(f"{base}.out")
                self.made[id(results[0])] = (entry, None)
                entry["output"] = results[0].name
            if args:
                entry["args"] = args
            entry["id"] = op_id
            self.ops.append(entry)
        return results if op.multi_output else results[0]

    # -- the pass --------------------------------------------------------------------------
    def get(self, name):
        if name == "":
            return None
        value = self.values.get(name)
        if value is None:
            self.fail(f"reads {name!r}, which no earlier node, input or initializer defines")
        return value

    def run_graph(self, graph, attributes_of, operators):
        """Map every node of ``graph`` in order (its values join ``self.values``)."""
        for index, node in enumerate(graph.node):
            outer = (self.node, self.node_id, self.emitted, self.made)
            self.made = {}
            self.node = node
            self.node_id = self.prefix + (node.name or f"{node.op_type}_{index}")
            self.emitted = 0
            operator = operators[_key(node)]
            attrs = attributes_of(self, node, operator)
            ins = [self.get(n) for n in node.input]
            try:
                outs = operator.fn(self, ins, attrs, len(node.output))
            except OnnxError:
                raise
            except (ValueError, TypeError, IndexError, KeyError, ArithmeticError) as exc:
                text = str(exc).strip().splitlines()
                self.fail(f"cannot map it: {text[0] if text else type(exc).__name__}")
            outs = outs if isinstance(outs, list) else [outs]
            for i, onnx_name in enumerate(node.output):
                if onnx_name == "" or i >= len(outs) or outs[i] is None:
                    continue
                if onnx_name in self.values:
                    self.fail(f"defines {onnx_name!r}, which an input, initializer or earlier "
                              "node already defines (ONNX values are assigned once)")
                v = outs[i]
                if not v.dynamic and v.onnx_name is None:
                    v.onnx_name = onnx_name
                self._rename(v, onnx_name)
                self.values[onnx_name] = v
            self.node, self.node_id, self.emitted, self.made = outer

    def run_body(self, graph, bound, prefix):
        """Run a subgraph (an ``If`` branch, a ``Loop`` or ``Scan`` body) once: its inputs
        bound to ``bound`` (Values in the order of ``graph.input``), the outer values visible,
        its own values scoped to this run; op ids start with ``prefix``. Returns the Values
        of its outputs."""
        from .table import OPERATORS, attributes_of

        if len(bound) != len(graph.input):
            self.fail(f"its body takes {len(graph.input)} inputs, the node gives {len(bound)}")
        outer_values, outer_prefix = self.values, self.prefix
        self.values = dict(outer_values)
        for vi, value in zip(graph.input, bound):
            self.values[vi.name] = value
        for t in graph.initializer:
            self.values[t.name] = self.constant(self.reader.array(t, f"initializer {t.name!r}"),
                                                onnx_name=t.name)
        self.prefix = prefix
        try:
            self.run_graph(graph, attributes_of, OPERATORS)
            return [self.get(o.name) for o in graph.output]
        finally:
            self.values, self.prefix = outer_values, outer_prefix

    def _rename(self, value, onnx_name):
        """A node's result takes the ONNX value's name when no op has read it yet."""
        made = self.made.pop(id(value), None)
        if made is None or value.name in self.read:
            return
        entry, index = made
        self.used.discard(value.name)
        value.name = self.unique(onnx_name)
        if index is None:
            entry["output"] = value.name
        else:
            entry["outputs"][index] = value.name


def _key(node):
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _sanitize(name):
    text = re.sub(r"[^A-Za-z0-9_./-]", "_", name)
    if not text or not re.match(r"[A-Za-z_]", text[0]):
        text = "v_" + text
    return text


def _shape_of(a):
    if isinstance(a, list):
        return [_shape_of(x) for x in a]
    return list(np.shape(a)) if a is not None else None


# -- the whole import ---------------------------------------------------------------------
def from_onnx(path, *, inputs=None, input_shapes=None, loss=PROJECTION, dtype=None,
              requires_grad="all", seed=0, name=None, reference=True, max_tensor_bytes=None,
              max_file_bytes=None):
    """Import the ONNX model at ``path``; see the module docstring.

    ``inputs``: ``{input name: array}``; ``input_shapes``: ``{input name: shape}`` for
    seeded standard-normal inputs (integers: zeros) where the file's shape is not fixed.
    ``loss``: ``"projection"`` or ``"sum"``. ``dtype``: ``"float32"``/``"float64"`` for
    every floating tensor. ``requires_grad``: ``"all"`` (inputs and float initializers)
    or a collection of names. ``reference``: add onnxruntime's outputs as
    ``expect.forward`` when onnxruntime is installed. Raises OnnxError.

    >>> g = from_onnx("mlp.onnx", dtype="float64")         # doctest: +SKIP
    >>> g.write("out")                                      # doctest: +SKIP
    'out/graph.yaml'
    """
    from ...loader import default_max_graph_bytes, default_max_tensor_bytes
    from .table import OPERATORS, attributes_of, unsupported

    max_tensor_bytes = max_tensor_bytes or default_max_tensor_bytes()
    max_file_bytes = max_file_bytes or default_max_graph_bytes()
    if loss not in (PROJECTION, SUM):
        raise OnnxError(f"unknown loss {loss!r} (expected projection or sum)")
    float_dtype = None
    if dtype is not None:
        if str(dtype) not in ("float32", "float64"):
            raise OnnxError(f"dtype must be float32 or float64, not {dtype!r}")
        float_dtype = np.dtype(str(dtype))
    model = read_model(path, max_file_bytes)
    missing = unsupported(model)
    if missing:
        raise OnnxError(f"{path}: unsupported operators: {', '.join(missing)}")
    reader = TensorReader(path, max_tensor_bytes, max_file_bytes)
    conv = Converter(path, model, reader, float_dtype=float_dtype,
                     max_tensor_bytes=max_tensor_bytes)
    graph = model.graph
    init_names = {t.name for t in graph.initializer}
    real_inputs = [i for i in graph.input if i.name not in init_names]
    feeds = _inputs(conv, real_inputs, dict(inputs or {}), dict(input_shapes or {}), seed)
    wants = _requires(requires_grad, [i.name for i in real_inputs] + sorted(init_names), path)
    explicit = (lambda n: False) if requires_grad in (None, "all") else wants
    file_float = None
    for vi in real_inputs:
        arr = feeds[vi.name]
        if arr.dtype.type not in FLOATS:
            # Note [Integer inputs are constants]: no gradient reaches an integer or bool
            # input (token ids, a sample rate); the file replays the model on these values,
            # so they fold like any constant: a branch or a size they decide is resolved
            # at import, and an op that reads them reads a constant tensor of that name.
            conv.values[vi.name] = Value(arr, onnx_name=vi.name)
            continue
        file_float = file_float or arr.dtype
        conv.values[vi.name] = conv.leaf(vi.name, arr.astype(conv.fdt(arr.dtype), copy=False),
                                         wants(vi.name))
    for t in graph.initializer:
        arr = reader.array(t, f"initializer {t.name!r}")
        # Note [One-element initializers are constants]: exporters store the numbers of
        # the model's code as initializers (the 2.0 of ``x ** 2``, an attention scale);
        # PyTorch ran them as Python numbers (``pow.Tensor_Scalar``, no gradient). A
        # one-element float initializer is therefore a constant, unless --requires-grad
        # names it.
        if arr.dtype.type in FLOATS and (arr.size != 1 or explicit(t.name)):
            file_float = file_float or arr.dtype
            conv.values[t.name] = conv.leaf(t.name, arr.astype(conv.fdt(arr.dtype), copy=False),
                                            wants(t.name))
        elif arr.dtype.type in FLOATS:
            conv.values[t.name] = conv.constant(arr, onnx_name=t.name)
        else:
            conv.values[t.name] = Value(arr, onnx_name=t.name)
    if graph.sparse_initializer:
        raise OnnxError(f"{path}: sparse initializers are not supported")
    conv.run_graph(graph, attributes_of, OPERATORS)
    outputs = []
    for vi in graph.output:
        conv.node = None
        outputs.append((vi.name, conv.get(vi.name)))
    root = _loss(conv, outputs, loss, seed)
    for leaf in conv.stats_only - conv.grad_reads:
        conv.tensors[leaf]["requires_grad"] = False
    tensors = {k: {"requires_grad": v["requires_grad"]} for k, v in conv.tensors.items()
               if v["read"]}
    arrays = {k: conv.arrays[k] for k in tensors}
    forward, tolerance, refused = None, None, None
    if reference:
        forward, refused = _reference(path, feeds, outputs, conv)
        floating = str(file_float) if file_float is not None else "float32"
        # Note [Lowest precision on the path]: a float64 model that computes part of its
        # path in float32 (transformers' rotary embeddings run in float32 with autocast
        # off) is compared with onnxruntime at float32's tolerance, as gradcli's float32
        # verdict follows the lowest precision on the path
        if conv.lowest is not None and conv.lowest.itemsize < np.dtype(floating).itemsize:
            floating = str(conv.lowest)
        tolerance = FORWARD_TOLERANCE.get(floating, FORWARD_TOLERANCE["float32"])
    written_float = str(conv.fdt(file_float or np.float32))
    result = ExportedGraph.build(
        name=name or (graph.name if graph.name and NAME_RE.fullmatch(graph.name) else "onnx"),
        tensors=tensors, arrays=arrays, ops=conv.ops, root=root, grads={}, order=None,
        floating=written_float, forward=forward, forward_tolerance=tolerance)
    result.header = _header(path, model, feeds, loss, seed, written_float, forward is not None)
    result.lowest_float = str(conv.lowest) if conv.lowest is not None else written_float
    if conv.lowest is not None and conv.lowest.itemsize < np.dtype(written_float).itemsize:
        result.header += (f"\nprecision: the model computes part of its path in "
                          f"{conv.lowest}; expect.forward's tolerance is {conv.lowest}'s.")
    if refused:
        result.header += f"\nno expect.forward: onnxruntime cannot run the model ({refused})."
    if conv.data_dependent:
        # Note [Data-dependent branches]: as gradcli export says of a traced path
        result.document["x-data-dependent"] = list(conv.data_dependent)
        result.header += (f"\ndata-dependent: this graph is the path these inputs took; "
                          f"{len(conv.data_dependent)} decision(s) the data made are fixed "
                          "(x-data-dependent lists them); other inputs may need another import.")
    return result


def _header(path, model, feeds, loss, seed, floating, has_forward):
    import os

    opset = ", ".join(f"{d.domain or 'ai.onnx'} {d.version}" for d in model.opset_import)
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape)) or 'scalar'}" for k, v in feeds.items())
    loss_text = ("loss: sum_i sum(out_i * R_i), R_i = loss.projection.i: standard normal from "
                 f"numpy.random.default_rng({seed} + i)" if loss == PROJECTION
                 else "loss: sum_i sum(out_i)")
    text = (f"Imported from {os.path.basename(path)} (opset {opset}) by gradcli import: "
            f"{floating}, inputs {shapes or 'none'}, seed {seed}.\n{loss_text}.")
    if has_forward:
        text += "\nexpect.forward: onnxruntime's outputs of the model on the same inputs."
    return text


def _requires(spec, names, path):
    if spec in (None, "all"):
        return lambda n: True
    wanted = set(spec.split(",") if isinstance(spec, str) else spec)
    unknown = sorted(wanted - set(names))
    if unknown:
        raise OnnxError(f"{path}: --requires-grad names {unknown[0]!r}, which is not an input "
                        "or initializer of the model")
    return lambda n: n in wanted


def _inputs(conv, real_inputs, given, shapes, seed):
    """The arrays of the graph's inputs: given, drawn for a given shape, or drawn for the
    file's fixed shape (seeded standard normal; integer inputs are zeros)."""
    path = conv.path
    known = {vi.name for vi in real_inputs}
    for k in list(given) + list(shapes):
        if k not in known:
            raise OnnxError(f"{path}: the model has no input {k!r} (inputs: "
                            f"{', '.join(sorted(known)) or 'none'})")
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in real_inputs:
        where = f"input {vi.name!r}"
        ttype = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise OnnxError(f"{path}: {where} is not a tensor (sequences and maps are not "
                            "supported)")
        dtype = dtype_of(ttype.elem_type, f"{path}: {where}")
        declared = None
        if ttype.HasField("shape"):
            # a negative size (-1, as Paddle's exporter writes) is not a size: unknown
            declared = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                        for d in ttype.shape.dim]
        if vi.name in given:
            arr = np.asarray(given[vi.name])
            if arr.dtype != dtype:
                if arr.dtype.kind != dtype.kind and not (arr.dtype.kind in "iu" and
                                                         dtype.kind in "iu"):
                    raise OnnxError(f"{path}: {where} is {dtype}, the array given is "
                                    f"{arr.dtype}")
                arr = arr.astype(dtype)
            if declared is not None and (len(declared) != arr.ndim or any(
                    d is not None and d != s for d, s in zip(declared, arr.shape))):
                raise OnnxError(f"{path}: {where} has shape {_dims(declared)}, the array given "
                                f"has {list(arr.shape)}")
        else:
            shape = shapes.get(vi.name)
            if shape is None:
                if declared is None or any(d is None for d in declared):
                    raise OnnxError(f"{path}: {where} has no fixed shape "
                                    f"({_dims(declared)}): give --input {vi.name}=FILE.npy or "
                                    f"--input-shape {vi.name}=N,C,...")
                shape = declared
            elif declared is not None and (len(declared) != len(shape) or any(
                    d is not None and d != s for d, s in zip(declared, shape))):
                raise OnnxError(f"{path}: {where} has shape {_dims(declared)}, not "
                                f"{list(shape)}")
            conv.check_size(shape, dtype, where)
            if dtype.type in FLOATS:
                arr = rng.standard_normal(tuple(shape)).astype(dtype)
            else:
                arr = np.zeros(tuple(shape), dtype)
        conv.check_size(arr.shape, arr.dtype, where)
        feeds[vi.name] = arr
    return feeds


def _dims(declared):
    if declared is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in declared) + "]"


def _loss(conv, outputs, loss, seed):
    """Write the loss ops; returns the root's name (Note [Projection loss])."""
    conv.node, conv.node_id, conv.emitted = None, "loss", 0
    total = None
    floating = [(i, name, v) for i, (name, v) in enumerate(outputs)
                if v.dynamic and v.dtype.type in FLOATS]
    if not floating:
        raise OnnxError(f"{conv.path}: no graph output is a floating value computed from the "
                        "inputs or initializers: there is nothing to differentiate")
    for k, (i, _name, v) in enumerate(floating):
        conv.node_id, conv.emitted = f"loss.{k}", 0
        term = v
        if loss == PROJECTION:
            r = np.random.default_rng(seed + k).standard_normal(v.shape).astype(v.dtype)
            leaf = conv.leaf(f"loss.projection.{k}", r, False)
            term = conv.emit("aten.mul.Tensor", [v, leaf])
        term = conv.emit("aten.sum.default", [term])
        total = term if total is None else conv.emit("aten.add.Tensor", [total, term])
    return total.name


def _reference(path, feeds, outputs, conv):
    """onnxruntime's values of the graph outputs gradcli computes, and why there are none
    (``(None, None)`` without onnxruntime).

    Note [onnxruntime refuses]: onnxruntime lacks some kernels the ONNX standard defines
    (batch-first recurrent layers, ``layout=1``, among them). A model it cannot run still
    imports, without ``expect.forward``; the header says why, in onnxruntime's first line.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        return None, None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4
    try:
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        results = session.run([n for n, _ in outputs], feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own refusal, in one line
        text = str(exc).strip().splitlines()
        return None, text[0][:300] if text else type(exc).__name__
    forward = {}
    for (_n, v), r in zip(outputs, results):
        if v.dynamic and v.name is not None:
            forward[v.name] = np.asarray(r)
    return forward, None
