"""Read a graph file into plain Python data, remembering line numbers.

Both parsers are iterative (no recursion, so no RecursionError on deep
input) and bounded: nesting depth is limited, and YAML aliases are counted as
the values they expand to, so an alias bomb ("billion laughs") is refused
after reading a few events, before anything is expanded. Aliases are shared,
never copied.
"""
from __future__ import annotations

import bisect
import json
import os
import re

from .errors import GraphError

MAX_NODES = 1_000_000       # scalars + containers after alias expansion
MAX_DEPTH = 1000            # nesting of mappings/sequences (100 nested checkpoints use ~400)
MAX_FILE_BYTES = 64 * 2**20
LINE_PATH_DEPTH = 6         # lines are remembered for paths up to this long


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
        chunks, total = [], 0
        with open(path, "rb") as fh:
            while total <= MAX_FILE_BYTES:      # the file may be growing: read within the limit
                chunk = fh.read(2**20)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        raw = b"".join(chunks)
    except FileNotFoundError:
        raise GraphError("no such file", display) from None
    except IsADirectoryError:
        raise GraphError("is a directory, not a graph file", display) from None
    except OSError as exc:
        raise GraphError(f"cannot read file: {exc.strerror or exc}", display) from None
    if len(raw) > MAX_FILE_BYTES:
        raise GraphError(f"file is too large (limit {MAX_FILE_BYTES} bytes)", display)
    ext = os.path.splitext(display)[1].lower()
    if ext not in (".json", ".yaml", ".yml", ""):
        raise GraphError(f"unknown file type {ext!r} (expected .yaml, .yml or .json)", display)
    text = decode_text(raw, display)
    if ext == ".json":
        return parse_json(text, display)
    return parse_yaml(text, display)


def decode_text(raw, display) -> str:
    """UTF-8 text of a graph file, or a GraphError for binary or non-UTF-8 content."""
    if b"\x00" in raw:
        raise GraphError("not a text file (binary content)", display)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise GraphError(f"not UTF-8 text (invalid byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start})", display, line) from None
    if not text.strip():
        raise GraphError("the file is empty", display)
    return text


# -- JSON ------------------------------------------------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CONSTANTS = (("true", True), ("false", False), ("null", None), ("NaN", float("nan")),
              ("Infinity", float("inf")), ("-Infinity", float("-inf")))


class _JsonParser:
    """An iterative JSON parser that records the line of every value."""

    def __init__(self, text, display):
        self.text = text
        self.display = display
        self.newlines = [m.start() for m in re.finditer("\n", text)]
        self.lines = {}

    def line_of(self, pos):
        return bisect.bisect_left(self.newlines, pos) + 1

    def fail(self, message, pos):
        col = pos - (self.newlines[self.line_of(pos) - 2] + 1 if self.line_of(pos) > 1 else 0) + 1
        raise GraphError(f"invalid JSON: {message} (column {col})", self.display, self.line_of(pos))

    def skip(self, pos):
        return _WS.match(self.text, pos).end()

    def string(self, pos):
        try:
            return json.decoder.scanstring(self.text, pos + 1, True)
        except json.JSONDecodeError as exc:
            self.fail(exc.msg, exc.pos)

    def parse(self):
        text, n = self.text, len(self.text)
        stack = []           # frames: [container, path, pending key or None]
        count = 0
        pos = self.skip(0)
        root = _MISSING = object()
        while True:
            # -- read one value (or open a container) at pos --------------------------------
            if pos >= n:
                self.fail("Expecting value", pos)
            path = stack[-1][1] + (stack[-1][2] if stack[-1][2] is not None else
                                   len(stack[-1][0]),) if stack else ()
            if len(path) <= LINE_PATH_DEPTH:
                self.lines[path] = self.line_of(pos)
            count += 1
            if count > MAX_NODES:
                raise GraphError(f"document too large: more than {MAX_NODES} values",
                                 self.display, self.line_of(pos))
            ch = text[pos]
            opened = None
            if ch == "{" or ch == "[":
                if len(stack) >= MAX_DEPTH:
                    raise GraphError(f"document nested too deeply (limit {MAX_DEPTH} levels)",
                                     self.display, self.line_of(pos))
                opened = {} if ch == "{" else []
                stack.append([opened, path, None])
                pos = self.skip(pos + 1)
                close = "}" if ch == "{" else "]"
                if pos < n and text[pos] == close:
                    stack.pop()
                    value = opened
                    pos += 1
                elif ch == "{":
                    pos = self.key(stack[-1], pos)
                    continue
                else:
                    continue
            elif ch == '"':
                value, pos = self.string(pos)
            else:
                m = _NUMBER.match(text, pos)
                if m and m.end() > pos:
                    s = m.group()
                    try:
                        value = float(s) if (m.group(1) or m.group(2)) else int(s)
                    except ValueError as exc:       # more digits than int() takes
                        self.fail(f"bad number ({exc})", pos)
                    pos = m.end()
                else:
                    for word, const in _CONSTANTS:
                        if text.startswith(word, pos):
                            value, pos = const, pos + len(word)
                            break
                    else:
                        self.fail("Expecting value", pos)
            # -- store the value, then close containers as far as they end ------------------
            while True:
                if not stack:
                    root = value
                    break
                frame = stack[-1]
                container = frame[0]
                if isinstance(container, dict):
                    container[frame[2]] = value
                else:
                    container.append(value)
                pos = self.skip(pos)
                if pos < n and text[pos] == ",":
                    pos = self.skip(pos + 1)
                    if isinstance(container, dict):
                        pos = self.key(frame, pos)
                    break
                close = "}" if isinstance(container, dict) else "]"
                if pos < n and text[pos] == close:
                    stack.pop()
                    value = container
                    pos += 1
                    continue
                self.fail(f"Expecting ',' delimiter or '{close}'", pos)
            if root is not _MISSING:
                break
        pos = self.skip(pos)
        if pos != n:
            self.fail("Extra data", pos)
        return root

    def key(self, frame, pos):
        """Read ``"key":`` of a mapping entry; returns the position of its value."""
        text = self.text
        if pos >= len(text) or text[pos] != '"':
            self.fail("Expecting property name enclosed in double quotes", pos)
        key, end = self.string(pos)
        if key in frame[0]:
            raise GraphError(f"duplicate key {key!r}", self.display, self.line_of(pos))
        frame[2] = key
        end = self.skip(end)
        if end >= len(text) or text[end] != ":":
            self.fail("Expecting ':' delimiter", end)
        return self.skip(end + 1)


def parse_json(text, display="<string>") -> Document:
    parser = _JsonParser(text, display)
    data = parser.parse()
    return Document(data, parser.lines, display)


# -- YAML ------------------------------------------------------------------------------------
_SEQ_TAGS = (None, "!", "tag:yaml.org,2002:seq")
_MAP_TAGS = (None, "!", "tag:yaml.org,2002:map")


def parse_yaml(text, display="<string>") -> Document:
    """Compose a YAML document from parser events, iteratively and within limits."""
    import yaml  # noqa: PLC0415 - imported only when a YAML file is read

    if not text.strip():
        raise GraphError("the file is empty", display)
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_cls(text)
    try:
        return _YamlComposer(loader, yaml, display).document()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        raise GraphError(f"invalid YAML: {problem}", display, line) from None
    except yaml.YAMLError as exc:
        first = (str(exc).strip().splitlines() or ["syntax error"])[0]
        raise GraphError(f"invalid YAML: {first}", display) from None
    finally:
        loader.dispose()


class _YamlComposer:
    def __init__(self, loader, yaml, display):
        self.loader = loader
        self.yaml = yaml
        self.display = display
        self.lines = {}
        self.anchors = {}        # name -> (value, size, height)
        self.count = 0

    def fail(self, message, mark):
        raise GraphError(message, self.display, mark.line + 1 if mark is not None else None)

    def document(self) -> Document:
        yaml = self.yaml
        ev = self.loader.get_event()             # StreamStart
        ev = self.loader.get_event()
        if isinstance(ev, yaml.StreamEndEvent):
            raise GraphError("the file is empty", self.display)
        data = self.node()
        self.loader.get_event()                  # DocumentEnd
        ev = self.loader.get_event()
        if not isinstance(ev, yaml.StreamEndEvent):
            self.fail("a graph file holds one YAML document, found a second one", ev.start_mark)
        return Document(data, self.lines, self.display)

    def scalar(self, ev):
        yaml = self.yaml
        tag = ev.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, ev.value, ev.implicit)
        if tag == "tag:yaml.org,2002:merge":
            self.fail("YAML merge keys (<<) are not supported", ev.start_mark)
        node = yaml.ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, ev.style)
        try:
            return tag, self.loader.construct_object(node)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
            self.fail(f"invalid YAML value {ev.value[:40]!r}: {problem}", ev.start_mark)
        except (ValueError, TypeError, OverflowError) as exc:   # e.g. an int of 5000 digits
            msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.fail(f"invalid YAML value {ev.value[:40]!r}: {msg}", ev.start_mark)

    def node(self):
        """Read the events of one node (the document's root) into Python data."""
        yaml = self.yaml
        get = self.loader.get_event
        # frame: [container, path, anchor, start_count, height, pending key, is_map]
        stack = []
        while True:
            ev = get()
            frame = stack[-1] if stack else None
            is_key = frame is not None and frame[6] and frame[5] is _NO_KEY
            if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop()
                value, size, height = frame[0], self.count - frame[3], frame[4] + 1
                if frame[2] is not None:
                    self.anchors[frame[2]] = (value, size, height)
            else:
                if frame is None:
                    path = ()
                elif frame[6]:
                    path = None if is_key else frame[1] + (frame[5],)
                else:
                    path = frame[1] + (len(frame[0]),)
                if path is not None and len(path) <= LINE_PATH_DEPTH and (
                        frame is None or not frame[6]):
                    self.lines[path] = ev.start_mark.line + 1
                if isinstance(ev, yaml.AliasEvent):
                    found = self.anchors.get(ev.anchor)
                    if found is None:
                        self.fail(f"invalid YAML: unknown alias *{ev.anchor} (an alias must "
                                  "follow its anchor's complete value)", ev.start_mark)
                    value, size, height = found
                    self.count += size
                    if self.count > MAX_NODES:
                        self.fail(f"document too large: more than {MAX_NODES} values after "
                                  "expanding aliases (an alias bomb?)", ev.start_mark)
                    if len(stack) + height > MAX_DEPTH:
                        self.fail(f"document nested too deeply (limit {MAX_DEPTH} levels)",
                                  ev.start_mark)
                    if is_key and height:
                        self.fail("mapping keys must be plain strings", ev.start_mark)
                elif isinstance(ev, yaml.ScalarEvent):
                    self.count += 1
                    if self.count > MAX_NODES:
                        self.fail(f"document too large: more than {MAX_NODES} values",
                                  ev.start_mark)
                    tag, value = self.scalar(ev)
                    height = 0
                    if ev.anchor is not None:
                        self.anchors[ev.anchor] = (value, 1, 0)
                elif isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                    is_map = isinstance(ev, yaml.MappingStartEvent)
                    if is_key:
                        self.fail("mapping keys must be plain strings", ev.start_mark)
                    if ev.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
                        self.fail(f"YAML tag {ev.tag} is not supported", ev.start_mark)
                    self.count += 1
                    if self.count > MAX_NODES:
                        self.fail(f"document too large: more than {MAX_NODES} values",
                                  ev.start_mark)
                    if len(stack) >= MAX_DEPTH:
                        self.fail(f"document nested too deeply (limit {MAX_DEPTH} levels)",
                                  ev.start_mark)
                    stack.append([{} if is_map else [], path, ev.anchor, self.count - 1, 0,
                                  _NO_KEY, is_map])
                    continue
                else:
                    self.fail(f"invalid YAML: unexpected {type(ev).__name__}",
                              getattr(ev, "start_mark", None))
            # -- a complete value: store it in its parent ---------------------------------
            while True:
                if not stack:
                    return value
                frame = stack[-1]
                frame[4] = max(frame[4], height)
                if frame[6]:
                    if frame[5] is _NO_KEY:
                        key = value
                        if not isinstance(key, (str, int, float, bool)) and key is not None:
                            self.fail(f"unsupported mapping key {key!r}", ev.start_mark)
                        key = key if isinstance(key, str) else str(key)
                        if key in frame[0]:
                            self.fail(f"duplicate key {key!r}", ev.start_mark)
                        frame[5] = key
                        path = frame[1] + (key,)
                        if len(path) <= LINE_PATH_DEPTH:
                            self.lines[path] = ev.start_mark.line + 1
                    else:
                        frame[0][frame[5]] = value
                        frame[5] = _NO_KEY
                else:
                    frame[0].append(value)
                break


_NO_KEY = object()
