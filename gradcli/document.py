"""Read a graph file into plain Python data, remembering line numbers.

YAML is composed into nodes first (never constructed with a full loader), so
aliases cannot blow up memory: expanding them is counted and stopped at a
limit ("billion laughs"), and nesting depth is bounded.
"""
from __future__ import annotations

import json
import os

from .errors import GraphError

MAX_NODES = 1_000_000       # scalars + containers after alias expansion
MAX_DEPTH = 64              # nesting of mappings/sequences
MAX_FILE_BYTES = 64 * 2**20


class Document:
    """Parsed data plus a map from a path (tuple of keys/indices) to its line."""

    def __init__(self, data, lines, path):
        self.data = data
        self.lines = lines
        self.path = path

    def line(self, *path):
        """The line of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            line = self.lines.get(path)
            if line is not None:
                return line
            path = path[:-1]
        return self.lines.get(())


def read_document(path) -> Document:
    display = str(path)
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise GraphError(f"file is too large ({size} bytes; limit {MAX_FILE_BYTES})", display)
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise GraphError("no such file", display) from None
    except IsADirectoryError:
        raise GraphError("is a directory, not a graph file", display) from None
    except OSError as exc:
        raise GraphError(f"cannot read file: {exc.strerror or exc}", display) from None
    if b"\x00" in raw[:8192]:
        raise GraphError("not a text file (binary content)", display)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GraphError(f"not UTF-8 text (byte {exc.start})", display) from None
    if not text.strip():
        raise GraphError("the file is empty", display)
    ext = os.path.splitext(display)[1].lower()
    if ext == ".json":
        return parse_json(text, display)
    if ext in (".yaml", ".yml", ""):
        return parse_yaml(text, display)
    raise GraphError(f"unknown file type {ext!r} (expected .yaml, .yml or .json)", display)


def parse_json(text, display="<string>") -> Document:
    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise GraphError(f"duplicate key {k!r}", display)
            out[k] = v
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise GraphError(f"invalid JSON: {exc.msg} (column {exc.colno})", display, exc.lineno) from None
    except RecursionError:
        raise GraphError(f"document nested too deeply (limit {MAX_DEPTH})", display) from None
    _check_depth(data, display)
    return Document(data, {(): 1}, display)


def _check_depth(data, display):
    stack = [(data, 1)]
    count = 0
    while stack:
        obj, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise GraphError(f"document nested too deeply (limit {MAX_DEPTH} levels)", display)
        if isinstance(obj, dict):
            stack.extend((v, depth + 1) for v in obj.values())
        elif isinstance(obj, list):
            stack.extend((v, depth + 1) for v in obj)


def parse_yaml(text, display="<string>") -> Document:
    import yaml  # noqa: PLC0415 - imported only when a YAML file is read

    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loader = loader_cls(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        raise GraphError(f"invalid YAML: {problem}", display, line) from None
    except yaml.YAMLError as exc:
        raise GraphError(f"invalid YAML: {str(exc).splitlines()[0]}", display) from None
    except RecursionError:
        raise GraphError(f"document nested too deeply (limit {MAX_DEPTH} levels)", display) from None
    if root is None:
        raise GraphError("the file is empty", display)
    lines = {}
    builder = _YamlBuilder(loader_cls, display, lines)
    data = builder.build(root, (), 1)
    return Document(data, lines, display)


class _YamlBuilder:
    def __init__(self, loader_cls, display, lines):
        import yaml  # noqa: PLC0415

        self.yaml = yaml
        self.scalar_loader = yaml.SafeLoader("")
        self.display = display
        self.lines = lines
        self.count = 0

    def build(self, node, path, depth):
        yaml = self.yaml
        self.count += 1
        if self.count > MAX_NODES:
            raise GraphError(f"document too large: more than {MAX_NODES} values after expanding "
                             "aliases (an alias bomb?)", self.display)
        if depth > MAX_DEPTH:
            raise GraphError(f"document nested too deeply (limit {MAX_DEPTH} levels)", self.display,
                             node.start_mark.line + 1)
        if len(path) <= 4:
            self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode):
            try:
                return self.scalar_loader.construct_object(node)
            except yaml.YAMLError as exc:
                raise GraphError(f"invalid YAML value: {getattr(exc, 'problem', exc)}",
                                 self.display, node.start_mark.line + 1) from None
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            out = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise GraphError("mapping keys must be plain strings", self.display,
                                     key_node.start_mark.line + 1)
                key = self.scalar_loader.construct_object(key_node)
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise GraphError("YAML merge keys (<<) are not supported", self.display,
                                     key_node.start_mark.line + 1)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise GraphError(f"unsupported mapping key {key!r}", self.display,
                                     key_node.start_mark.line + 1)
                key = key if isinstance(key, str) else str(key)
                if key in out:
                    raise GraphError(f"duplicate key {key!r}", self.display,
                                     key_node.start_mark.line + 1)
                out[key] = self.build(value_node, path + (key,), depth + 1)
            return out
        raise GraphError("unsupported YAML node", self.display, node.start_mark.line + 1)
