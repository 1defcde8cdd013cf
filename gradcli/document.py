"""Read a graph file into plain Python data; find the line of a value when asked.

Both formats are parsed by C parsers: JSON by the standard library's
``json.loads`` (its C scanner), YAML by libyaml's event stream. What bounds a
document is a memory budget (``max_bytes``, ``DEFAULT_MAX_DOCUMENT_BYTES``
unless raised), checked against an estimate made from the file's size before
anything is built; YAML aliases are counted as the values they expand to, so an
alias bomb ("billion laughs") is refused after a few events, before anything is
expanded (aliases are shared, never copied). Nesting is limited to
``MAX_DEPTH`` levels, checked without recursion before the JSON parser runs and
while the YAML events are read.

See Note [Lines on demand] for how line numbers are found.
"""
from __future__ import annotations

import bisect
import json
import os
import re
import stat
import sys

from .collector import paused
from .errors import GraphError

MAX_DEPTH = 1000            # nesting of mappings/sequences (100 nested checkpoints use ~400)
DEFAULT_MAX_DOCUMENT_BYTES = 4 * 2**30
# Note [Document memory estimate]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The budget is checked before parsing, from the text's length alone: the densest
# text (``[{},{},...]``, ``["ab","cd",...]``, ``[a, b]`` in YAML) builds at most
# about 24-30 bytes of Python objects per character (an empty dict is 64 bytes
# for 3 characters, a short str about 50 bytes plus an 8-byte slot for 3 to 5
# characters). So ``len(text) * BYTES_PER_CHAR`` bounds what parsing can
# allocate, and a 1,000,000-op chain (92 MB of indented JSON, 53 MB of YAML)
# estimates at 2.0 and 1.2 GiB, inside the 4 GiB default. Aliases allocate nothing
# (they are shared) but every consumer walks them expanded, so each expanded
# value is charged ``BYTES_PER_VALUE`` against the same budget.
BYTES_PER_CHAR = 24
BYTES_PER_VALUE = 64

# Note [Lines on demand]
# ~~~~~~~~~~~~~~~~~~~~~~
# Users see line numbers in errors, but recording the line of every value
# costs a Python step per token, several times the C parser itself. So the
# happy path records none (JSON) or only the lines of the top two levels
# (YAML: the event loop runs anyway, and ``ops[i]``/``tensors.x`` are what
# the loader names): ``Document.line(*path)`` finds any other position when it
# is asked, by re-scanning the text along that path only:
# - JSON: the C scanner skips over each member of the containers on the path
#   (their member positions are cached, so asking for every ``ops[i]`` in turn
#   scans the ops list once), and a line is counted from the nearest position
#   already counted.
# - YAML: libyaml's events are streamed again until the innermost container on
#   the path ends, recording the lines of the direct children of every container
#   on the path (so asking for each item of one list streams the document once).
# A document whose JSON cannot be read (syntax error, duplicate key, too deep,
# a number too long) is re-read by the iterative pure-Python reader
# ``_JsonLocator``, which stops at the first problem and names its line.


class Document:
    """Parsed data; ``line(*path)`` is the line of a value (found on demand)."""

    def __init__(self, data, path, locate=None, lines=None):
        self.data = data
        self.path = path
        self._locate = locate          # path tuple -> line of it or its nearest ancestor
        self._lines = lines if lines is not None else {}   # known lines: path tuple -> line

    def line(self, *path):
        """The line of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        line = self._lines.get(path)
        if line is not None:
            return line
        if self._locate is not None:
            line = self._locate(path)
            if line is not None:
                return line
        while path:
            path = path[:-1]
            line = self._lines.get(path)
            if line is not None:
                return line
        return None


def estimate_bytes(text) -> int:
    """An upper bound of the memory the parsed document of ``text`` takes."""
    return len(text) * BYTES_PER_CHAR


def _check_budget(text, display, max_bytes):
    budget = max_bytes or DEFAULT_MAX_DOCUMENT_BYTES
    need = estimate_bytes(text)
    if need > budget:
        raise GraphError(f"document too large: reading {len(text)} characters may take up to "
                         f"{need} bytes of memory, over the budget of {budget} bytes "
                         "(--max-document-bytes)", display)
    return budget


def read_document(path, *, max_bytes=None) -> Document:
    """Read and parse a graph file (.json, or YAML for .yaml/.yml/no extension).

    ``max_bytes`` is the memory budget of the parsed document (default
    ``DEFAULT_MAX_DOCUMENT_BYTES``). Anything but a regular file (a named pipe,
    a device) is refused without being opened for reading, so it cannot block.
    """
    display = str(path)
    ext = os.path.splitext(display)[1].lower()
    raw = _read_regular_file(path, display, max_bytes)
    if ext not in (".json", ".yaml", ".yml", ""):
        raise GraphError(f"unknown file type {ext!r} (expected .yaml, .yml or .json)", display)
    text = decode_text(raw, display)
    raw = None
    if ext == ".json":
        return parse_json(text, display, max_bytes=max_bytes)
    return parse_yaml(text, display, max_bytes=max_bytes)


def _read_regular_file(path, display, max_bytes) -> bytes:
    budget = max_bytes or DEFAULT_MAX_DOCUMENT_BYTES
    try:
        st = os.stat(path)
        _require_regular(st, display)
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it
        # still returns at once, and the fstat below refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise GraphError("no such file", display) from None
    except IsADirectoryError:
        raise GraphError("is a directory, not a graph file", display) from None
    except OSError as exc:
        raise GraphError(f"cannot read file: {exc.strerror or exc}", display) from None
    try:
        st = os.fstat(fd)
        _require_regular(st, display)
        limit = budget // BYTES_PER_CHAR + 1       # more text than this is over the budget
        if st.st_size > limit:
            raise GraphError(f"document too large: {st.st_size} bytes may take up to "
                             f"{st.st_size * BYTES_PER_CHAR} bytes of memory, over the budget "
                             f"of {budget} bytes (--max-document-bytes)", display)
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = None
            chunks, total = [], 0
            while total <= limit:               # the file may be growing: read within the limit
                chunk = fh.read(min(max(st.st_size + 1 - total, 2**16), 2**24))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            raw = b"".join(chunks)
    except OSError as exc:
        raise GraphError(f"cannot read file: {exc.strerror or exc}", display) from None
    finally:
        if fd is not None:
            os.close(fd)
    if len(raw) > limit:
        raise GraphError(f"document too large: over the budget of {budget} bytes "
                         "(--max-document-bytes)", display)
    return raw


def _require_regular(st, display):
    if stat.S_ISDIR(st.st_mode):
        raise GraphError("is a directory, not a graph file", display)
    if not stat.S_ISREG(st.st_mode):
        kind = ("a named pipe" if stat.S_ISFIFO(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "not a regular file")
        raise GraphError(f"is {kind}, not a regular file: graph files must be regular files",
                         display)


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
    if not text or text.isspace():      # (no copy of the text, as strip() makes)
        raise GraphError("the file is empty", display)
    return text


class _LineCounter:
    """Line of a position in ``text``, counted from the nearest position counted before."""

    def __init__(self, text):
        self.text = text
        self.marks = [0]
        self.lines = [1]

    def __call__(self, pos):
        i = bisect.bisect_right(self.marks, pos) - 1
        line = self.lines[i] + self.text.count("\n", self.marks[i], pos)
        if pos > self.marks[i]:
            self.marks.insert(i + 1, pos)
            self.lines.insert(i + 1, line)
        return line


# -- JSON ------------------------------------------------------------------------------------
class _Duplicate(Exception):
    pass


_NOT_READ = object()


def _pairs_to_dict(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Duplicate
    return d


_JSON_KEEP = b'"[]{}'
_JSON_DELETE = bytes(c for c in range(256) if c not in _JSON_KEEP)
_JSON_ESCAPE = re.compile(rb"\\.", re.S)
_JSON_STRING = re.compile(rb'"[^"]*"')


def json_depth(text) -> int:
    """The nesting depth of a JSON text, by C-speed passes (no parse, no recursion).

    Escapes are removed first (so ``\\"`` is no quote), then every character but
    quotes and brackets. Then adjacent quotes go: each such pair closes one string
    and opens the next (or is an empty string), and no bracket lies between them,
    so every bracket keeps its inside-or-outside-a-string status; strings that
    still hold brackets (rare) go by a regex. What remains is brackets, and the
    depth is the maximum of their running sum. Only meaningful for valid JSON: on
    invalid text it is some number, and the parser reports the syntax error.
    """
    raw = text.encode("utf-8", "surrogatepass")
    if b"\\" in raw:
        raw = _JSON_ESCAPE.sub(b"", raw)
    brackets = raw.translate(None, _JSON_DELETE).replace(b'""', b"")
    if b'"' in brackets:
        brackets = _JSON_STRING.sub(b"", brackets)
    if len(brackets) <= 2 * MAX_DEPTH:
        # few brackets: a short loop (no NumPy import for small files)
        depth = top = 0
        for ch in brackets:
            depth += 1 if ch in b"[{" else -1
            if depth > top:
                top = depth
        return top
    import numpy as np  # noqa: PLC0415 - large documents only

    a = np.frombuffer(brackets, np.uint8)
    steps = ((a == 0x5B) | (a == 0x7B)).astype(np.int8) * 2 - 1
    return int(np.cumsum(steps, dtype=np.int32).max())


def _frames_above():
    n, f = 0, sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile(
    r"(?<!\\)((?:\\\\)*)(?:\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2})")


def parse_json(text, display="<string>", *, max_bytes=None) -> Document:
    """Parse a JSON graph document (C parser; duplicate keys are an error)."""
    _check_budget(text, display, max_bytes)
    if json_depth(text) > MAX_DEPTH:
        _JsonLocator(text, display).parse()          # raises, naming the line
        raise GraphError(f"document nested too deeply (limit {MAX_DEPTH} levels)", display)
    limit = sys.getrecursionlimit()
    need = _frames_above() + MAX_DEPTH + 50
    try:
        # Note [JSON recursion]: the C scanner recurses once per level and counts its
        # levels against the interpreter's recursion limit (3.11); the depth is known to
        # be within MAX_DEPTH, so the limit is raised (never lowered) for the call.
        if limit < need:
            sys.setrecursionlimit(need)
        with paused():   # Note [Collector pauses]
            data = json.loads(text, object_pairs_hook=_pairs_to_dict)
    except json.JSONDecodeError as exc:
        raise GraphError(f"invalid JSON: {exc.msg} (column {exc.colno})", display,
                         exc.lineno) from None
    except (_Duplicate, ValueError):
        # a duplicate key, a number int() refuses, ...: the locator names it and its line
        _JsonLocator(text, display).parse()
        raise GraphError("invalid JSON", display) from None
    except RecursionError:
        # an interpreter whose C recursion limit is not the one raised above: the
        # iterative reader (which enforces MAX_DEPTH itself) reads it instead
        data = _NOT_READ
    finally:
        if limit < need:
            sys.setrecursionlimit(limit)
    if data is _NOT_READ:
        with paused():   # Note [Collector pauses]
            data = _JsonLocator(text, display).parse()
    m = _LONE_SURROGATE.search(text) if _SURROGATE_ESCAPE.search(text) else None
    if m is not None:
        line = text.count("\n", 0, m.start()) + 1
        raise GraphError(f"invalid JSON: lone surrogate {m.group()[len(m.group(1)):]} in a "
                         "string (not a Unicode character)", display, line)
    return Document(data, display, _JsonLines(text).line)


_JSON_COLON = re.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_JSON_COMMA = re.compile(r"[ \t\n\r]*(?:,[ \t\n\r]*)?")


class _JsonLines:
    """Lines of JSON values by path, found by re-scanning along the path only."""

    def __init__(self, text):
        self.text = text
        self.line_of = _LineCounter(text)
        self.scan = json.scanner.make_scanner(json.JSONDecoder())
        self.members = {}       # container position -> {key or index: (position, line)}

    def line(self, path):
        text = self.text
        pos = _WS.match(text, 0).end()
        line = None
        for part in path:
            if pos >= len(text) or text[pos] not in "[{":
                break
            members = self.members.get(pos)
            if members is None:
                with paused():   # Note [Collector pauses]
                    members = self.members[pos] = self._index_at(pos)
            found = members.get(part)
            if found is None:
                break
            pos, line = found
        return line if line is not None else self.line_of(pos)

    def _index_at(self, pos):
        """Positions and lines of the members of the container that starts at ``pos``."""
        text, scan, scanstring = self.text, self.scan, json.decoder.scanstring
        colon, comma = _JSON_COLON.match, _JSON_COMMA.match
        found = {}
        is_map = text[pos] == "{"
        close = "}" if is_map else "]"
        pos = _WS.match(text, pos + 1).end()
        line = self.line_of(pos)
        last = pos
        i, n = 0, len(text)
        while pos < n and text[pos] != close:
            line += text.count("\n", last, pos)
            last = pos
            if is_map:
                key, pos = scanstring(text, pos + 1, True)
                pos = colon(text, pos).end()
            else:
                key, i = i, i + 1
            found[key] = (pos, line)
            pos = comma(text, scan(text, pos)[1]).end()
        return found


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CONSTANTS = (("true", True), ("false", False), ("null", None), ("NaN", float("nan")),
              ("Infinity", float("inf")), ("-Infinity", float("-inf")))


class _JsonLocator:
    """An iterative pure-Python JSON reader, run only to name the line of a problem.

    It reads as ``json.loads`` does, and also refuses duplicate keys and nesting
    deeper than MAX_DEPTH; it raises a GraphError at the first problem.
    """

    def __init__(self, text, display):
        self.text = text
        self.display = display
        self.line_of = _LineCounter(text)

    def fail(self, message, pos):
        line = self.line_of(pos)
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        raise GraphError(f"invalid JSON: {message} (column {col})", self.display, line)

    def skip(self, pos):
        return _WS.match(self.text, pos).end()

    def string(self, pos):
        try:
            return json.decoder.scanstring(self.text, pos + 1, True)
        except json.JSONDecodeError as exc:
            self.fail(exc.msg, exc.pos)

    def parse(self):
        text, n = self.text, len(self.text)
        stack = []           # frames: [container, pending key or None]
        pos = self.skip(0)
        root = _MISSING = object()
        while True:
            # -- read one value (or open a container) at pos --------------------------------
            if pos >= n:
                self.fail("Expecting value", pos)
            ch = text[pos]
            if ch == "{" or ch == "[":
                if len(stack) >= MAX_DEPTH:
                    raise GraphError(f"document nested too deeply (limit {MAX_DEPTH} levels)",
                                     self.display, self.line_of(pos))
                opened = {} if ch == "{" else []
                stack.append([opened, None])
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
                    container[frame[1]] = value
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
        frame[1] = key
        end = self.skip(end)
        if end >= len(text) or text[end] != ":":
            self.fail("Expecting ':' delimiter", end)
        return self.skip(end + 1)


# -- YAML ------------------------------------------------------------------------------------
_SEQ_TAGS = (None, "!", "tag:yaml.org,2002:seq")
_MAP_TAGS = (None, "!", "tag:yaml.org,2002:map")
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
# Note [YAML numbers]: gradcli reads YAML scalars as PyYAML's YAML 1.1 resolver
# does, with two deliberate differences (docs/graph-format.md, "Numbers in
# YAML"): a plain number in exponent form without a dot or an exponent sign
# (1e308, -1e-3, 2E5, 1.0e5), a str for YAML 1.1, is the float that YAML 1.2
# and JSON read; and a base-60 int or float (1:30, 190:20:30.15: 90, 685230.15
# for YAML 1.1) is refused, so `[1:30]` meant as a slice or a time is never
# silently a number.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")
EAGER_LINE_DEPTH = 2        # YAML: lines of paths up to this long are kept while parsing
# Note [Lines of expect]: the expected values of ``expect`` (``grads.NAME``,
# ``reference.grads.NAME``, ``forward.values.NAME``) are leaves whose line the
# loader takes at load, as it does for ``tensors.NAME``. Kept while parsing, under
# ``expect`` only and up to four levels (not into a value's nested lists), they
# cost a few dict stores; found on demand they cost a second stream of the whole
# document (about 15 ms of the 70 ms load of an exported ViT).
EXPECT_LINE_DEPTH = 4
_NO_KEY = object()


def parse_yaml(text, display="<string>", *, max_bytes=None) -> Document:
    """Compose a YAML document from libyaml's events, iteratively and within limits."""
    import yaml  # noqa: PLC0415 - imported only when a YAML file is read

    if not text or text.isspace():
        raise GraphError("the file is empty", display)
    budget = _check_budget(text, display, max_bytes)
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    max_values = budget // BYTES_PER_VALUE
    composer = _YamlComposer(loader_cls(text), yaml, display, max_values)
    try:
        data, composer = _compose_yaml(text, loader_cls, yaml, display, max_values, composer)
    except yaml.YAMLError as exc:
        # Note [Nesting is gradcli's own limit]
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        if _depth_before(text, composer, mark) >= MAX_DEPTH - LIBRARY_LOOKAHEAD:
            raise GraphError(f"document nested too deeply (limit {MAX_DEPTH} levels)", display,
                             mark.line + 1 if mark is not None else None) from None
        reread = _reread_in_python(text, exc, loader_cls, yaml, display, max_values)
        if reread is None:
            raise _yaml_error(exc, display) from None
        loader_cls = yaml.SafeLoader
        data, composer = reread
    locate = _YamlLines(text, loader_cls, yaml, display, composer.lines).line
    return Document(data, display, locate, composer.lines)


def _compose_yaml(text, loader_cls, yaml, display, max_values, composer=None):
    if composer is None:
        composer = _YamlComposer(loader_cls(text), yaml, display, max_values)
    loader = composer.loader
    try:
        with paused():   # Note [Collector pauses]
            return composer.document(), composer
    finally:
        loader.dispose()


# Note [Nesting is gradcli's own limit]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# How deep a document may nest is gradcli's rule (MAX_DEPTH), checked by the
# composer on the events. A YAML library may carry a limit of its own (libyaml
# in PyYAML 6.0.4 refuses flow nesting past 1000 levels, while its scanner runs
# a few tokens ahead of the composer), and its wording and its number may change
# from one release to the next. So when libyaml refuses a text, the text is read
# again by PyYAML's pure-Python reader, which has no depth limit, through the
# same composer: a text nested past MAX_DEPTH then fails with gradcli's own
# message and line, and a text within it that libyaml refused for its own limit
# is read. Any other error keeps libyaml's report (the Python reader words
# syntax errors differently). Only the error path pays, and only up to
# REREAD_LIMIT characters: past it, the prefix up to libyaml's error is read
# again, which is enough to find gradcli's limit there. Where the library refuses
# while the composer already stands within LIBRARY_LOOKAHEAD levels of MAX_DEPTH (its
# scanner reads a few tokens ahead), the text goes past gradcli's limit, and that is
# said at once: reading a deep flow collection again in pure Python is quadratic.
REREAD_LIMIT = 8 * 2**20
LIBRARY_LOOKAHEAD = 8


def _depth_before(text, composer, mark):
    """How deep the text stands where the library refused: the composer's depth, or, where
    the scanner refused before any event of the line came (libyaml scans a flow line
    ahead), the composer's depth plus the flow brackets opened and not closed before the
    error on a text of at most REREAD_LIMIT characters. Quotes are not parsed: the count
    only decides which message a text that the library already refused gets."""
    depth = composer.depth_at_error
    if mark is None or not 0 < mark.index <= REREAD_LIMIT:
        return depth
    head = text[:mark.index]
    flow = head.count("[") + head.count("{") - head.count("]") - head.count("}")
    return max(depth, flow)


def _reread_in_python(text, exc, loader_cls, yaml, display, max_values):
    """(data, composer) where the pure-Python reader reads ``text``; None to keep ``exc``.
    Raises gradcli's GraphError where the text breaks one of gradcli's own limits.

    The prefix before libyaml's error is read first: where gradcli's limit is broken
    there, that answers at the cost of the prefix (the Python reader is slow on deep
    flow nesting). Only then is the whole text read, when it is small enough."""
    if loader_cls is yaml.SafeLoader:
        return None
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None and 0 < mark.index <= REREAD_LIMIT:
        try:
            _compose_yaml(text[:mark.index], yaml.SafeLoader, yaml, display, max_values)
        except yaml.YAMLError:
            pass                       # the prefix ends mid-document: as expected
    if len(text) > REREAD_LIMIT:
        return None
    try:
        return _compose_yaml(text, yaml.SafeLoader, yaml, display, max_values)
    except yaml.YAMLError:
        return None


def _yaml_error(exc, display):
    import yaml  # noqa: PLC0415 - already imported by the caller

    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        return GraphError(f"invalid YAML: {problem}", display, line)
    first = (str(exc).strip().splitlines() or ["syntax error"])[0]
    return GraphError(f"invalid YAML: {first}", display)


_CORE_SCALARS = {"tag:yaml.org,2002:int": "a YAML 1.1 integer (decimal, 0o/0 octal, 0x, 0b)",
                 "tag:yaml.org,2002:float": "a YAML 1.1 float",
                 "tag:yaml.org,2002:bool": "a YAML 1.1 boolean",
                 "tag:yaml.org,2002:timestamp": "a YAML timestamp"}


def _short_tag(tag):
    return "!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else tag


class _Scalars:
    """Python values of YAML scalar events, as SafeLoader makes them (without its per-node
    bookkeeping): plain scalars are resolved by the loader's implicit resolvers, values of
    non-str tags are cached by their text, and bad content (``!!int ''``) is a GraphError.

    Note [Plain scalars without a regex]: most plain scalars of a graph file are names
    (``y0``, ``matmul``, ``out``), and running the loader's resolvers on each of them (a
    regex per candidate tag, then the exponent regex) cost more than libyaml's event. So
    the resolvers are split once, by the first character they apply to: a resolver whose
    pattern is a list of words (``yes|no|...``, ``~|null|...``) becomes a dict from
    those words to their values (``words``), and the first characters of every other
    resolver (digits, signs, ``.``, ``<``, ``=``, ...) and of exponent floats form
    ``special``. A plain scalar is then a word (a dict lookup), or resolved by
    the regexes (its first character is special), or else the str it is: the
    same values as the regexes give (tests/test_document.py compares the two on
    generated scalars), with no regex run for a name.
    """

    def __init__(self, loader, yaml, display):
        self.loader = loader
        self.yaml = yaml
        self.display = display
        self.resolvers = loader.yaml_implicit_resolvers
        self.constructors = loader.yaml_constructors
        self.cache = {}
        self.words, self.special = _split_resolvers(loader, yaml)

    def value(self, ev):
        tag, text = ev.tag, ev.value
        if tag is None:
            if not ev.implicit[0]:
                return text                             # quoted: a str
            for res_tag, regexp in self.resolvers.get(text[:1], ()):
                if regexp.match(text):
                    tag = res_tag
                    break
            else:
                if _EXPONENT_FLOAT.match(text):        # Note [YAML numbers]
                    return float(text)
                return text
        elif tag == "!":
            tag = self.loader.resolve(self.yaml.ScalarNode, text, ev.implicit)
        if tag == _STR:
            return text
        if ":" in text and tag in (_INT, _FLOAT):       # Note [YAML numbers]
            line = ev.start_mark.line + 1 if ev.start_mark is not None else None
            raise GraphError(f"{text[:40]!r} is a base-60 number in YAML 1.1, which gradcli "
                             "does not read: write the number itself, or quote it for a "
                             "string", self.display, line)
        key = (tag, text)
        found = self.cache.get(key, _NO_KEY)
        if found is not _NO_KEY:
            return found
        value = self.construct(tag, text, ev)
        if len(self.cache) >= 4096:
            self.cache.clear()
        self.cache[key] = value
        return value

    def construct(self, tag, text, ev):
        yaml = self.yaml
        line = ev.start_mark.line + 1 if ev.start_mark is not None else None
        if tag == _MERGE:
            raise GraphError("YAML merge keys (<<) are not supported", self.display, line)
        make = self.constructors.get(tag)
        if make is None:
            raise GraphError(f"YAML tag {tag} is not supported", self.display, line)
        node = yaml.ScalarNode(tag, text, ev.start_mark, ev.end_mark, ev.style)
        try:
            value = make(self.loader, node)
            if isinstance(value, (list, dict, set)) or hasattr(value, "__next__"):
                raise TypeError("not a scalar")
        except GraphError:
            raise
        except Exception as exc:  # noqa: BLE001 - PyYAML raises anything on bad content
            detail = ""
            if isinstance(exc, yaml.YAMLError):
                msg = getattr(exc, "problem", None) or str(exc)
                detail = ": " + ((msg.strip().splitlines() or [""])[0])[:80]
            elif isinstance(exc, (ValueError, OverflowError)) and tag in _CORE_SCALARS:
                # Python's own words (``int()`` "with base 8" for YAML 1.1's leading 0)
                # describe PyYAML's constructor, not the file: say what the tag expects
                detail = f": not {_CORE_SCALARS[tag]}"
            elif isinstance(exc, (ValueError, OverflowError)):
                detail = ": " + ((str(exc).strip().splitlines() or [""])[0])[:80]
            raise GraphError(f"invalid YAML value {text[:40]!r} for tag {_short_tag(tag)}"
                             f"{detail}", self.display, line) from None
        return value


_EXPONENT_FIRST = frozenset("+-.0123456789")      # what _EXPONENT_FLOAT can start with
_SPLIT_CACHE = {}


def _literal_words(regexp):
    """The words a resolver's pattern matches if it is a list of words, else None."""
    pattern = regexp.pattern
    if regexp.flags & re.VERBOSE:
        pattern = re.sub(r"\s+", "", pattern)
    m = re.fullmatch(r"\^\(\?:([A-Za-z~|]*)\)\$", pattern)
    if m is None:
        return None
    words = m.group(1).split("|")
    return words if all(regexp.match(w) for w in words) else None


def _split_resolvers(loader, yaml):
    """(words, special) of Note [Plain scalars without a regex] for the loader's resolvers.

    Cached by the resolver and constructor tables (a resolver added to them later,
    as ``add_implicit_resolver`` does, changes the key and splits them again).
    """
    resolvers, constructors = loader.yaml_implicit_resolvers, loader.yaml_constructors
    key = (id(resolvers), id(constructors), len(constructors),
           tuple(map(len, resolvers.values())))
    found = _SPLIT_CACHE.get(key)
    if found is not None:
        return found
    words, special = {}, set(_EXPONENT_FIRST)
    for first, candidates in resolvers.items():
        lists = [(tag, _literal_words(regexp)) for tag, regexp in candidates]
        if first in _EXPONENT_FIRST or any(found is None for _, found in lists):
            special.add(first)
            continue
        for tag, listed in lists:                    # the first resolver to match wins
            make = constructors.get(tag)
            for word in listed:
                if word[:1] != first or word in words:
                    continue
                if make is None:                     # no constructor: the general path fails
                    special.add(first)
                    break
                words[word] = make(loader, yaml.ScalarNode(tag, word))
    for word in [w for w in words if w[:1] in special]:
        del words[word]
    _SPLIT_CACHE.clear()
    found = _SPLIT_CACHE[key] = (words, frozenset(special))
    return found


class _YamlComposer:
    """Python data from libyaml's events, iteratively, within the budget and depth limits.

    Note [YAML event loop]: the loop runs once per event, and libyaml's event (a
    Python object with two marks) already costs about 0.6 us of CPU; so the loop does as
    little as it can besides: the open container's state is kept in local
    variables (saved on a stack only when a container opens), a scalar that is
    no anchor is stored inline with no call (Note [Plain scalars without a regex]),
    a value's size is counted only as a running total (what an anchor's value
    expands to is the total's growth while it was open), and marks are read only
    for the lines kept while parsing (EAGER_LINE_DEPTH) and for errors.
    """

    def __init__(self, loader, yaml, display, max_values):
        self.loader = loader
        self.yaml = yaml
        self.display = display
        self.max_values = max_values
        self.lines = {}
        self.anchors = {}        # name -> (value, size, height)
        self.scalars = _Scalars(loader, yaml, display)
        self.depth_at_error = 0

    def fail(self, message, mark):
        raise GraphError(message, self.display, mark.line + 1 if mark is not None else None)

    def document(self):
        yaml = self.yaml
        self.loader.get_event()                  # StreamStart
        ev = self.loader.peek_event()
        if isinstance(ev, yaml.StreamEndEvent):
            raise GraphError("the file is empty", self.display)
        self.loader.get_event()                  # DocumentStart
        data = self.node()
        self.loader.get_event()                  # DocumentEnd
        ev = self.loader.get_event()
        if not isinstance(ev, yaml.StreamEndEvent):
            self.fail("a graph file holds one YAML document, found a second one", ev.start_mark)
        return data

    def node(self):
        """Read the events of one node (the document's root) into Python data."""
        yaml = self.yaml
        get = self.loader.get_event
        ev = get()
        kind = type(ev)
        self.lines[()] = ev.start_mark.line + 1
        if kind is yaml.ScalarEvent:
            value = self.scalars.value(ev)
            if ev.anchor is not None:
                self.anchors[ev.anchor] = (value, 1, 0)
            return value
        if kind is not yaml.MappingStartEvent and kind is not yaml.SequenceStartEvent:
            if kind is yaml.AliasEvent:
                self.fail(f"invalid YAML: unknown alias *{ev.anchor} (an alias must follow "
                          "its anchor's complete value)", ev.start_mark)
            self.fail(f"invalid YAML: unexpected {kind.__name__}",
                      getattr(ev, "start_mark", None))
        return self._containers(ev)

    def _containers(self, ev):
        """The loop of Note [YAML event loop], from the root container's start event ``ev``."""
        yaml = self.yaml
        get = self.loader.get_event
        Scalar, Alias = yaml.ScalarEvent, yaml.AliasEvent
        MapStart, SeqStart = yaml.MappingStartEvent, yaml.SequenceStartEvent
        MapEnd, SeqEnd = yaml.MappingEndEvent, yaml.SequenceEndEvent
        scalars = self.scalars
        words, special, scalar_value = scalars.words, scalars.special, scalars.value
        lines, anchors, key_of = self.lines, self.anchors, self.key
        NO_KEY = _NO_KEY
        deepest = MAX_DEPTH - 1          # open containers around the one that opens last
        # The open container: the value, a mapping?, its pending key (or NO_KEY), the path
        # whose children's lines are kept (or None), its anchor, the count at its start,
        # its height so far (the largest height of a child: scalars 0). The containers
        # around it are saved on ``stack`` as tuples of the same.
        is_map = type(ev) is MapStart
        if ev.tag is not None and ev.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
            self.fail(f"YAML tag {ev.tag} is not supported", ev.start_mark)
        container = {} if is_map else []
        key, path, anchor, start, height = NO_KEY, (), ev.anchor, 0, 0
        count = 1                # values read so far, aliases counted as what they expand to
        stack = []
        push, pop = stack.append, stack.pop
        try:
            while True:
                ev = get()
                kind = type(ev)
                if kind is Scalar:
                    count += 1
                    if ev.anchor is None and ev.tag is None:
                        value = ev.value
                        if ev.implicit[0]:                       # plain (else quoted: a str)
                            if value in words:
                                value = words[value]
                            elif value[:1] in special:
                                value = scalar_value(ev)
                    else:
                        value = scalar_value(ev)
                        if ev.anchor is not None:
                            anchors[ev.anchor] = (value, 1, 0)
                    if is_map:
                        if key is NO_KEY:
                            if path is None and type(value) is str and value not in container:
                                key = value
                            else:
                                key = key_of(container, value, ev, path)
                            continue
                        container[key] = value
                        key = NO_KEY
                    else:
                        if path is not None:
                            lines[path + (len(container),)] = ev.start_mark.line + 1
                        container.append(value)
                    continue
                if kind is MapStart or kind is SeqStart:
                    if is_map and key is NO_KEY:
                        self.fail("mapping keys must be plain strings", ev.start_mark)
                    if ev.tag is not None and ev.tag not in (_MAP_TAGS if kind is MapStart
                                                             else _SEQ_TAGS):
                        self.fail(f"YAML tag {ev.tag} is not supported", ev.start_mark)
                    if len(stack) >= deepest:
                        self.fail(f"document nested too deeply (limit {MAX_DEPTH} levels)",
                                  ev.start_mark)
                    push((container, is_map, key, path, anchor, start, height))
                    if path is not None:
                        if is_map:
                            path += (key,)
                        else:
                            path += (len(container),)
                            lines[path] = ev.start_mark.line + 1
                        if len(path) >= EAGER_LINE_DEPTH and (
                                path[0] != "expect" or len(path) >= EXPECT_LINE_DEPTH):
                            path = None     # (Note [Lines of expect])
                    if kind is MapStart:
                        container, is_map = {}, True
                    else:
                        container, is_map = [], False
                    key, anchor, start, height = NO_KEY, ev.anchor, count, 0
                    count += 1
                    continue
                if kind is MapEnd or kind is SeqEnd:
                    value, child = container, height + 1
                    if anchor is not None:
                        anchors[anchor] = (value, count - start, child)
                    if not stack:
                        return value
                    container, is_map, key, path, anchor, start, height = pop()
                elif kind is Alias:
                    found = anchors.get(ev.anchor)
                    if found is None:
                        self.fail(f"invalid YAML: unknown alias *{ev.anchor} (an alias must "
                                  "follow its anchor's complete value)", ev.start_mark)
                    value, size, child = found
                    count += size
                    if count > self.max_values:
                        self.fail(f"document too large: more than {self.max_values} values "
                                  "after expanding aliases (an alias bomb?); the memory budget "
                                  "(--max-document-bytes) allows "
                                  f"{self.max_values * BYTES_PER_VALUE} bytes", ev.start_mark)
                    if len(stack) + 1 + child > MAX_DEPTH:
                        self.fail(f"document nested too deeply (limit {MAX_DEPTH} levels)",
                                  ev.start_mark)
                    if is_map and key is NO_KEY:
                        if child:
                            self.fail("mapping keys must be plain strings", ev.start_mark)
                        key = key_of(container, value, ev, path)
                        continue
                    if not is_map and path is not None:
                        lines[path + (len(container),)] = ev.start_mark.line + 1
                else:
                    self.fail(f"invalid YAML: unexpected {kind.__name__}",
                              getattr(ev, "start_mark", None))
                # -- a complete container or alias: store it in the open container ---------------
                if child > height:
                    height = child
                if is_map:
                    container[key] = value
                    key = NO_KEY
                else:
                    container.append(value)
        except self.yaml.YAMLError:
            # how deep the composer stood when the library refused (Note [Nesting is
            # gradcli's own limit])
            self.depth_at_error = len(stack) + 1
            raise

    def key(self, container, key, ev, path):
        """``key`` (a scalar) as the str key of mapping ``container``, checked; its line
        is kept when ``path`` (the mapping's) is."""
        if type(key) is not str:
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                self.fail(f"unsupported mapping key {key!r}", ev.start_mark)
            key = key if isinstance(key, str) else str(key)
        if key in container:
            self.fail(f"duplicate key {key!r}", ev.start_mark)
        if path is not None:
            self.lines[path + (key,)] = ev.start_mark.line + 1
        return key


class _YamlLines:
    """Lines of YAML values by path: libyaml's events streamed again on a miss.

    A stream indexes the direct children of every container on the asked path
    (into ``known``, shared with the Document's eager lines), so asking for each
    item of one list in turn streams the document once, not once per item.
    """

    def __init__(self, text, loader_cls, yaml, display, known):
        self.text = text
        self.loader_cls = loader_cls
        self.yaml = yaml
        self.display = display
        self.known = known

    def line(self, path):
        found = self.known.get(path)
        if found is not None:
            return found
        yaml = self.yaml
        loader = self.loader_cls(self.text)
        try:
            with paused():   # Note [Collector pauses]
                return self._walk(loader, path)
        except (yaml.YAMLError, GraphError):
            return None
        finally:
            loader.dispose()

    def _walk(self, loader, target):
        yaml = self.yaml
        known = self.known
        value_of = _Scalars(loader, yaml, self.display).value
        Scalar, Alias = yaml.ScalarEvent, yaml.AliasEvent
        MapStart, SeqStart = yaml.MappingStartEvent, yaml.SequenceStartEvent
        MapEnd, SeqEnd = yaml.MappingEndEvent, yaml.SequenceEndEvent
        get = loader.get_event
        get(), get()                             # StreamStart, DocumentStart
        best = None
        # frames: [is_map, pending key (or _NO_KEY), next index, path if on the target's path]
        stack = []
        while True:
            ev = get()
            kind = type(ev)
            if kind is MapEnd or kind is SeqEnd:
                frame = stack.pop()
                if not stack or (frame[3] is not None and len(frame[3]) < len(target)):
                    # a container above the target ended: its children, the target's
                    # siblings among them, are indexed (the target's own value ending
                    # stops nothing: asking for every entry of a mapping in turn then
                    # streams the document once, not once per entry)
                    return best
                _YamlLines._stored(stack[-1])
                continue
            if kind is not Scalar and kind is not Alias and kind is not MapStart \
                    and kind is not SeqStart:
                return best                      # document or stream end
            line = ev.start_mark.line + 1
            frame = stack[-1] if stack else None
            if frame is None:
                path = ()
            elif frame[3] is None:
                path = None
            elif frame[0]:
                if frame[1] is _NO_KEY:          # this event is a key
                    key = value_of(ev) if kind is Scalar else None
                    frame[1] = key if isinstance(key, str) or key is None else str(key)
                    here = frame[3] + (frame[1],)
                    known.setdefault(here, line)
                    if target[:len(here)] == here:
                        best = line
                    continue                     # (keys are scalars: checked when parsed)
                path = frame[3] + (frame[1],)    # a value: its line is its key's
            else:
                path = frame[3] + (frame[2],)
                known.setdefault(path, line)
            on_path = path is not None and target[:len(path)] == path
            if on_path and (frame is None or not frame[0]):
                best = line
            if kind is MapStart or kind is SeqStart:
                stack.append([kind is MapStart, _NO_KEY, 0, path if on_path else None])
                continue
            if frame is None:
                return best
            _YamlLines._stored(frame)

    @staticmethod
    def _stored(frame):
        if frame[0]:
            frame[1] = _NO_KEY
        else:
            frame[2] += 1
