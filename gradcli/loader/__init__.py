"""Load a graph file (format version 1, docs/graph-format.md) into a Graph, in two
steps:

1. ``check`` (``check.py``, ``check_tensors.py``, ``check_ops.py``): the document
   against the format and every op's contract, before anything runs. What a bad
   file meets: a one-line GraphError naming the file, the line, the op and the
   problem.
2. ``build`` (``build.py``, ``leaves.py``, ``weights.py``, ``bound_op.py``): the
   checked document bound into the Graph a run meets: the leaves with their
   arrays' makers (weights read once, mapped), the ops with their args bound.

Running the forward (``Graph.forward``) records the autograd graph and reports
what only values tell (a class index out of range, ...) the same way; a failure
of the op library that is not the input's fault is an OpBugError (a bug: exit 3).
Everything about an op comes from its ``Op`` object: no op is named here.
"""
from __future__ import annotations

import os

from ..collector import paused
from ..document import decode_text, parse_json, parse_yaml, read_document
from ..errors import GraphError
from ..graph import Graph
from .budget import default_max_graph_bytes, default_max_tensor_bytes
from .build import build
from .check import DocumentCheck
from .options import LoadOptions, parse_device_map

__all__ = ["LoadOptions", "default_max_graph_bytes", "default_max_tensor_bytes", "load", "loads",
           "parse_device_map"]


def load(path, *, device_map=None, allow_code=False, allow_outside_paths=False,
         max_tensor_bytes=None, max_document_bytes=None, max_graph_bytes=None) -> Graph:
    """Read, check and build a graph file; ``graph.run()`` then runs it.

    >>> graph = load("graphs/mlp.yaml")                     # doctest: +SKIP
    >>> sorted(graph.run().grads)                           # doctest: +SKIP
    """
    path = os.fspath(path)
    options = LoadOptions(device_map, allow_code, allow_outside_paths, max_tensor_bytes,
                          max_document_bytes, max_graph_bytes)
    with paused():   # Note [Collector pauses]
        doc = read_document(path, max_bytes=max_document_bytes)
        checked = DocumentCheck(doc, os.path.dirname(os.path.abspath(path)),
                                os.path.splitext(os.path.basename(path))[0], options,
                                lazy_lines=path.lower().endswith(".json")).check()
        _drop_tree(doc)
        return build(checked)


def loads(text, *, format="yaml", name="graph", base_dir=".", **options) -> Graph:  # noqa: A002
    """Like ``load`` for a document in a string (``format`` is yaml or json).

    >>> loads("version: 1\\ntensors: {x: {value: 3.0, requires_grad: true}}\\n"
    ...       "ops: [{op: mul, inputs: [x, x], output: y}]\\nbackward: {roots: [y]}\\n").name
    'graph'
    """
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
        checked = DocumentCheck(doc, os.path.abspath(base_dir), name, options,
                                lazy_lines=format == "json").check()
        _drop_tree(doc)
        return build(checked)


def _drop_tree(doc):
    """The parsed document is not kept with the graph: the ops of a JSON file find
    their lines from its text (Note [Lines on demand for ops] in graph.py)."""
    doc.data = None
