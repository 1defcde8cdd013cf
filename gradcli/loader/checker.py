"""The base of the document's check: where a bad file is reported (the file, the
line of a value, the op) and the budgets a whole file must keep (the memory of its
tensors, the time its backward may wait on purpose). ``check_tensors``,
``check_ops`` and ``check`` build on it."""
from __future__ import annotations

import re

import numpy as np

from ..errors import GraphError
from .budget import nbytes, result_sizes
from .weights import WeightFiles

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")     # whole names only: fullmatch
# Note [Time bounds]: a `delay` op may wait at most 60 s per backward call (its own
# check, ms + jitter_ms included); the loader bounds the sum over the file of what
# every op says its backward may wait (``Op.worst_backward_ms``), so that no file
# makes one backward wait longer than this.
MAX_BACKWARD_WAIT_MS = 60_000


class Checker:
    """One document under check: its errors (``fail``), its budgets and what the
    build step takes from it (the leaves' sources, the op entries to bind)."""

    def __init__(self, doc, base_dir, stem, options, lazy_lines=False):
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
        self._weight_files = {}      # a file as entries name it -> (full path, ext), checked
        # for the build step: (LeafSpec, its source, its label) of every leaf made, and
        # (OpSpec, inputs checked at load, checkpoint body or None) of every op entry
        self.sources = []
        self.unbound = []

    # -- errors -------------------------------------------------------------------
    def fail(self, message, path=(), where=None):
        raise GraphError(message, self.file, self.doc.line(*path), where)

    def check_keys(self, mapping, allowed, path, where, what):
        for key in mapping:
            if key in allowed or (isinstance(key, str) and key.startswith("x-")):
                continue
            hint = close_matches(str(key), sorted(allowed))
            hint = f" (did you mean {hint[0]!r}?)" if hint else ""
            self.fail(f"unknown key {key!r} in {what}{hint}", path + (key,), where)

    def site(self, path, label, op_id, line=None):
        """Where an op entry is, for ``Op.for_entry`` (errors raised at the entry);
        ``line``: the entry's line when the caller has it already."""
        global _EntrySite
        if _EntrySite is None:
            from ..ops.site import EntrySite as _EntrySite  # noqa: PLC0415

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

    # -- budgets -----------------------------------------------------------------------
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
            sizes = result_sizes(results)
            if key is not None:
                self._allocate_cache[key] = sizes
        size = sizes[0]
        self.graph_bytes += size
        self.graph_bytes64 += sizes[1]
        budget = self.options.max_graph_bytes
        if self.graph_bytes > budget:
            self.fail(f"the graph's tensors need {self.graph_bytes} bytes up to here (this one: "
                      f"{size} bytes), over the memory budget of {budget} bytes for the "
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

    def check_size(self, shape, dtype, path, where):
        size = nbytes(shape, np.dtype(dtype).itemsize)
        if size > self.options.max_tensor_bytes:
            self.fail(f"tensor of shape {list(shape)} needs {size} bytes, over the memory budget "
                      f"of {self.options.max_tensor_bytes} bytes (--max-tensor-bytes)", path, where)


_EntrySite = None        # ops.site.EntrySite, imported on first use


class _OpLines:
    """The lines of the entries of one list of ops, found on demand (one per list,
    shared by its OpSpecs: Note [Lines on demand for ops] in graph.py)."""

    __slots__ = ("doc", "base")

    def __init__(self, doc, base):
        self.doc = doc
        self.base = base

    def __call__(self, index):
        return self.doc.line(*self.base, index)


def close_matches(word, candidates):
    """difflib's closest match (imported only for an error message's hint)."""
    import difflib  # noqa: PLC0415

    return difflib.get_close_matches(word, candidates, n=1)


def kind_of(value):
    """'a mapping', 'a list', 'a string', 'null', 'an int', ... for messages."""
    if value is None:
        return "null"
    kind = {dict: "mapping", list: "list", str: "string", bool: "boolean",
            float: "number", int: "int"}.get(type(value), type(value).__name__)
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({short(value)})" if not isinstance(
        value, (dict, list)) else f"a {kind}"


def short(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def finite_float(v):
    """A number that is a finite float (a 400-digit int is not: float() overflows)."""
    try:
        return bool(np.isfinite(float(v)))
    except OverflowError:
        return False

