"""Load a graph file (format version 1, docs/graph-format.md) into a Graph.

``load`` checks the whole file statically (keys, names, ops, arities, args,
devices, files, and every op's output shapes and dtypes against its inputs'
and the memory budget, from the op's own ``infer``; the memory of the whole
graph and the time its backward may wait on purpose, from the op's contract) and raises a one-line
GraphError naming the file, the line, the op and the problem. Running the
forward (``Graph.forward``) records the autograd graph and reports what only
values tell (a class index out of range, ...) the same way; a failure of the
op library that is not the input's fault is an OpBugError (a bug: exit 3).
Everything about an op comes from its ``Op`` object: no op is named here.
"""
from __future__ import annotations

import os
import re
import sys
import zlib
from typing import NamedTuple

import numpy as np

from . import devices as D
from .collector import paused
from .document import Document, decode_text, parse_json, parse_yaml, read_document
from .errors import BackwardError, GraphError, OpBugError
from .errors import first_line as _first_line
from .graph import BackwardSpec, ExpectSpec, ForwardSpec, Graph, LeafSpec, LineOnDemand, OpSpec
from .weights import WeightFiles

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")     # whole names only: fullmatch
DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64,
          "int32": np.int32, "int64": np.int64, "bool": np.bool_}
TOP_KEYS = {"version", "name", "seed", "tensors", "ops", "backward", "expect"}
TENSOR_KEYS = {"shape", "dtype", "device", "requires_grad", "value", "init", "file", "key"}
INIT_KEYS = {"dist", "mean", "std", "low", "high", "fill", "seed"}
INIT_DISTS = ("zeros", "ones", "normal", "uniform", "arange", "full")
OP_KEYS = {"op", "inputs", "output", "outputs", "args", "id", "retain_grad", "device", "body",
           "function"}
BACKWARD_KEYS = {"roots", "grad_roots", "inputs", "retain_graph", "create_graph", "allow_unused"}
EXPECT_KEYS = {"grads", "numeric", "rtol", "atol", "order", "error", "reference", "elementwise",
               "forward"}
FORWARD_KEYS = {"values", "rtol", "atol"}
# Note [Checkpoint nesting]: the forward of nested checkpoints, and the re-run of
# the body inside each checkpoint's backward, recurse one Python call chain per
# level (~5 frames); 170 levels still run under Python's default recursion
# limit, 200 do not. Deeper files are refused at load with one line instead of
# a RecursionError in the loader, the forward or the backward.
MAX_CHECKPOINT_NESTING = 128


def default_max_tensor_bytes() -> int:
    """A quarter of physical memory (or 4 GiB where that cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30


def default_max_graph_bytes() -> int:
    """Half of physical memory (or 8 GiB where that cannot be read)."""
    return 2 * default_max_tensor_bytes()


# Note [Time bounds]: a `delay` op may wait at most 60 s per backward call (its own
# check, ms + jitter_ms included); the loader bounds the sum over the file of what
# every op says its backward may wait (``Op.worst_backward_ms``), so that no file
# makes one backward wait longer than this.
MAX_BACKWARD_WAIT_MS = 60_000


class LoadOptions:
    def __init__(self, device_map=None, allow_code=False, allow_outside_paths=False,
                 max_tensor_bytes=None, max_document_bytes=None, max_graph_bytes=None):
        self.device_map = dict(device_map or {})
        self.allow_code = allow_code
        self.allow_outside_paths = allow_outside_paths
        self.max_tensor_bytes = max_tensor_bytes or default_max_tensor_bytes()
        self.max_document_bytes = max_document_bytes    # None: the reader's default budget
        self.max_graph_bytes = max_graph_bytes or default_max_graph_bytes()


def load(path, *, device_map=None, allow_code=False, allow_outside_paths=False,
         max_tensor_bytes=None, max_document_bytes=None, max_graph_bytes=None) -> Graph:
    """Read, check and prepare a graph file; ``graph.run()`` then runs it."""
    path = os.fspath(path)
    options = LoadOptions(device_map, allow_code, allow_outside_paths, max_tensor_bytes,
                          max_document_bytes, max_graph_bytes)
    with paused():   # Note [Collector pauses]
        doc = read_document(path, max_bytes=max_document_bytes)
        graph = _Loader(doc, os.path.dirname(os.path.abspath(path)),
                        os.path.splitext(os.path.basename(path))[0], options,
                        lazy_lines=path.lower().endswith(".json")).graph()
        _drop_tree(doc)
        return graph


def loads(text, *, format="yaml", name="graph", base_dir=".", **options) -> Graph:  # noqa: A002
    """Like ``load`` for a document in a string (``format`` is yaml or json)."""
    display = f"<{name}>"
    if format not in ("yaml", "json"):
        raise ValueError(f"format must be 'yaml' or 'json', not {format!r}")
    if isinstance(text, (bytes, bytearray)):
        text = decode_text(bytes(text), display)
    elif not isinstance(text, str):
        raise TypeError(f"loads() takes the document as str or bytes, not {type(text).__name__}")
    elif not text.strip():
        raise GraphError("the document is empty", display)
    options = LoadOptions(**options)
    parse = parse_json if format == "json" else parse_yaml
    with paused():   # Note [Collector pauses]
        doc = parse(text, display, max_bytes=options.max_document_bytes)
        graph = _Loader(doc, os.path.abspath(base_dir), name, options,
                        lazy_lines=format == "json").graph()
        _drop_tree(doc)
        return graph


def _drop_tree(doc):
    """The parsed document is not kept with the graph: the ops of a JSON file find
    their lines from its text (Note [Lines on demand for ops] in graph.py)."""
    doc.data = None




def parse_device_map(text) -> dict:
    """``cuda=sim`` (comma-separated pairs) -> {"cuda": "sim"}."""
    mapping = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        src, sep, dst = part.partition("=")
        src, dst = src.strip(), dst.strip()
        if not sep or src not in D.DEVICE_TYPES or dst not in D.DEVICE_TYPES:
            raise ValueError(f"bad device map {part!r} (expected e.g. cuda=sim)")
        mapping[src] = dst
    return mapping


class _Loader:
    def __init__(self, doc: Document, base_dir, stem, options: LoadOptions, lazy_lines=False):
        self.doc = doc
        # Note [Lines on demand for ops] (graph.py): a JSON document finds an op's line
        # by scanning its text, on demand; a YAML document has every op's line at hand
        # (its reader records the top two levels), so they are taken at load and the
        # document is not kept.
        self.lazy_lines = lazy_lines
        self.file = doc.path
        self.base_dir = base_dir
        self.stem = stem
        self.options = options
        self._infer_cache = {}       # Note [Infer cache]
        self._allocate_cache = {}    # (shape, dtype) results -> their bytes (as float64)
        self.graph_bytes = 0         # Note [The memory budget of a whole graph]
        self.graph_bytes64 = 0       # the same with every float tensor in float64 (gradcheck)
        self.wait_ms = 0             # Note [Time bounds]
        self._plain = {}             # op name -> (op, min, max inputs) or False (Note [Plain op entries])
        self._plain_results = {}     # (op, *input metas) -> (output meta, sizes, checked)
        self._line_finders = {}      # path of a list of ops -> _OpLines
        self.weights = WeightFiles()  # Note [Weights read once]

    # -- errors -------------------------------------------------------------------
    def fail(self, message, path=(), where=None):
        raise GraphError(message, self.file, self.doc.line(*path), where)

    def check_keys(self, mapping, allowed, path, where, what):
        for key in mapping:
            if key in allowed or (isinstance(key, str) and key.startswith("x-")):
                continue
            hint = _close_matches(str(key), sorted(allowed))
            hint = f" (did you mean {hint[0]!r}?)" if hint else ""
            self.fail(f"unknown key {key!r} in {what}{hint}", path + (key,), where)

    def site(self, path, label, op_id, line=None):
        """Where an op entry is, for ``Op.for_entry`` (errors raised at the entry);
        ``line``: the entry's line when the caller has it already."""
        global _EntrySite
        if _EntrySite is None:
            from .ops.site import EntrySite as _EntrySite  # noqa: PLC0415

        def fail(message, key=None):
            self.fail(message, path + ((key,) if key is not None else ()), label)
        return _EntrySite(self.file, self.doc.line(*path) if line is None else line, label,
                          op_id, self.base_dir, self.options.allow_code, fail)

    def entry_line(self, base, i):
        """``(line, None)`` of entry ``i`` of the ops list at ``base``, or with lazy lines
        ``(None, finder)``: the shared locator that finds it on demand."""
        if not self.lazy_lines:
            return self.doc.line(*base, i), None
        finder = self._line_finders.get(base)
        if finder is None:
            finder = self._line_finders[base] = _OpLines(self.doc, base)
        return None, finder

    # Note [Plain op entries]
    # ~~~~~~~~~~~~~~~~~~~~~~~
    # Most entries of a big file are plain: ``{op, inputs, output}`` (an ``id``,
    # ``retain_grad``, empty ``args`` at most) of an op whose contract needs nothing
    # from the entry (public, supported, no user code, no body, no device key, bound
    # by the plain ``Op.for_entry``, named inputs, one output, no required args and
    # none that fail when absent, no backward wait), on inputs whose shapes and dtypes
    # an earlier entry of the same op had. ``plain_op`` checks such an entry with the
    # checks of ``op`` in one pass, without building paths, labels of the failures
    # or lists, and takes the inferred result, its bytes and the inputs the forward's
    # precheck compares with from that earlier entry (the op contract: they are a
    # function of the op and its inputs' shapes and dtypes). Anything else, and any
    # entry that fails a check, goes through ``op``'s general code, which raises the
    # error it always raised: the fast path only ever accepts what that code accepts,
    # and builds the same OpSpec.
    def plain_op(self, i, entry, defined, base, prefix):
        """``entry`` checked and built as ``op`` would, or None to let ``op`` do it."""
        if type(entry) is not dict or not entry.keys() <= _PLAIN_KEYS:
            return None
        name = entry.get("op")
        if type(name) is not str:
            return None
        plain = self.plain_contract(name)
        if plain is False:
            return None
        op, lo, hi = plain
        args = entry.get("args")
        if args is not None and (type(args) is not dict or args):
            return None
        inputs = entry.get("inputs")
        if type(inputs) is not list or not lo <= len(inputs) <= hi:
            return None
        metas = []
        for n in inputs:
            if type(n) is not str:
                return None
            meta = defined.get(n)
            if meta is None:
                return None
            metas.append(meta)
        out = entry.get("output")
        if (type(out) is not str or out in defined
                or not ((out.isascii() and out.isidentifier()) or NAME_RE.fullmatch(out))):
            return None
        retain = entry.get("retain_grad", False)
        if type(retain) is not bool:
            return None
        known = self._plain_results.get((op, *metas))
        if known is None:
            return None
        meta, (nbytes, nbytes64), checked = known
        if self.graph_bytes + nbytes > self.options.max_graph_bytes:
            return None
        where = f"{prefix}[{i}]"
        op_id = entry.get("id", where)
        if type(op_id) is not str or not op_id:
            return None
        label = f"{where} ({name})" if op_id == where else f"{where} {op_id!r} ({name})"
        self.graph_bytes += nbytes
        self.graph_bytes64 += nbytes64
        defined[out] = meta
        return self.op_spec(i, base, op_id, label, op, inputs, [out], {}, retain, checked)

    def plain_contract(self, name):
        """``_plain_contract(name)``, once per op name of the file."""
        plain = self._plain.get(name)
        if plain is None:
            plain = self._plain[name] = _plain_contract(name)
        return plain

    def op_spec(self, i, base, op_id, label, op, inputs, outputs, args, retain, checked):
        """The OpSpec of entry ``i``: its op wrapped in a _CheckedOp, with its line found
        on demand (Note [Lines on demand for ops]); ``checked``: the inputs' (shape,
        dtype) the loader already inferred on, or None."""
        line, find_line = self.entry_line(base, i)
        inputs = list(inputs)
        checked_op = _CheckedOp(op, label, self.file, line, inputs,
                                self.options.max_tensor_bytes, find_line, i)
        checked_op.checked = checked
        spec = OpSpec(index=i, id=op_id, label=label, op=checked_op, inputs=inputs,
                      outputs=list(outputs), args=args, retain_grad=retain, lineno=line,
                      find_line=find_line)
        bind_args = getattr(op, "bind_args", None)
        if bind_args is not None:      # Note [ATen calls bound at load]
            checked_op.bound = bind_args(args)
            checked_op.args = args
            spec.call = checked_op.run
        return spec

    # -- top level ------------------------------------------------------------------
    def graph(self) -> Graph:
        data = self.doc.data
        if not isinstance(data, dict):
            self.fail(f"the document must be a mapping with version, tensors, ops and backward, "
                      f"not {_kind(data)}")
        self.check_keys(data, TOP_KEYS, (), None, "the top level")
        if "version" not in data:
            self.fail("missing required key 'version' (this tool reads version: 1)")
        version = data["version"]
        if type(version) is not int or version != 1:      # 1.0 and true are not 1
            self.fail(f"unsupported format version {version!r} (this tool reads version: 1)",
                      ("version",))
        for key in ("tensors", "ops", "backward"):
            if key not in data:
                self.fail(f"missing required key {key!r}")
        name = data.get("name", self.stem)
        if not isinstance(name, str):
            self.fail("name must be a string", ("name",))
        seed = data.get("seed", 0)
        if not _is_int(seed) or seed < 0:
            self.fail(f"seed must be a non-negative int, got {seed!r}", ("seed",))
        self.seed = seed

        tensors = data["tensors"]
        if not isinstance(tensors, dict):
            self.fail(f"tensors must be a mapping from name to tensor, not {_kind(tensors)}",
                      ("tensors",))
        leaves = {}
        for tname, entry in tensors.items():
            self.check_name(tname, ("tensors", tname), f"tensors.{tname}")
            leaves[tname] = leaf = self.leaf(tname, entry, ("tensors", tname))
            self.allocate([(leaf.shape, leaf.dtype)], ("tensors", tname), f"tensors.{tname}")

        ops = data["ops"]
        if not isinstance(ops, list):
            self.fail(f"ops must be a list, not {_kind(ops)}", ("ops",))
        defined = {n: _Defined(leaf.shape, leaf.dtype, True) for n, leaf in leaves.items()}
        op_specs = [self.op(i, entry, defined) for i, entry in enumerate(ops)]

        backward = self.backward(data["backward"], defined, leaves)
        expect = self.expect(data.get("expect"), defined) if "expect" in data else None
        graph = Graph(name=name, file=self.file, leaves=leaves, ops=op_specs, backward=backward,
                      expect=expect, base_dir=self.base_dir)
        # What gradcheck may allocate, and what the graph's forward allocates as loaded
        # and in float64 (Note [The memory budget of a whole graph]).
        graph.seed = self.seed
        graph.max_graph_bytes = self.options.max_graph_bytes
        graph.forward_bytes = self.graph_bytes
        graph.float64_forward_bytes = self.graph_bytes64
        return graph

    # Note [The memory budget of a whole graph]: every op's result is checked against
    # the per-tensor budget by its ``infer``, but many results each under it add up
    # (twenty `exp`s over a large expanded view allocated 1.7 GB under an 80 MB
    # tensor budget). A recorded graph keeps every result alive for its backward, so
    # the loader adds up what the forward allocates, in file order: every leaf, and
    # every result of an op that is not a view (``Op.view``: a view shares its
    # input's memory; the ops that read it allocate their results in full). The
    # first op that takes the sum over the graph budget is refused, before anything
    # runs. Results of unknown shape (ops whose ``infer`` cannot tell) are not counted.
    def allocate(self, results, path, where):
        """Count ``[(shape, dtype)]`` that an op (or a leaf) allocates against the
        whole-graph memory budget."""
        try:                          # the same results again (a chain, layers): sums known
            key = tuple(results)
            sizes = self._allocate_cache.get(key)
        except TypeError:             # an unhashable shape (a list): no cache
            key = sizes = None
        if sizes is None:
            sizes = _result_sizes(results)
            if key is not None:
                self._allocate_cache[key] = sizes
        nbytes = sizes[0]
        self.graph_bytes += nbytes
        self.graph_bytes64 += sizes[1]
        budget = self.options.max_graph_bytes
        if self.graph_bytes > budget:
            self.fail(f"the graph's tensors need {self.graph_bytes} bytes up to here (this one: "
                      f"{nbytes} bytes), over the memory budget of {budget} bytes for the "
                      f"whole graph (--max-graph-bytes)", path, where)

    def wait(self, op, args, path, label):
        """Count what ``op``'s backward may wait on purpose (Note [Time bounds])."""
        ms = op.worst_backward_ms(args)
        if not ms:
            return
        self.wait_ms += ms
        if self.wait_ms > MAX_BACKWARD_WAIT_MS:
            self.fail(f"the ops' backward waits add up to {self.wait_ms:g} ms up to here, over "
                      f"the limit of {MAX_BACKWARD_WAIT_MS} ms for one backward", path, label)

    def check_name(self, name, path, where):
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            self.fail(f"invalid tensor name {name!r} (names match [A-Za-z_][A-Za-z0-9_./-]*)",
                      path, where)

    # -- tensors -----------------------------------------------------------------------
    def leaf(self, name, entry, path, *, for_grad_root=False) -> LeafSpec:
        where = f"tensors.{name}" if path[0] == "tensors" else ".".join(str(p) for p in path)
        if not isinstance(entry, dict):
            self.fail(f"a tensor entry must be a mapping, not {_kind(entry)}", path, where)
        self.check_keys(entry, TENSOR_KEYS, path, where, "a tensor entry")
        dtype_name = entry.get("dtype", "float64")
        if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
            self.fail(f"unknown dtype {dtype_name!r} (expected one of {', '.join(DTYPES)})",
                      path + ("dtype",), where)
        dtype = np.dtype(DTYPES[dtype_name])
        requires_grad = entry.get("requires_grad", False)
        if not isinstance(requires_grad, bool):
            self.fail(f"requires_grad must be true or false, got {requires_grad!r}",
                      path + ("requires_grad",), where)
        if requires_grad and dtype.kind != "f":
            self.fail(f"only floating point tensors can require gradients (dtype is {dtype_name})",
                      path + ("requires_grad",), where)
        device = self.device(entry.get("device", "cpu"), path + ("device",), where)

        sources = [k for k in ("value", "init", "file") if k in entry]
        if len(sources) > 1:
            self.fail(f"give exactly one of value, init, file (got {', '.join(sources)})", path, where)
        shape = entry.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
                self.fail(f"shape must be a list of non-negative ints, got {shape!r}",
                          path + ("shape",), where)
            shape = tuple(shape)
        if "key" in entry and "file" not in entry:
            self.fail("key is only valid with file", path + ("key",), where)

        source = sources[0] if sources else "init"
        if source == "value":
            array = self.value(entry["value"], dtype, path + ("value",), where)
            if shape is not None and array.shape != shape:
                self.fail(f"shape {list(shape)} does not match value of shape {list(array.shape)}",
                          path, where)
            self.check_size(array.shape, dtype, path, where)
            make = _constant(array)
            shape = array.shape
        elif source == "file":
            # without a dtype a file's array keeps its own; with one, they must agree
            make, shape, dtype = self.file_source(entry, dtype if "dtype" in entry else None,
                                                  shape, path, where)
            if requires_grad and dtype.kind != "f":
                self.fail(f"only floating point tensors can require gradients ({entry['file']!r} "
                          f"holds {dtype})", path + ("requires_grad",), where)
        else:
            if shape is None:
                if for_grad_root:
                    shape = None
                else:
                    self.fail("shape is required with init (or give value or file)", path, where)
            init = entry.get("init", "zeros")
            make = self.init(name, init, dtype, path + ("init",), where)
        if shape is not None:
            self.check_size(shape, dtype, path, where)
        make = self.guarded(make, source, path, where)
        return LeafSpec(name=name, shape=shape, dtype=dtype, device=device,
                        requires_grad=requires_grad, make=make, line=self.doc.line(*path))

    def guarded(self, make, source, path, where):
        """``make`` with its failures (at forward time) reported as GraphErrors."""
        file, line = self.file, self.doc.line(*path)
        budget = self.options.max_tensor_bytes

        def guarded_make(shape=None):
            if shape is not None:
                nbytes = _nbytes(shape, 1)
                if nbytes > budget:
                    raise GraphError(f"tensor of shape {list(shape)} is over the memory budget of "
                                     f"{budget} bytes (--max-tensor-bytes)", file, line, where)
            try:
                return make(shape)
            except GraphError:
                raise
            except MemoryError:
                raise GraphError(f"out of memory creating the tensor from its {source}",
                                 file, line, where) from None
            except Exception as exc:  # noqa: BLE001 - reported as an error in the file
                raise GraphError(f"cannot create the tensor from its {source}: "
                                 f"{_first_line(exc)}", file, line, where) from None
        return guarded_make

    def device(self, spec, path, where):
        if not isinstance(spec, str):
            self.fail(f"device must be a string such as cpu, cuda:0 or sim:0, got {spec!r}",
                      path, where)
        if len(spec) > 16:          # no device string is this long (sim:N has at most 9 digits)
            self.fail(f"unknown device {_short(spec)} of {len(spec)} characters (expected cpu, "
                      "cuda:N or sim:N)", path, where)
        try:
            dev = D.device(spec)
            mapped = self.options.device_map.get(dev.type)
            if mapped and mapped != dev.type:
                kind = D.DEVICE_TYPES[mapped]
                dev = D.device(f"{mapped}:{max(dev.index, 0)}" if kind.is_accelerator else mapped)
            D.check_available(dev)
        except D.DeviceError as exc:
            self.fail(str(exc), path, where)
        return dev

    def value(self, value, dtype, path, where):
        if isinstance(value, bool) or isinstance(value, (int, float)) or isinstance(value, list):
            _check_numeric(value, lambda msg: self.fail(msg, path, where))
            try:
                return np.array(value, dtype=dtype)
            except (ValueError, TypeError, OverflowError) as exc:
                if "inhomogeneous" in str(exc) or "sequence" in str(exc):
                    self.fail("bad value: a nested list whose rows differ in length (the value "
                              "must be rectangular)", path, where)
                if isinstance(exc, OverflowError) or "cannot convert float" in str(exc):
                    # NumPy: "Python int too large to convert to C long", "cannot convert
                    # float infinity to integer"; PyTorch's wording instead
                    self.fail(f"bad value: a number cannot be converted to type "
                              f"{np.dtype(dtype) if dtype is not None else 'int64'} without "
                              f"overflow (inf, nan or out of its range)", path, where)
                self.fail(f"bad value: {_first_line(exc)}", path, where)
        self.fail(f"value must be a number or a nested list of numbers, not {_kind(value)}",
                  path, where)

    def init(self, name, init, dtype, path, where):
        if isinstance(init, str):
            spec = {"dist": init}
        elif isinstance(init, dict):
            self.check_keys(init, INIT_KEYS, path, where, "init")
            spec = dict(init)
        else:
            self.fail(f"init must be one of {', '.join(INIT_DISTS)} or a mapping, got {init!r}",
                      path, where)
        dist = spec.get("dist")
        if dist not in INIT_DISTS:
            self.fail(f"unknown init {dist!r} (expected one of {', '.join(INIT_DISTS)})", path, where)
        for key in ("mean", "std", "low", "high", "fill"):
            if key in spec and not _is_number(spec[key]):
                self.fail(f"init {key} must be a number, got {_short(spec[key])}", path + (key,),
                          where)
            if key in spec and not _finite_float(spec[key]):
                self.fail(f"init {key} must be finite, got {_short(spec[key])}",
                          path + (key,), where)
        if dist == "full" and "fill" in spec and not _fits(spec["fill"], dtype):
            # as torch.full: "value cannot be converted to type ... without overflow"
            self.fail(f"init fill {_short(spec['fill'])} cannot be converted to {dtype} without "
                      "overflow", path + ("fill",), where)
        if spec.get("std", 0) < 0:
            self.fail(f"init std must be non-negative, got {spec['std']!r}", path + ("std",), where)
        if dist == "uniform" and spec.get("low", 0.0) > spec.get("high", 1.0):
            self.fail(f"init low ({spec.get('low', 0.0)!r}) is above high "
                      f"({spec.get('high', 1.0)!r})", path, where)
        if dist == "full" and "fill" not in spec:
            self.fail("init full needs fill", path, where)
        seed = spec.get("seed")
        if seed is not None and (not _is_int(seed) or seed < 0):
            self.fail(f"init seed must be a non-negative int, got {seed!r}", path + ("seed",), where)
        # Seed per tensor: its own seed, else the file's seed combined with its name.
        seed_seq = [seed] if seed is not None else [self.seed, zlib.crc32(name.encode())]
        return _initializer(dist, spec, dtype, seed_seq)

    def file_source(self, entry, dtype, shape, path, where):
        rel = entry["file"]
        if not isinstance(rel, str) or not rel or "\x00" in rel:
            self.fail("file must be a path to a .npy or .npz file", path + ("file",), where)
        full = os.path.normpath(os.path.join(self.base_dir, rel))
        if not self.options.allow_outside_paths:
            base = os.path.realpath(self.base_dir)
            real = os.path.realpath(full)
            if os.path.commonpath([base, real]) != base:
                self.fail(f"file {rel!r} is outside the graph's folder (refused; pass "
                          "--allow-outside-paths to allow it)", path + ("file",), where)
        ext = os.path.splitext(full)[1].lower()
        if ext not in (".npy", ".npz"):
            self.fail(f"file {rel!r} must be a .npy or .npz file", path + ("file",), where)
        if not os.path.isfile(full):
            what = "is not a regular file" if os.path.exists(full) else "not found"
            self.fail(f"file {rel!r} {what}", path + ("file",), where)
        key = entry.get("key")
        if key is not None and (not isinstance(key, str) or not key):
            self.fail(f"key must be the name of an array in the .npz file, got {key!r}",
                      path + ("key",), where)
        if ext == ".npz" and key is None:
            self.fail(f"file {rel!r} is an .npz archive: give key to pick an array", path, where)
        if ext == ".npy" and key is not None:
            self.fail("key is only valid with an .npz file", path + ("key",), where)
        try:
            file_shape, file_dtype = self.weights.peek(full, key)
        except KeyError:
            self.fail(f"no array {key!r} in {rel!r}", path + ("key",), where)
        except (ValueError, OSError) as exc:
            self.fail(f"cannot read {rel!r}: {_first_line(exc)}", path + ("file",), where)
        except MemoryError:
            self.fail(f"cannot read {rel!r}: out of memory reading its header", path + ("file",), where)
        if file_dtype.hasobject:
            self.fail(f"{rel!r} holds pickled Python objects (refused: only plain numeric "
                      "arrays are loaded)", path + ("file",), where)
        if file_dtype.kind not in "biuf" or file_dtype.fields is not None:
            # complex would lose its imaginary part and datetimes become numbers, silently
            self.fail(f"{rel!r} holds an array of dtype {_short(str(file_dtype))} (only bool, "
                      "int and float arrays are loaded)", path + ("file",), where)
        if not all(_is_int(n) and n >= 0 for n in file_shape):
            self.fail(f"cannot read {rel!r}: its header gives the shape {_short(file_shape)}",
                      path + ("file",), where)
        if shape is not None and tuple(shape) != file_shape:
            self.fail(f"shape {list(shape)} does not match {rel!r} of shape {list(file_shape)}",
                      path, where)
        if dtype is None:
            if file_dtype.name not in DTYPES:
                self.fail(f"{rel!r} holds {file_dtype} (expected one of {', '.join(DTYPES)})",
                          path + ("file",), where)
            dtype = file_dtype
        elif file_dtype != dtype:
            self.fail(f"dtype {dtype.name} does not match {rel!r} of dtype {file_dtype}",
                      path + ("dtype",), where)
        self.check_size(file_shape, file_dtype, path, where)
        fail = self.fail

        weights = self.weights

        def make(shape=None):
            # The same member the header was read from (Note [One member, checked and
            # loaded]), read once and shared read-only (Note [Weights read once]); the
            # array it holds must still be what was checked at load.
            try:
                arr = weights.array(full, key)
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - any malformed or unreadable file
                fail(f"cannot read {rel!r}: {_first_line(exc)}", path + ("file",), where)
            if arr.shape != file_shape or arr.dtype != file_dtype:
                fail(f"{rel!r} changed since the graph was loaded (now {list(arr.shape)} "
                     f"{arr.dtype}, was {list(file_shape)} {file_dtype})", path + ("file",), where)
            return arr

        return make, file_shape, dtype

    def check_size(self, shape, dtype, path, where):
        nbytes = _nbytes(shape, np.dtype(dtype).itemsize)
        if nbytes > self.options.max_tensor_bytes:
            self.fail(f"tensor of shape {list(shape)} needs {nbytes} bytes, over the memory budget "
                      f"of {self.options.max_tensor_bytes} bytes (--max-tensor-bytes)", path, where)

    # -- ops ------------------------------------------------------------------------------
    def op(self, i, entry, defined, base=("ops",), prefix="ops") -> OpSpec:
        """One op entry. Everything about the op itself comes from its ``Op`` object
        (Note [Ops carry their contract] in ops/core.py): no op is named here."""
        spec = self.plain_op(i, entry, defined, base, prefix)
        if spec is not None:
            return spec
        if isinstance(entry, dict) and "composite" in entry:     # the ops layer reads it
            from .ops import composite  # noqa: PLC0415
            return composite.load(self, i, entry, defined, base, prefix, _Defined, OpSpec)
        OPS = _ops()
        path = base + (i,)
        where = f"{prefix}[{i}]"
        if not isinstance(entry, dict):
            self.fail(f"an op must be a mapping, not {_kind(entry)}", path, where)
        op_id = entry.get("id", where)
        if not isinstance(op_id, str) or not op_id:
            self.fail(f"id must be a non-empty string, got {op_id!r}", path + ("id",), where)
        if "op" not in entry:
            self.fail("missing required key 'op'", path, where)
        name = entry["op"]
        label = f"{where}" if op_id == where else f"{where} {op_id!r}"
        if not isinstance(name, str):
            self.fail(f"op must be a string, got {name!r}", path + ("op",), label)
        label = f"{label} ({name})"
        op = OPS.get(name)
        if op is None or not op.public:
            public = sorted(n for n, o in OPS.items() if o.public)
            hint = _close_matches(name, public)
            hint = f" (did you mean {hint[0]!r}?)" if hint else ""
            self.fail(f"unknown op {name!r}{hint}", path + ("op",), label)
        if op.needs_code and not self.options.allow_code:
            function = entry.get("function")
            what = f" ({function})" if isinstance(function, str) else ""
            self.fail(f"op {name!r} runs user code{what}: refused without --allow-code "
                      "(allow_code=True in the API)", path + ("op",), label)
        if not op.supported:
            self.fail(f"op {name!r} is not supported by this version of gradcli yet",
                      path + ("op",), label)
        if op.has_body:
            return self.checkpoint(i, entry, defined, path, where, op_id, label)
        self.check_keys(entry, OP_KEYS, path, label, "an op")
        for key, takes in (("body", "has_body"), ("function", "needs_code")):
            if key in entry and not getattr(op, takes):
                owners = " or ".join(n for n, o in sorted(OPS.items()) if getattr(o, takes) and o.public)
                self.fail(f"key {key!r} is only valid for op {owners}", path + (key,), label)
        if "device" in entry and not op.moves_device:
            owners = " or ".join(repr(n) for n, o in sorted(OPS.items()) if o.moves_device and o.public)
            self.fail(f"key 'device' is only valid for op {owners}", path + ("device",), label)
        if type(op).for_entry is not _BASE_FOR_ENTRY or op.entry_binder is not None:
            # custom, grad ops: bound to their entry (the plain Op.for_entry returns the op
            # itself without reading its site: no site made for every op)
            op = op.for_entry(entry, self.site(path, label, op_id))

        inputs = entry.get("inputs")
        params = getattr(op, "tensor_inputs", None)
        if params is not None:      # laid out as the op's schema: nulls, lists, numbers
            inputs, op = self.schema_inputs(op, params, inputs, path, label)
        else:
            if not isinstance(inputs, list) or not all(isinstance(n, str) for n in inputs):
                self.fail("inputs must be a list of tensor names", path + ("inputs",), label)
            lo, hi = (op.arity, op.arity) if isinstance(op.arity, int) else op.arity
            if len(inputs) < lo or (hi is not None and len(inputs) > hi):
                want = str(lo) if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
                self.fail(f"takes {want} input{'s' if want != '1' else ''}, got {len(inputs)}",
                          path + ("inputs",), label)
        for k, n in enumerate(inputs):
            if n not in defined:
                scope = (" (a checkpoint body sees only the checkpoint's inputs: pass it in)"
                         if ".body[" in where else "")
                self.fail(f"input {n!r} is not defined above this op{scope}",
                          path + (("inputs", k) if params is None else ("inputs",)), label)

        args = entry.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            self.fail(f"args must be a mapping, not {_kind(args)}", path + ("args",), label)
        args = dict(args)
        if op.moves_device:         # the target device is the entry's `device` key
            if "device" not in entry:
                self.fail(f"op {name!r} needs key 'device' (the target device)", path, label)
            args["device"] = str(self.device(entry["device"], path + ("device",), label))
        checked = self.op_args(op, args, path, label)
        for key, arg in op.args.items():     # args naming a tensor: one more input
            if arg.names_tensor and checked.get(key) is not None:
                if checked[key] not in defined:
                    self.fail(f"arg {key!r} names {checked[key]!r}, which is not defined above "
                              "this op", path + ("args", key), label)
                inputs = [*inputs, checked[key]]

        if op.multi_output:
            outputs = entry.get("outputs")
            if "output" in entry:
                self.fail(f"op {name!r} has several outputs: use outputs: [...]", path + ("output",), label)
            if not isinstance(outputs, list) or not outputs:
                self.fail("outputs must be a non-empty list of names", path + ("outputs",), label)
        else:
            if "outputs" in entry:
                outputs = entry["outputs"]
                if not isinstance(outputs, list) or len(outputs) != 1:
                    self.fail(f"op {name!r} has one output: use output: NAME", path + ("outputs",), label)
            elif "output" in entry:
                outputs = [entry["output"]]
            else:
                self.fail("missing required key 'output'", path, label)
        seen = set()
        for k, out in enumerate(outputs):
            out_path = path + (("outputs", k) if "outputs" in entry else ("output",))
            self.check_name(out, out_path, label)
            if out in defined:
                what = "a leaf tensor" if defined[out].leaf else "an output of an op above"
                self.fail(f"output {out!r} is already defined as {what} (names are defined once)",
                          out_path, label)
            if out in seen:
                self.fail(f"output {out!r} is named twice", out_path, label)
            seen.add(out)
        n_out = op.num_outputs(checked)
        if n_out is not None and n_out != len(outputs):
            self.fail(f"{name} makes {n_out} outputs but {len(outputs)} names are given in "
                      "outputs", path + ("outputs",), label)
        retain = entry.get("retain_grad", False)
        if not isinstance(retain, bool):
            self.fail(f"retain_grad must be true or false, got {retain!r}", path + ("retain_grad",), label)
        in_metas = [defined[n] for n in inputs]
        metas = self.infer(op, in_metas, list(inputs), checked, outputs, path, label)
        for out, meta in zip(outputs, metas):
            defined[out] = meta
        if getattr(op, "restrides_self", False):    # self has the new geometry (as_strided_)
            defined[inputs[0]] = metas[0]
        if not op.view:
            self.allocate([(m.shape, m.dtype) for m in metas], path, label)
        self.wait(op, checked, path, label)
        inferred = None
        if metas[0].shape is not None:       # inferred: the same inputs need no second check
            inferred = [(m.shape, m.dtype) for m in in_metas]
            plain = self.plain_contract(name)
            if plain and plain[0] is op and not checked and "outputs" not in entry:
                # what the next entry of this op on the same inputs' shapes takes
                # (Note [Plain op entries])
                self._plain_results[(op, *in_metas)] = (
                    metas[0], (0, 0) if op.view else _result_sizes([(m.shape, m.dtype) for m in metas]),
                    inferred)
        return self.op_spec(i, base, op_id, label, op, inputs, outputs, checked, retain, inferred)

    def schema_inputs(self, op, params, inputs, path, label):
        """An ATen entry's ``inputs``: one item per schema tensor argument (``params``), a
        name, ``null`` for an absent ``Tensor?``, a nested list for a ``Tensor[]`` (names,
        or nulls in a ``Tensor?[]``), a number for a wrapped number. Returns the names in
        order (what the graph passes) and the op bound to this layout."""
        from .ops.aten.registry import Slot  # noqa: PLC0415

        ipath = path + ("inputs",)
        if not isinstance(inputs, list):
            self.fail(f"inputs must be a list (one item per tensor argument of {op.doc}), "
                      f"not {_kind(inputs)}", ipath, label)
        if len(inputs) != len(params):
            names = ", ".join(p.name for p in params) or "none"
            self.fail(f"takes {len(params)} tensor input{'s' if len(params) != 1 else ''} "
                      f"({names}), got {len(inputs)}", ipath, label)
        names, layout = [], []

        def item(v, p, k, in_list):
            if v is None:
                if not p.optional:
                    what = ("holds tensors (a Tensor[]: only a Tensor?[] takes nulls)" if in_list
                            else "is not optional")
                    self.fail(f"input {p.name!r} {what}: null given", ipath + (k,), label)
                return None
            if isinstance(v, str):
                names.append(v)
                return Slot(len(names) - 1)
            numbers = getattr(op, "numbers_as_tensors", True)   # Note [numbers as tensors]
            if _is_number(v) and not in_list and numbers:
                return v
            what = "a tensor name or null" if in_list and p.optional else "a tensor name"
            self.fail(f"input {p.name!r} must be {what}"
                      f"{'' if in_list or not numbers else ' or a number'}, got {_short(v)}"
                      f"{' (as in PyTorch, this op takes no number for a Tensor)' if _is_number(v) and not numbers else ''}",
                      ipath + (k,), label)

        for k, (v, p) in enumerate(zip(inputs, params)):
            if p.is_list:
                if not isinstance(v, list):
                    self.fail(f"input {p.name!r} is a tensor list: give a list of names, "
                              f"got {_short(v)}", ipath + (k,), label)
                if not v:   # PyTorch: torch.cat(): expected a non-empty list of Tensors
                    self.fail(f"input {p.name!r}: expected a non-empty list of Tensors, got []",
                              ipath + (k,), label)
                layout.append([item(x, p, k, True) for x in v])
            else:
                layout.append(item(v, p, k, False))
        return names, op.bind(layout)

    def op_args(self, op, args, path, label):
        """Each arg through its checker, the required ones present, then the op's rules
        across args (clamp needs min or max, ...)."""
        checked = {}
        for key, value in args.items():
            spec = op.args.get(key)
            if spec is None:
                known = ", ".join(sorted(op.args)) or "none"
                hint = _close_matches(str(key), sorted(op.args))
                hint = f"did you mean {hint[0]!r}? " if hint else ""
                self.fail(f"unknown arg {key!r} ({hint}known: {known})", path + ("args", key), label)
            try:
                checked[key] = spec.check(value) if spec.check else value
            except ValueError as exc:
                self.fail(f"bad arg {key!r}: {exc}", path + ("args", key), label)
        for key, spec in op.args.items():
            if spec.required and key not in checked:
                self.fail(f"missing required arg {key!r}", path + ("args",), label)
        try:
            op.check_args(checked)
        except ValueError as exc:
            self.fail(str(exc), path + ("args",), label)
        return checked

    def infer(self, op, metas, names, args, outputs, path, label):
        """The outputs' shapes and dtypes from the inputs' (the op's ``infer``): the static
        shape check and the memory budget of every result, before anything runs."""
        unknown = [_Defined(None, None, False)] * len(outputs)
        if any(m.shape is None for m in metas):
            return unknown
        shapes, dtypes = [m.shape for m in metas], [m.dtype for m in metas]

        def inputs():
            return ", ".join(f"{n} {list(s)} {d}" for n, s, d in zip(names, shapes, dtypes))

        # Note [Infer cache]: an op's infer is a function of its inputs' shapes and
        # dtypes and its args (the op contract), so a long graph that repeats an op
        # on the same shapes (a chain, the layers of a model) infers once per
        # distinct key. Only results that passed every check below are kept; ops
        # that run user code, and unhashable args, are inferred every time.
        try:
            key = (op, tuple(shapes), tuple(dtypes), tuple(args.items()))
            hash(key)
        except TypeError:
            key = None
        if key is not None and not op.needs_code:
            cached = self._infer_cache.get(key)
            if cached is not None and len(cached) == len(outputs):
                return cached
        from .ops.core import ShapeMismatch  # noqa: PLC0415

        try:
            results = op.infer_outputs(shapes, dtypes, args)
        except ShapeMismatch as exc:
            self.fail(exc.message(names), path, label)
        except _KNOWN_ERRORS as exc:
            self.fail(f"{_first_line(exc)} (inputs: {inputs()})", path, label)
        except Exception as exc:  # noqa: BLE001 - the op library's fault, not the file's
            raise OpBugError(op.name, exc, self.file, self.doc.line(*path), label) from exc
        if results is None:
            return unknown
        if len(results) != len(outputs):
            self.fail(f"produces {len(results)} outputs but {len(outputs)} names are given",
                      path, label)
        budget = self.options.max_tensor_bytes
        for shape, dtype in results:
            nbytes = _nbytes(shape, dtype.itemsize)
            if nbytes > budget:
                self.fail(f"the result of shape {list(shape)} needs {nbytes} bytes, over the "
                          f"memory budget of {budget} bytes (--max-tensor-bytes) "
                          f"(inputs: {inputs()})", path, label)
        metas = [_Defined(shape, dtype, False) for shape, dtype in results]
        if key is not None and not op.needs_code:
            self._infer_cache[key] = metas   # shared, never mutated
        return metas

    def checkpoint(self, i, entry, defined, path, where, op_id, label) -> OpSpec:
        """``{op: checkpoint, inputs, outputs, body}``: the body is a scope of its own.

        It reads the checkpoint's inputs by their names and nothing else,
        must define every name in ``outputs``, and its other names stay inside
        it (they may repeat outer names).
        """
        from .ops.reentrant import CheckpointOp  # noqa: PLC0415

        nesting = where.count(".body[") + 1
        if nesting > MAX_CHECKPOINT_NESTING:
            self.fail(f"checkpoints nest {nesting} deep here; at most {MAX_CHECKPOINT_NESTING} "
                      "levels are supported (each level nests the forward and a reentrant "
                      "backward on the stack)", path, label)
        self.check_keys(entry, (OP_KEYS - {"function", "device"}) | {"use_reentrant"}, path,
                        label, "a checkpoint op")
        use_reentrant = entry.get("use_reentrant", True)
        if not isinstance(use_reentrant, bool):
            self.fail(f"use_reentrant must be true or false, got {use_reentrant!r}",
                      path + ("use_reentrant",), label)
        for key in ("args",):
            if entry.get(key):
                self.fail(f"checkpoint takes no {key}", path + (key,), label)
        inputs = entry.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(n, str) for n in inputs) or not inputs:
            self.fail("inputs must be a non-empty list of tensor names", path + ("inputs",), label)
        for k, n in enumerate(inputs):
            if n not in defined:
                self.fail(f"input {n!r} is not defined above this op", path + ("inputs", k), label)
            if inputs.index(n) != k:
                self.fail(f"input {n!r} is listed twice", path + ("inputs", k), label)
        outputs = entry.get("outputs")
        if "output" in entry:
            self.fail("a checkpoint names its results with outputs: [...]", path + ("output",), label)
        if not isinstance(outputs, list) or not outputs:
            self.fail("outputs must be a non-empty list of names", path + ("outputs",), label)
        body = entry.get("body")
        if not isinstance(body, list) or not body:
            self.fail("body must be a non-empty list of ops", path + ("body",), label)
        scope = {n: defined[n] for n in inputs}
        body_specs = [self.op(k, op_entry, scope, path + ("body",), f"{where}.body")
                      for k, op_entry in enumerate(body)]
        seen = set()
        for k, out in enumerate(outputs):
            self.check_name(out, path + ("outputs", k), label)
            if out not in scope or out in inputs:
                self.fail(f"output {out!r} is not defined by the body (a checkpoint's outputs "
                          "are names its body defines)", path + ("outputs", k), label)
            if out in defined:
                self.fail(f"output {out!r} is already defined above (names are defined once)",
                          path + ("outputs", k), label)
            if out in seen:
                self.fail(f"output {out!r} is named twice", path + ("outputs", k), label)
            seen.add(out)
        retain = entry.get("retain_grad", False)
        if not isinstance(retain, bool):
            self.fail(f"retain_grad must be true or false, got {retain!r}", path + ("retain_grad",), label)
        for out in outputs:
            defined[out] = _Defined(scope[out].shape, scope[out].dtype, False)
        function, raw = checkpoint_body(body_specs, list(inputs), list(outputs))
        line, find_line = self.entry_line(path[:-1], i)
        return OpSpec(index=i, id=op_id, label=label, op=CheckpointOp(function, raw, use_reentrant),
                      inputs=list(inputs), outputs=list(outputs), args={}, retain_grad=retain,
                      lineno=line, find_line=find_line)

    # -- backward / expect ------------------------------------------------------------------
    def backward(self, spec, defined, leaves) -> BackwardSpec:
        path = ("backward",)
        where = "backward"
        if not isinstance(spec, dict):
            self.fail(f"backward must be a mapping, not {_kind(spec)}", path, where)
        self.check_keys(spec, BACKWARD_KEYS, path, where, "backward")
        roots = spec.get("roots")
        if roots is None:
            self.fail("missing required key 'roots'", path, where)
        if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
            self.fail("roots must be a non-empty list of tensor names", path + ("roots",), where)
        for k, r in enumerate(roots):
            if r not in defined:
                self.fail(f"root {r!r} is not defined", path + ("roots", k), where)
        grad_roots = spec.get("grad_roots", {})
        if grad_roots is None:
            grad_roots = {}
        if not isinstance(grad_roots, dict):
            self.fail("grad_roots must be a mapping from root name to gradient", path + ("grad_roots",), where)
        root_grads = {}
        root_set = set(roots)
        for r, g in grad_roots.items():
            if r not in root_set:
                self.fail(f"grad_roots names {r!r}, which is not a root", path + ("grad_roots", r), where)
            if _is_number(g):
                try:
                    root_grads[r] = float(g)
                except OverflowError:
                    self.fail(f"grad_roots.{r} is too large for a float", path + ("grad_roots", r), where)
            else:
                root_grads[r] = self.leaf(r, g, path + ("grad_roots", r), for_grad_root=True)
        inputs = spec.get("inputs")
        if inputs is not None:
            if not isinstance(inputs, list) or not inputs or not all(isinstance(n, str) for n in inputs):
                self.fail("inputs must be a non-empty list of tensor names", path + ("inputs",), where)
            for k, n in enumerate(inputs):
                if n not in defined:
                    self.fail(f"input {n!r} is not defined", path + ("inputs", k), where)
        flags = {}
        for key in ("retain_graph", "create_graph", "allow_unused"):
            value = spec.get(key, False)
            if not isinstance(value, bool):
                self.fail(f"{key} must be true or false, got {value!r}", path + (key,), where)
            flags[key] = value
        if "retain_graph" not in spec:          # as PyTorch: defaults to create_graph
            flags["retain_graph"] = flags["create_graph"]
        return BackwardSpec(roots=list(roots), grad_roots=root_grads, inputs=inputs,
                            line=self.doc.line(*path), **flags)

    def expect(self, spec, defined) -> ExpectSpec:
        path = ("expect",)
        where = "expect"
        if not isinstance(spec, dict):
            self.fail(f"expect must be a mapping, not {_kind(spec)}", path, where)
        self.check_keys(spec, EXPECT_KEYS, path, where, "expect")
        grads = {}
        expected = spec.get("grads")
        if expected is None:
            expected = {}
        if not isinstance(expected, dict):
            self.fail(f"grads must be a mapping from tensor name to gradient, not {_kind(expected)}",
                      path + ("grads",), where)
        for n, g in expected.items():
            if n not in defined:
                self.fail(f"expected gradient for {n!r}, which is not defined", path + ("grads", n), where)
            grads[n] = self.leaf(n, g, path + ("grads", n), for_grad_root=True)
        for key in ("rtol", "atol"):
            if key in spec and (not _is_number(spec[key]) or spec[key] < 0
                                or isinstance(spec[key], int) and not _finite_float(spec[key])):
                self.fail(f"{key} must be a non-negative number", path + (key,), where)
        order = spec.get("order")
        if order is not None and (not isinstance(order, list) or not all(isinstance(o, str) for o in order)):
            self.fail("order must be a list of node names", path + ("order",), where)
        error = spec.get("error")
        if error is not None and not isinstance(error, str):
            self.fail("error must be a string (a part of the expected message)", path + ("error",), where)
        for key in ("numeric", "elementwise"):
            if not isinstance(spec.get(key, False), bool):
                self.fail(f"{key} must be true or false", path + (key,), where)
        return ExpectSpec(grads=grads, numeric=spec.get("numeric", False),
                          rtol=spec.get("rtol", 1e-7), atol=spec.get("atol", 0.0), order=order,
                          error=error, reference=self.reference(spec, grads, path),
                          elementwise=spec.get("elementwise", False),
                          forward=(self.expect_forward(spec["forward"], defined)
                                   if "forward" in spec else None))

    def reference(self, spec, grads, path) -> dict:
        """expect.reference.grads: float64 gradients of tensors that expect.grads names
        (``gradcli.verdict``); its ``distance`` is informative and only type-checked."""
        ref = spec.get("reference")
        if ref is None:
            return {}
        path = path + ("reference",)
        if not isinstance(ref, dict) or not isinstance(ref.get("grads", {}), dict) \
                or not isinstance(ref.get("distance", {}), dict):
            self.fail("reference must be a mapping with grads and distance mappings", path,
                      "expect")
        self.check_keys(ref, {"grads", "distance"}, path, "expect", "expect.reference")
        out = {}
        for n, g in (ref.get("grads") or {}).items():
            if n not in grads:
                self.fail(f"reference gradient for {n!r}, which expect.grads does not name",
                          path + ("grads", n), "expect")
            out[n] = self.leaf(n, g, path + ("grads", n), for_grad_root=True)
        for n, d in (ref.get("distance") or {}).items():
            if not _is_number(d) or d < 0:
                self.fail(f"distance of {n!r} must be a non-negative number",
                          path + ("distance", n), "expect")
        return out

    def expect_forward(self, spec, defined) -> ForwardSpec:
        """``expect.forward``: tensor values another runtime computed (Note [Forward check])."""
        path = ("expect", "forward")
        where = "expect.forward"
        if not isinstance(spec, dict):
            self.fail(f"forward must be a mapping, not {_kind(spec)}", path, where)
        self.check_keys(spec, FORWARD_KEYS, path, where, "expect.forward")
        values = spec.get("values")
        if not isinstance(values, dict) or not values:
            self.fail("values must be a non-empty mapping from tensor name to value",
                      path + ("values",), where)
        checked = {}
        for n, v in values.items():
            if n not in defined:
                self.fail(f"expected value for {n!r}, which is not defined", path + ("values", n),
                          where)
            checked[n] = self.leaf(n, v, path + ("values", n), for_grad_root=True)
        for key in ("rtol", "atol"):
            if key in spec and (not _is_number(spec[key]) or spec[key] < 0
                                or isinstance(spec[key], int) and not _finite_float(spec[key])):
                self.fail(f"{key} must be a non-negative number", path + (key,), where)
        return ForwardSpec(values=checked, rtol=spec.get("rtol", 1e-7), atol=spec.get("atol", 0.0))


# -- the forward of an op, checked -----------------------------------------------------------
class _Defined(NamedTuple):
    """What the loader knows of a name before anything runs (shape None: not known)."""
    shape: tuple | None
    dtype: np.dtype | None
    leaf: bool


class _CheckedOp(LineOnDemand):
    """An op as the loader hands it to the Graph: before running, it checks the size of
    its outputs (its ``infer`` on the inputs' actual shapes) against the memory budget;
    a failure of the op on the user's input becomes a one-line GraphError naming the op
    and its inputs' shapes, any other failure an OpBugError (a bug in gradcli). Other
    attributes are the op's."""

    __slots__ = ("op", "label", "file", "lineno", "input_names", "max_bytes", "checked",
                 "find_line", "index", "bound", "args")

    def __init__(self, op, label, file, line, input_names, max_bytes, find_line=None, index=None):
        self.op = op
        self.label = label
        self.file = file
        self.lineno = line
        self.input_names = input_names
        self.max_bytes = max_bytes
        self.checked = None      # [(shape, dtype)] of inputs the loader already inferred on
        self.find_line = find_line   # with ``index``: the line on demand (LineOnDemand)
        self.index = index
        self.bound = None        # the op with the entry's args bound at load, or None
        self.args = None         # those args (``run`` is for them only)

    def __getattr__(self, name):
        return getattr(self.op, name)

    def __repr__(self):
        return repr(self.op)

    def fail(self, message):
        raise GraphError(message, self.file, self.line, self.label)

    def describe(self, inputs):
        return ", ".join(f"{n} {list(getattr(t, 'shape', ()))} {getattr(t, 'dtype', '?')}"
                         for n, t in zip(self.input_names, inputs))

    def __call__(self, *inputs, **args):
        self.check_inputs(inputs, args)
        try:
            return self.op(*inputs, **args)
        except Exception as exc:  # noqa: BLE001 - sorted by ``failed``
            self.failed(exc, inputs)

    # Note [Checks proved at load]: a graph run on the leaves it was loaded with (the
    # Graph checks their shapes and dtypes, ``proved``) gives every op the inputs the
    # loader inferred its outputs from (``checked``): the op's shape rules are exact
    # (every op's row in the op tables checks ``infer`` against the forward), so the
    # check of the inputs' shapes and dtypes against the memory budget is not repeated
    # at every call. Any other run (other leaves, another precision, an op the loader
    # could not infer) checks every call, as before.
    def run(self, inputs, proved):
        """The entry's op on ``inputs`` with its args bound at load (``bound``; the
        Graph calls it for the args the entry was loaded with)."""
        if not proved or self.checked is None:
            self.check_inputs(inputs, self.args)
        try:
            return self.bound(*inputs)
        except Exception as exc:  # noqa: BLE001 - sorted by ``failed``
            self.failed(exc, inputs)

    def check_inputs(self, inputs, args):
        checked = self.checked
        if checked is None or len(checked) != len(inputs):
            self.precheck(inputs, args)
        else:
            # precheck's common case inline: the inputs the loader inferred on
            for t, (shape, dtype) in zip(inputs, checked):
                data = t.data if type(t) is _Tensor else t     # (a Tensor's shape and dtype)
                if getattr(data, "shape", None) != shape or (
                        getattr(data, "dtype", None) is not dtype
                        and getattr(data, "dtype", None) != dtype):
                    self.precheck(inputs, args)
                    break

    def failed(self, exc, inputs):
        """Raise what a failure of the op on ``inputs`` means (see the class)."""
        try:
            raise exc
        except (GraphError, BackwardError):   # BackwardError: user code or a grad op's backward
            raise
        except MemoryError:
            self.fail(f"out of memory (inputs: {self.describe(inputs)})")
        except Exception as exc:  # noqa: BLE001 - sorted below, in this order
            from .ops.core import DeviceMismatch  # noqa: PLC0415 - only when an op failed

            if isinstance(exc, DeviceMismatch):
                self.fail(_first_line(exc))
            if isinstance(exc, _KNOWN_ERRORS):
                self.fail(f"{_first_line(exc)} (inputs: {self.describe(inputs)})")
            # not the file's fault: a bug, named as one
            raise OpBugError(self.op.name, exc, self.file, self.line, self.label) from exc

    def precheck(self, inputs, args):
        """Refuse, before running, inputs that do not fit and results over the memory
        budget (the op's ``infer`` on the actual shapes and dtypes: a graph run again in
        another precision, as gradcheck does, is checked again)."""
        checked = self.checked
        if checked is not None and len(checked) == len(inputs):
            # The common case, without building lists: the inputs the loader inferred on.
            for t, (shape, dtype) in zip(inputs, checked):
                if getattr(t, "shape", None) != shape or getattr(t, "dtype", None) != dtype:
                    break
            else:
                return
        from .ops.core import ShapeMismatch  # noqa: PLC0415

        shapes = [tuple(getattr(t, "shape", ())) for t in inputs]
        dtypes = [t.dtype if hasattr(t, "dtype") else np.asarray(t).dtype for t in inputs]
        if self.checked is not None and self.checked == list(zip(shapes, dtypes)):
            return
        try:
            results = self.op.infer_outputs(shapes, dtypes, args)
        except ShapeMismatch as exc:
            self.fail(exc.message(self.input_names))
        except _KNOWN_ERRORS as exc:
            self.fail(f"{_first_line(exc)} (inputs: {self.describe(inputs)})")
        except Exception as exc:  # noqa: BLE001 - the op library's fault
            raise OpBugError(self.op.name, exc, self.file, self.line, self.label) from exc
        for shape, dtype in results or ():
            nbytes = _nbytes(shape, dtype.itemsize)
            if nbytes > self.max_bytes:
                self.fail(f"the result of shape {list(shape)} needs {nbytes} bytes, over the "
                          f"memory budget of {self.max_bytes} bytes (--max-tensor-bytes) "
                          f"(inputs: {self.describe(inputs)})")


def _close_matches(word, candidates):
    """difflib's closest match (imported only for an error message's hint)."""
    import difflib  # noqa: PLC0415

    return difflib.get_close_matches(word, candidates, n=1)


_OPS = None
_EntrySite = None        # ops.site.EntrySite, imported on first use
_BASE_FOR_ENTRY = None   # Op.for_entry, set with _OPS
_Tensor = None           # autograd's Tensor, set with _OPS


def _ops():
    """The op registry (the op library loads on first use)."""
    global _OPS, _BASE_FOR_ENTRY, _Tensor
    if _OPS is None:
        from .autograd.tensor import Tensor  # noqa: PLC0415
        from .ops import OPS  # noqa: PLC0415
        from .ops.core import Op  # noqa: PLC0415

        _BASE_FOR_ENTRY = Op.for_entry
        _Tensor = Tensor
        _OPS = OPS
    return _OPS


def _known_errors():
    # numpy's AxisError subclasses ValueError and IndexError, so it is covered.
    return (ValueError, TypeError, IndexError, ArithmeticError, KeyError)


_KNOWN_ERRORS = _known_errors()


class _OpLines:
    """The lines of the entries of one list of ops, found on demand (one per list,
    shared by its OpSpecs: Note [Lines on demand for ops] in graph.py)."""

    __slots__ = ("doc", "base")

    def __init__(self, doc, base):
        self.doc = doc
        self.base = base

    def __call__(self, index):
        return self.doc.line(*self.base, index)


_PLAIN_KEYS = frozenset({"op", "inputs", "output", "id", "args", "retain_grad"})


def _plain_contract(name):
    """``(op, min inputs, max inputs)`` when entries of op ``name`` may take the
    fast path (Note [Plain op entries]), else False."""
    op = _ops().get(name)
    if (op is None or not op.public or op.needs_code or not op.supported or op.has_body
            or op.moves_device or op.multi_output or op.fn is None
            or type(op).for_entry is not _BASE_FOR_ENTRY or op.entry_binder is not None
            or getattr(op, "tensor_inputs", None) is not None):
        return False
    try:
        if any(arg.required for arg in op.args.values()):
            return False
        op.check_args({})
        if op.num_outputs({}) != 1 or op.worst_backward_ms({}):
            return False
    except Exception:  # noqa: BLE001 - the general code reports it, entry by entry
        return False
    lo, hi = (op.arity, op.arity) if isinstance(op.arity, int) else op.arity
    return op, lo, sys.maxsize if hi is None else hi


# -- helpers ------------------------------------------------------------------------------
def _result_sizes(results):
    """(bytes, bytes with every float in float64) of ``[(shape, dtype)]``, unknown ones
    not counted (Note [The memory budget of a whole graph])."""
    known = [(shape, np.dtype(dtype)) for shape, dtype in results
             if shape is not None and dtype is not None]
    return (sum(_nbytes(shape, dtype.itemsize) for shape, dtype in known),
            sum(_nbytes(shape, 8 if dtype.kind == "f" else dtype.itemsize)
                for shape, dtype in known))


def _nbytes(shape, itemsize):
    n = 1
    for s in shape:
        n *= max(int(s), 0)
    return n * itemsize


def _kind(value):
    """'a mapping', 'a list', 'a string', 'null', 'an int', ... for messages."""
    if value is None:
        return "null"
    kind = {dict: "mapping", list: "list", str: "string", bool: "boolean",
            float: "number", int: "int"}.get(type(value), type(value).__name__)
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({_short(value)})" if not isinstance(
        value, (dict, list)) else f"a {kind}"


def _short(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite_float(v):
    """A number that is a finite float (a 400-digit int is not: float() overflows)."""
    try:
        return bool(np.isfinite(float(v)))
    except OverflowError:
        return False


def _fits(value, dtype):
    """``value`` converts to ``dtype`` without overflow (torch.full's rule)."""
    if dtype.kind == "f":
        return abs(float(value)) <= float(np.finfo(dtype).max)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min <= value <= info.max
    return True


def _check_numeric(value, fail):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif not isinstance(v, (int, float, bool)):
            fail(f"value must contain only numbers, found {v!r}")


def _constant(array):
    return lambda shape=None: array.copy()


def _initializer(dist, spec, dtype, seed_seq):
    def make(shape):
        if dist == "zeros":
            return np.zeros(shape, dtype)
        if dist == "ones":
            return np.ones(shape, dtype)
        if dist == "full":
            return np.full(shape, spec["fill"], dtype)
        if dist == "arange":
            return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)
        rng = np.random.Generator(np.random.PCG64(seed_seq))
        if dist == "normal":
            data = rng.normal(spec.get("mean", 0.0), spec.get("std", 1.0), size=shape)
        else:
            data = rng.uniform(spec.get("low", 0.0), spec.get("high", 1.0), size=shape)
        return data.astype(dtype)
    return make


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
