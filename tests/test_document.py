"""The document readers at scale: no fixed size caps, a memory budget instead, C parsers,
lines found on demand."""
from __future__ import annotations

import gc
import json
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import gradcli
from gradcli import document
from gradcli.document import (BYTES_PER_CHAR, MAX_DEPTH, json_depth, parse_json, parse_yaml,
                              read_document)
from gradcli.errors import GraphError
from gradcli.loader import loads

SMALL = """\
version: 1
tensors:
  x: {shape: [4, 3], init: normal}
  W: {shape: [3, 5], init: normal, requires_grad: true}
ops:
  - {op: matmul, inputs: [x, W], output: h, id: fc1}
  - {op: sum, inputs: [h], output: loss}
backward:
  roots: [loss]
"""


# -- no fixed caps: a budget -------------------------------------------------------------
@pytest.mark.timeout(120)
def test_more_than_a_million_values_read_in_both_formats():
    # the old readers refused anything over 1,000,000 values
    n = 1_000_001
    assert parse_json("[" + ",".join(["1"] * n) + "]").data == [1] * n
    text = "[" + ", ".join(["1"] * n) + "]\n"       # 3 MB of YAML, a million scalars
    assert parse_yaml(text).data == [1] * n


@pytest.mark.timeout(60)
def test_a_file_over_64_mib_is_read(tmp_path):
    path = tmp_path / "big.json"
    pad = "x" * (65 * 2**20)
    path.write_text(json.dumps({"x-pad": pad, "version": 1}))
    assert read_document(path).data["version"] == 1


def test_the_memory_budget_is_checked_before_parsing(tmp_path, monkeypatch):
    text = json.dumps({"version": 1, "x-list": list(range(1000))})
    need = len(text) * BYTES_PER_CHAR
    assert parse_json(text, max_bytes=need).data["version"] == 1
    calls = []
    monkeypatch.setattr(document.json, "loads", lambda *a, **k: calls.append(1))
    with pytest.raises(GraphError, match=rf"^f: document too large: .* up to {need} bytes of "
                                         rf"memory, over the budget of {need - 1} bytes "
                                         r"\(--max-document-bytes\)$"):
        parse_json(text, "f", max_bytes=need - 1)
    assert calls == []                                  # refused before parsing
    with pytest.raises(GraphError, match="over the budget of 100 bytes"):
        parse_yaml("a: [1, 2, 3, 4, 5]\n", max_bytes=100)
    path = tmp_path / "g.yaml"
    path.write_text(SMALL)
    with pytest.raises(GraphError, match=r"g.yaml: document too large: .* over the budget of "
                                         r"1000 bytes"):
        gradcli.load(path, max_document_bytes=1000)     # refused from the file's size
    assert "W" in gradcli.load(path, max_document_bytes=10**6).run().grads
    with pytest.raises(GraphError, match="over the budget of 1000 bytes"):
        loads(SMALL, max_document_bytes=1000)


def test_alias_expansion_is_charged_against_the_budget():
    # 10 x 10 x 10 = 1000 values once expanded: refused under a budget of 500 values,
    # read (shared, not copied) under a larger one
    text = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n" \
           "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    with pytest.raises(GraphError, match=r"^<string>:3: document too large: more than 500 "
                                         r"values after expanding aliases \(an alias bomb\?\)"):
        parse_yaml(text, max_bytes=500 * document.BYTES_PER_VALUE)
    doc = parse_yaml(text, max_bytes=10**6)
    assert doc.data["c"][9] is doc.data["b"] and len(doc.data["c"]) == 10


# -- C parsers, lines on demand -------------------------------------------------------------
def test_json_happy_path_runs_no_python_tokenizer(monkeypatch):
    """Valid JSON is parsed by json.loads only; the pure-Python reader runs only
    to name the line of a problem."""
    text = json.dumps(yaml.safe_load(SMALL), indent=2)

    def refuse(self):
        raise AssertionError("the pure-Python JSON reader ran on valid input")
    monkeypatch.setattr(document._JsonLocator, "parse", refuse)
    doc = parse_json(text)
    assert doc.data == json.loads(text)
    assert text.splitlines()[doc.line("ops", 1, "inputs", 0) - 1].strip() == '"h"'
    assert doc.line("tensors", "W", "requires_grad") == text.splitlines().index(
        '      "requires_grad": true') + 1


def test_yaml_keeps_top_lines_and_finds_deeper_ones_on_demand():
    doc = parse_yaml(SMALL)
    assert doc._lines[("ops", 1)] == 7 and doc._lines[("tensors", "W")] == 4
    assert ("ops", 1, "inputs", 0) not in doc._lines        # not recorded while parsing
    assert doc.line("ops", 1, "inputs", 0) == 7
    assert doc.line("tensors", "W", "shape", 1) == 4
    assert doc.line("backward", "roots", 0) == 9
    assert doc.line("backward", "nowhere", 3) == 8
    assert doc.line("nowhere") == 1


def test_lines_of_every_op_in_a_long_document():
    ops = [{"op": "relu", "inputs": [f"t{i}"], "output": f"t{i + 1}"} for i in range(3000)]
    data = {"version": 1, "ops": ops}
    text = json.dumps(data, indent=1)
    doc = parse_json(text)
    lines = text.splitlines()
    for i in (0, 1, 1234, 2999):
        assert lines[doc.line("ops", i) - 1].strip() == "{"
        assert lines[doc.line("ops", i, "output") - 1].strip() == f'"output": "t{i + 1}"'
    ytext = yaml.safe_dump(data, default_flow_style=None, sort_keys=False)
    ydoc = parse_yaml(ytext)
    ylines = ytext.splitlines()
    for i in (0, 1, 1234, 2999):
        assert ylines[ydoc.line("ops", i) - 1] == "- op: relu"
        assert ylines[ydoc.line("ops", i, "output") - 1] == f"  output: t{i + 1}"


def test_the_collector_is_paused_while_parsing_and_restored():
    text = json.dumps([{"a": [i]} for i in range(50_000)])
    ytext = "- {a: [1]}\n" * 20_000
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])
    gc.callbacks.append(count)
    try:
        assert gc.isenabled()
        parse_json(text)
        parse_yaml(ytext)
        # 120,000+ new containers: without the pause, a collection per 700 of them
        assert len(collections) <= 2       # at most one, after each parse
        assert gc.isenabled()
        gc.disable()
        try:
            parse_json(text)
            assert not gc.isenabled()      # left as the caller had it
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(count)


JSON_DATA = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(alphabet='[]{}"\\ab\n,:', max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(alphabet='[]{}"\\ab', max_size=4), inner, max_size=4),
    max_leaves=30)


def _depth(obj):
    if isinstance(obj, dict):
        return 1 + max(map(_depth, obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max(map(_depth, obj), default=0)
    return 0


@settings(max_examples=200, deadline=None)
@given(JSON_DATA, st.sampled_from([None, 1]), st.booleans())
def test_json_depth_ignores_brackets_and_escaped_quotes_in_strings(data, indent, ascii_only):
    text = json.dumps(data, indent=indent, ensure_ascii=ascii_only)
    assert json_depth(text) == _depth(data)


def test_json_depth_at_the_limit_far_down_the_stack():
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    limit = sys.getrecursionlimit()

    def nested(k):
        return nested(k - 1) if k else parse_json(deep).data
    assert nested(limit // 2) is not None          # json.loads' C recursion has room
    assert sys.getrecursionlimit() == limit         # and the limit is restored
    with pytest.raises(GraphError, match=r"^<string>:2: document nested too deeply"):
        parse_json("[\n" + "[" * MAX_DEPTH + "]" * (MAX_DEPTH + 1))


def test_json_falls_back_to_the_iterative_reader_where_cpython_recursion_runs_out(monkeypatch):
    """Where raising the recursion limit does not give json.loads room (another
    interpreter's C limit), the iterative reader reads the document instead."""
    deep = '{"a": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    monkeypatch.setattr(document.sys, "setrecursionlimit", lambda n: None)
    calls, iterative = [], document._JsonLocator.parse

    def parse(self):
        calls.append(1)
        return iterative(self)
    monkeypatch.setattr(document._JsonLocator, "parse", parse)

    def nested(k):
        return nested(k - 1) if k else parse_json(deep)
    data = nested(sys.getrecursionlimit() // 2).data
    depth = 1
    data = data["a"]
    while data:
        data, depth = data[0], depth + 1
    assert data == [] and depth + 1 == MAX_DEPTH       # the dict and 999 lists
    assert calls == [1]                                 # json.loads ran out, the reader read it


# -- scalars --------------------------------------------------------------------------------
@pytest.mark.parametrize("value, tag", [("''", "int"), ("'-'", "int"), ("''", "float"),
                                        ("maybe", "bool"), ("garbage", "timestamp"),
                                        ("'0x'", "int"), ("'1e'", "float"), ("'1.5'", "int"),
                                        ("-0.0", "int"), ("abc", "float")])
def test_yaml_tags_with_bad_content_are_one_line_errors(value, tag):
    with pytest.raises(GraphError) as info:
        parse_yaml(f"a: 1\nb: [!!{tag} {value}]\n", "f.yaml")
    msg = str(info.value)
    assert msg.startswith(f"f.yaml:2: invalid YAML value ") and f"for tag !!{tag}" in msg
    assert "\n" not in msg
    # what the tag expects, not Python's words for PyYAML's constructor ("int() with base 8")
    assert "int()" not in msg and "literal" not in msg and "could not convert" not in msg


def test_scalars_read_as_pyyaml_reads_them():
    # (1e3 and 12:30:00 moved to the next tests: gradcli reads them differently on purpose)
    text = ("a: [1, 1.0, 1.0e+3, .inf, -.nan, 0x1f, 0o17, 1_000, true, no, ~, null, '', x, '1',"
            " !!str 2, !!float 3, !!int '4', 2001-12-14, 2001-12-14t21:59:43.10-05:00, ! 5,"
            " !!binary aGk=, 'y', y, Yes, OFF, '12:30:00', 1e3x, e5]\n")
    got, want = parse_yaml(text).data, yaml.safe_load(text)
    assert repr(got) == repr(want)
    assert type(parse_yaml("version: 1.0\n").data["version"]) is float
    assert type(parse_json('{"version": 1.0}').data["version"]) is float


# Note [YAML numbers]: the two deliberate differences from PyYAML's YAML 1.1 reading.
@pytest.mark.parametrize("text, value, pyyaml", [
    ("1e3", 1000.0, "1e3"),                 # YAML 1.1: a str (no dot); YAML 1.2 and JSON: 1000.0
    ("-1e308", -1e308, "-1e308"),           # the reviewer's `low: -1e308`
    ("2E-3", 0.002, "2E-3"),
    ("1.0e5", 100000.0, "1.0e5"),           # YAML 1.1 wants an exponent sign
    (".5e3", 500.0, ".5e3"),
])
def test_exponent_numbers_without_a_dot_are_floats_as_in_json(text, value, pyyaml):
    assert yaml.safe_load(f"a: {text}\n")["a"] == pyyaml
    got = parse_yaml(f"a: [{text}]\nb: {text}\n").data
    assert got == {"a": [value], "b": value} and type(got["b"]) is float
    if not text.startswith("."):                                  # not a JSON number
        assert parse_json(f'{{"a": {text}}}').data["a"] == value   # as JSON reads it
    assert parse_yaml(f"a: '{text}'\n").data["a"] == text      # quoted: still a str


@pytest.mark.parametrize("text, pyyaml", [
    ("[1:30]", [90]), ("12:30:00", 45000), ("-1:30", -90), ("190:20:30.15", 685230.15),
    ("!!int 1:30", 90), ("!!float 1:30.5", 90.5),
])
def test_base_60_numbers_are_refused_in_one_line(text, pyyaml):
    assert yaml.safe_load(f"value: {text}\n")["value"] == pyyaml     # what YAML 1.1 makes of it
    with pytest.raises(GraphError) as info:
        parse_yaml(f"a: 1\nvalue: {text}\n", "f.yaml")
    msg = str(info.value)
    assert msg.startswith("f.yaml:2: ") and "is a base-60 number in YAML 1.1" in msg
    assert "quote it" in msg and "\n" not in msg
    assert parse_yaml(f"value: '{text}'\n").data["value"] == text


def test_init_bound_written_without_a_dot_loads():
    """`low: -1e308` was "must be a number, got '-1e308'"."""
    g = loads("version: 1\ntensors:\n  x: {shape: [3], init: {dist: uniform, low: -1e2, "
              "high: 1e2, seed: 1}, requires_grad: true}\nops:\n"
              "  - {op: sum, inputs: [x], output: s}\nbackward: {roots: [s]}\n")
    x = g.leaves["x"]
    values = x.make(x.shape).tolist()
    assert len(values) == 3 and all(-100.0 <= v <= 100.0 for v in values)


def test_version_must_be_the_int_1():
    base = SMALL.replace("version: 1\n", "")
    assert "W" in loads("version: 1\n" + base).run().grads
    for bad in ("1.0", "true", "'1'", "1.5"):
        with pytest.raises(GraphError, match=r"^<graph>:1: unsupported format version"):
            loads(f"version: {bad}\n" + base)
    doc = json.loads(json.dumps(yaml.safe_load(SMALL)))
    doc["version"] = 1.0
    with pytest.raises(GraphError, match="unsupported format version 1.0"):
        loads(json.dumps(doc), format="json")


def test_yaml_merge_keys_and_unknown_scalar_tags_are_refused():
    with pytest.raises(GraphError, match=r"^<string>:2: YAML merge keys"):
        parse_yaml("a: &a {x: 1}\nb: {<<: *a}\n")
    with pytest.raises(GraphError, match=r"^<string>:1: YAML tag tag:yaml.org,2002:python/none "
                                         r"is not supported"):
        parse_yaml("a: !!python/none ''\n")
    with pytest.raises(GraphError, match=r"^<string>:2: YAML tag tag:yaml.org,2002:value"):
        parse_yaml("a: 1\nb: =\n")                  # PyYAML has no constructor for it


# -- plain scalars without a regex (Note [Plain scalars without a regex]) --------------------
def _reference_values(text):
    """Each scalar item of the block sequence ``text``, resolved by the loader's regexes
    (``_Scalars.value``, the path the word table stands in for); None when the items
    are not all scalars."""
    loader = yaml.CSafeLoader(text)
    try:
        scalars = document._Scalars(loader, yaml, "<string>")
        events = list(iter(loader.get_event, None))
    finally:
        loader.dispose()
    items = events[3:-3]                 # StreamStart DocumentStart SequenceStart ... Ends
    if type(events[2]) is not yaml.SequenceStartEvent or not all(
            type(ev) is yaml.ScalarEvent for ev in items):
        return None
    out = []
    for ev in items:
        try:
            out.append(scalars.value(ev))
        except GraphError as exc:
            out.append(exc)
    return out


PLAIN = st.text(alphabet="yYnNoOtTfFeEsSuUlLaA~0123456789+-._:xXbB<= \n", max_size=7)


@settings(max_examples=400, deadline=None)
@given(st.lists(PLAIN, min_size=1, max_size=6))
def test_plain_scalars_read_as_the_resolvers_read_them(texts):
    """The event loop's word table and first-character test give what running the
    loader's resolvers on each scalar gives; and that is PyYAML's value except for the
    two documented differences (Note [YAML numbers])."""
    text = "".join(f"- {t}\n" for t in texts)
    try:
        want = _reference_values(text)
    except yaml.YAMLError:
        return                                          # not YAML: nothing to compare
    if want is None:
        return                                          # an item is not a scalar
    errors = [w for w in want if isinstance(w, GraphError)]
    if errors:
        with pytest.raises(GraphError) as info:
            parse_yaml(text)
        assert str(info.value) == str(errors[0])
        return
    got = parse_yaml(text).data
    assert repr(got) == repr(want)
    pyyaml = yaml.safe_load(text)
    for g, p in zip(got, pyyaml):
        if isinstance(p, str) and document._EXPONENT_FLOAT.match(p) and type(g) is float:
            assert g == float(p)                        # 1e3: a float, as in YAML 1.2/JSON
        else:
            assert repr(g) == repr(p)


def test_names_are_read_without_running_a_resolver(monkeypatch):
    calls = []
    value = document._Scalars.value

    def spy(self, ev):
        calls.append(ev.value)
        return value(self, ev)
    monkeypatch.setattr(document._Scalars, "value", spy)
    doc = parse_yaml("ops:\n  - {op: matmul, inputs: [y0, on1], output: nope, id: t}\n"
                     "flags: [yes, No, ~, null, '', off, y, n]\nx: [1.5, -2, y1]\n")
    assert doc.data == {"ops": [{"op": "matmul", "inputs": ["y0", "on1"], "output": "nope",
                                 "id": "t"}],
                        "flags": [True, False, None, None, "", False, "y", "n"],
                        "x": [1.5, -2, "y1"]}
    assert calls == ["1.5", "-2"]          # numbers only: every word and name by the table


def test_the_word_table_follows_the_loaders_resolvers():
    import re

    words, special = document._split_resolvers(yaml.CSafeLoader(""), yaml)
    assert words["yes"] is True and words["OFF"] is False
    assert words["~"] is None and words["null"] is None and words[""] is None
    assert "y" not in words and "n" not in words          # YAML 1.1 bools, not PyYAML's
    assert set("0123456789+-.<=") <= special and not set("yYnNoOtTfF~") & special

    class Loader(yaml.CSafeLoader):
        pass
    Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^y[0-9]+$"), ["y"])
    words, special = document._split_resolvers(Loader(""), yaml)
    assert "y" in special and "yes" not in words and "no" in words
    # (the reader itself reads with CSafeLoader: its table is unchanged)
    assert parse_yaml("a: [y0, yes]\n").data == {"a": ["y0", True]}


# -- Note [Nesting is gradcli's own limit] ------------------------------------------------------

class _ShallowLibyaml(yaml.SafeLoader):
    """A stand-in for a libyaml release with a nesting limit of its own (50 levels)
    and words of its own: gradcli must neither inherit the limit nor its wording."""

    def fetch_flow_collection_start(self, token_class):
        if self.flow_level >= 50:
            raise yaml.scanner.ScannerError(None, None, "the library's own depth words",
                                            self.get_mark())
        return super().fetch_flow_collection_start(token_class)


@pytest.fixture
def shallow_libyaml(monkeypatch):
    monkeypatch.setattr(yaml, "CSafeLoader", _ShallowLibyaml)


def test_a_library_depth_limit_below_gradclis_is_not_gradclis(shallow_libyaml):
    doc = parse_yaml("a: %s\n" % ("[" * 200 + "]" * 200))
    depth, value = 0, doc.data["a"]
    while value:
        depth, value = depth + 1, value[0]
    assert depth == 199


def test_past_gradclis_limit_the_message_and_line_are_gradclis(shallow_libyaml):
    text = "a: 1\nb: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n"
    with pytest.raises(GraphError, match=r"^<string>:2: document nested too deeply "
                                         rf"\(limit {MAX_DEPTH} levels\)$"):
        parse_yaml(text)


def test_a_large_text_is_read_again_only_up_to_the_librarys_error(shallow_libyaml, monkeypatch):
    """Past REREAD_LIMIT only the prefix before the library's error is read again: a
    text within gradcli's limit that the library refused keeps the library's report."""
    monkeypatch.setattr(document, "REREAD_LIMIT", 500)
    head = "".join(f"x{i}: [1]\n" for i in range(20))
    text = head + "b: " + "[" * 60 + "]" * 60 + "\n" + "c: 1\n" * 100
    assert len(text) > 500
    with pytest.raises(GraphError, match=r"^<string>:21: invalid YAML: the library's own"):
        parse_yaml(text)
    # a gradcli error inside that prefix is still gradcli's
    with pytest.raises(GraphError, match=r"^<string>:2: duplicate key 'x0'"):
        parse_yaml("x0: 1\n" + text)


def test_other_yaml_errors_keep_their_report(shallow_libyaml):
    with pytest.raises(GraphError, match=r"^<string>:2: invalid YAML: "):
        parse_yaml("a: [1, 2\nb: }\n")


def test_lines_of_every_entry_of_a_deep_mapping_stream_the_document_once(monkeypatch):
    """Asking the line of each entry of a mapping below the top two levels in turn walks
    the document once: the first walk indexes the asked entry's siblings too."""
    from gradcli import document as D

    names = [f"w{i}" for i in range(30)]
    text = "version: 1\nx-notes:\n  grads:\n" + "".join(
        f"    {n}: {{file: weights.npz, key: 'grad:{n}'}}\n" for n in names)
    doc = D.parse_yaml(text, "<t>")
    walks = []
    real = D._YamlLines._walk
    monkeypatch.setattr(D._YamlLines, "_walk", lambda self, *a: walks.append(1) or real(self, *a))
    assert [doc.line("x-notes", "grads", n) for n in names] == list(range(4, 34))
    assert len(walks) == 1


def test_lines_of_expected_values_are_kept_while_parsing(monkeypatch):
    """The loader takes the line of every expected value at load: under ``expect`` the
    reader keeps them while parsing, four levels deep and no deeper (Note [Lines of
    expect]), so no walk of the document is needed."""
    from gradcli import document as D

    text = ("version: 1\nexpect:\n  grads:\n    w: {file: weights.npz, key: 'grad:w'}\n"
            "  forward:\n    values:\n      y: {value: [[1.0, 2.0],\n          [3.0, 4.0]]}\n"
            "  reference:\n    grads:\n      w: {file: weights.npz, key: 'grad64:w'}\n")
    doc = D.parse_yaml(text, "<t>")
    walks = []
    real = D._YamlLines._walk
    monkeypatch.setattr(D._YamlLines, "_walk", lambda self, *a: walks.append(1) or real(self, *a))
    assert [doc.line("expect", "grads", "w"), doc.line("expect", "forward", "values", "y"),
            doc.line("expect", "reference", "grads", "w")] == [4, 7, 11]
    assert walks == []
    assert ("expect", "forward", "values", "y", "value", 1) not in doc._lines   # not so deep
    assert doc.line("expect", "forward", "values", "y", "value", 1) == 8 and walks == [1]
