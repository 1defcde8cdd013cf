"""The loader on good input, and the document readers (YAML/JSON with line numbers)."""
from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import gradcli
from gradcli.cli import main
from gradcli.document import MAX_DEPTH, parse_json, parse_yaml
from gradcli.errors import BackwardError, GraphError
from gradcli.loader import loads, parse_device_map

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "graphs" / "mlp.yaml"

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


def test_mlp_example_runs():
    result = gradcli.load(MLP).run()
    assert set(result.grads) == {"W1", "b1", "W2", "b2"}
    assert result.order[0].node == "CrossEntropyBackward0"


def test_same_graph_as_json_gives_same_gradients(tmp_path):
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(yaml.safe_load(MLP.read_text()), indent=2))
    a = gradcli.load(MLP).run().grads
    b = gradcli.load(path).run().grads
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_x_keys_are_accepted_everywhere():
    doc = yaml.safe_load(SMALL)
    doc["x-author"] = {"name": "me", "notes": [1, 2, {"deep": True}]}
    doc["tensors"]["x"]["x-comment"] = "inputs"
    doc["tensors"]["W"]["init"] = {"dist": "normal", "x-why": "default"}
    doc["ops"][0]["x-note"] = "first layer"
    doc["backward"]["x-todo"] = None
    doc["expect"] = {"x-later": 1, "numeric": False}
    graph = loads(json.dumps(doc), format="json")
    assert "W" in graph.run().grads
    # ... but x- is not a wildcard for unknown keys without it
    doc["ops"][0]["note"] = "first layer"
    with pytest.raises(GraphError, match=r"ops\[0\] 'fc1' \(matmul\): unknown key 'note'"):
        loads(json.dumps(doc), format="json")


def test_outside_paths_refused_unless_allowed(tmp_path):
    (tmp_path / "graphs").mkdir()
    np.save(tmp_path / "x.npy", np.ones((4, 3)))
    path = tmp_path / "graphs" / "g.yaml"
    path.write_text(SMALL.replace("x: {shape: [4, 3], init: normal}", "x: {file: ../x.npy}"))
    with pytest.raises(GraphError, match=r"g.yaml:3: tensors.x: file '../x.npy' is outside"):
        gradcli.load(path)
    result = gradcli.load(path, allow_outside_paths=True).run()
    np.testing.assert_allclose(result.grads["W"], np.full((3, 5), 4.0))
    cli = CliRunner().invoke(main, ["run", str(path), "--allow-outside-paths", "--format", "json"])
    assert cli.exit_code == 0, cli.output


def test_symlink_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "graphs").mkdir()
    np.save(tmp_path / "x.npy", np.ones((4, 3)))
    (tmp_path / "graphs" / "x.npy").symlink_to(tmp_path / "x.npy")
    path = tmp_path / "graphs" / "g.yaml"
    path.write_text(SMALL.replace("x: {shape: [4, 3], init: normal}", "x: {file: x.npy}"))
    with pytest.raises(GraphError, match="outside the graph's folder"):
        gradcli.load(path)


def test_custom_op_needs_allow_code_then_its_module():
    text = SMALL.replace("- {op: sum,", "- {op: custom, function: 'm:F', inputs: [h], outputs: [h2]}\n  - {op: sum,")
    with pytest.raises(GraphError, match="refused without --allow-code"):
        loads(text)
    with pytest.raises(GraphError, match=r"ops\[1\] \(custom\): cannot find 'm:F': no module "
                                         r"named 'm' \(looked in the graph's folder or sys.path\)"):
        loads(text, allow_code=True)


def test_device_map_runs_cuda_graph_on_sim():
    text = SMALL.replace("init: normal, requires_grad: true", "init: normal, requires_grad: true, device: 'cuda:0'")
    text = text.replace("x: {shape: [4, 3], init: normal}", "x: {shape: [4, 3], init: normal, device: 'cuda:0'}")
    result = loads(text, device_map={"cuda": "sim"}).run()
    from gradcli.devices import device_of

    assert str(device_of(result.grads["W"])) == "sim:0"
    assert parse_device_map("cuda=sim") == {"cuda": "sim"}
    assert parse_device_map(" cuda = sim , sim=cpu ") == {"cuda": "sim", "sim": "cpu"}
    for bad in ("cuda", "tpu=sim", "cuda=gpu"):
        with pytest.raises(ValueError, match="bad device map"):
            parse_device_map(bad)


def test_forward_errors_name_file_line_op_and_shapes():
    text = SMALL.replace("W: {shape: [3, 5]", "W: {shape: [4, 5]")
    with pytest.raises(GraphError) as info:
        loads(text, name="g").run()
    assert str(info.value) == ("<g>:6: ops[0] 'fc1' (matmul): matmul shapes do not match: "
                               "x [4, 3] @ W [4, 5] (inner dimensions 3 and 4 differ)")
    assert info.value.line == 6 and info.value.where == "ops[0] 'fc1' (matmul)"


def test_op_results_are_checked_against_the_memory_budget():
    text = SMALL.replace("[4, 3]", "[400, 3]").replace("[3, 5]", "[3, 500]")
    loads(text).run()
    with pytest.raises(GraphError, match=r"ops\[0\] 'fc1' \(matmul\): the result of shape \[400, 500\] "
                                         r"needs 1600000 bytes, over the memory budget"):
        loads(text, max_tensor_bytes=1_000_000).run()


def test_legitimate_backward_failure_is_a_backward_error():
    text = SMALL.replace("- {op: sum, inputs: [h]", "- {op: fail, inputs: [h], output: f, args: {message: boom}}\n"
                         "  - {op: sum, inputs: [f]")
    with pytest.raises(BackwardError, match="boom"):
        loads(text).run()


def test_delay_within_limit_runs():
    text = SMALL.replace("- {op: sum, inputs: [h]", "- {op: delay, inputs: [h], output: d, args: {ms: 1}}\n"
                         "  - {op: sum, inputs: [d]")
    result = loads(text).run()
    assert "DelayBackward0" in [r.node for r in result.order]
    # delay passes its gradient through unchanged
    np.testing.assert_array_equal(result.grads["W"], loads(SMALL).run().grads["W"])


def test_loads_arguments():
    with pytest.raises(ValueError, match="format"):
        loads(SMALL, format="toml")
    with pytest.raises(GraphError, match="empty"):
        loads("  \n")
    assert "W" in loads(SMALL.encode()).run().grads
    with pytest.raises(GraphError, match="binary"):
        loads(b"\x00\x01")


def test_graph_error_format():
    assert str(GraphError("bad", "f.yaml", 3, "ops[1]")) == "f.yaml:3: ops[1]: bad"
    assert str(GraphError("bad", "f.yaml")) == "f.yaml: bad"
    assert str(GraphError("bad")) == "bad"


# -- the document readers -----------------------------------------------------------------------
def test_yaml_lines():
    doc = parse_yaml(SMALL)
    assert doc.line("tensors", "W") == 4
    assert doc.line("tensors", "W", "requires_grad") == 4
    assert doc.line("ops", 1, "inputs", 0) == 7
    assert doc.line("backward", "roots") == 9
    assert doc.line("backward", "nowhere", 3) == 8


def test_json_lines_and_errors():
    text = json.dumps(yaml.safe_load(SMALL), indent=2)
    doc = parse_json(text)
    assert doc.data == json.loads(text)
    assert text.splitlines()[doc.line("ops", 1, "output") - 1].strip().startswith('"output": "loss"')
    with pytest.raises(GraphError, match=r"^f:3: invalid JSON: Expecting value \(column 7\)$"):
        parse_json('{\n "a": 1,\n "b": ,\n}', "f")
    with pytest.raises(GraphError, match="Extra data"):
        parse_json("{} {}")


def test_yaml_aliases_are_shared_not_copied():
    doc = parse_yaml("a: &x [1, 2, {b: 3}]\nc: *x\nd: &s 5\ne: *s\n")
    assert doc.data == {"a": [1, 2, {"b": 3}], "c": [1, 2, {"b": 3}], "d": 5, "e": 5}
    assert doc.data["a"] is doc.data["c"]


def test_nesting_up_to_the_limit_is_fine():
    deep = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert parse_json('{"a": %s}' % deep).data["a"] is not None
    assert parse_yaml("a: %s\n" % deep).data["a"] is not None
    with pytest.raises(GraphError, match="nested too deeply"):
        parse_json('{"a": [%s]}' % deep)
    with pytest.raises(GraphError, match="nested too deeply"):
        parse_yaml("a: [%s]\n" % deep)


JSON_DATA = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=25)


@settings(max_examples=150, deadline=None)
@given(JSON_DATA, st.sampled_from([None, 1, 2]))
def test_readers_agree_with_json_and_pyyaml(data, indent):
    """Parity with json.loads and PyYAML, with the documented YAML difference encoded
    (Note [YAML numbers]): PyYAML writes a string such as '0E0' or '1e5' unquoted (a
    str in YAML 1.1) and gradcli reads that plain scalar as the float YAML 1.2 and
    JSON read; base-60 text ('1:30') is refused."""
    text = json.dumps(data, indent=indent)
    assert parse_json(text).data == json.loads(text)
    text = yaml.safe_dump(data)
    if _has_exponent_or_base60_text(data):
        with contextlib.suppress(GraphError):      # refused (base-60) or read as floats
            assert parse_yaml(text).data != yaml.safe_load(text)
        return
    assert parse_yaml(text).data == yaml.safe_load(text)


def _has_exponent_or_base60_text(data):
    from gradcli.document import _EXPONENT_FLOAT

    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and (_EXPONENT_FLOAT.match(v) or re.fullmatch(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?", v)):
            return True
    return False


def _json_duplicate_key(text):
    """The first duplicate key of a JSON text json.loads accepts, or None."""
    found = []

    def pairs(items):
        keys = [k for k, _ in items]
        found.extend(k for i, k in enumerate(keys) if k in keys[:i])
        return dict(items)
    json.loads(text, object_pairs_hook=pairs)
    return found[0] if found else None


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet='[]{}:,"0123 -.eE+tru\\efalsnNIaiy\n', max_size=24))
def test_json_reader_accepts_and_refuses_what_json_does(text):
    """Parity with json.loads, with the one difference encoded: the reader refuses
    duplicate keys (json.loads keeps the last value). Nesting is within MAX_DEPTH
    and no lone-surrogate escape can be written with this alphabet."""
    try:
        expected, valid = json.loads(text), True
    except (ValueError, RecursionError):
        valid = False
    duplicate = _json_duplicate_key(text) if valid else None
    try:
        got, ok = parse_json(text).data, True
    except GraphError as exc:
        assert "\n" not in str(exc)
        ok = False
        if duplicate is not None:
            assert "duplicate key" in str(exc), str(exc)
    assert ok == (valid and duplicate is None)
    if ok:
        assert repr(got) == repr(expected)


def test_json_duplicate_keys_are_refused_where_json_loads_keeps_the_last():
    text = '{"a": {"b": 1,\n "b": 2}}'
    assert json.loads(text) == {"a": {"b": 2}}
    with pytest.raises(GraphError, match=r"^f:2: duplicate key 'b'$"):
        parse_json(text, "f")


@pytest.mark.parametrize("op", ["aten.bernoulli.default", "aten.dropout.default"])
def test_non_core_random_aten_ops_are_refused_at_load(op):
    """The exporter folds dropout masks into constants; a random op outside the core opset
    (the core ones draw from the file's seed) is refused at load, naming it."""
    text = ("version: 1\ntensors:\n  x: {shape: [4], init: normal, requires_grad: true}\n"
            f"ops:\n  - {{op: {op}, inputs: [x], output: y}}\n"
            "  - {op: sum, inputs: [y], output: loss}\nbackward: {roots: [loss]}\n")
    with pytest.raises(GraphError) as info:
        loads(text, name="random")
    assert f"unknown op '{op}'" in str(info.value) and ":5:" in str(info.value)


@pytest.mark.parametrize("op, args", [
    ("sum", "{axis: 9223372036854775808}"), ("log_softmax", "{axis: -9223372036854775809}"),
    ("sum", "{axis: [0, 2147483648]}"), ("transpose", "{axes: [0, 4294967296]}"),
    ("softmax", "{axis: 64}"),
])
def test_axis_past_any_tensor_rank_is_refused_by_its_checker(op, args):
    # Found by scripts/fuzz_cli.py: NumPy said "Python int too large to convert to C long"
    text = ("version: 1\ntensors:\n  a: {shape: [2, 2], requires_grad: true}\nops:\n"
            f"  - {{op: {op}, inputs: [a], output: b, args: {args}}}\n"
            "  - {op: sum, inputs: [b], output: loss}\nbackward: {roots: [loss]}\n")
    with pytest.raises(GraphError, match=rf"<graph>:5: ops\[0\] \({op}\): bad arg 'ax[ie]s': "
                                         r"(axis|axes entry) -?\d+ is out of range \(a tensor has "
                                         r"at most 64 dims\)"):
        loads(text)
    loads(text.replace(args, "{axis: -1}" if op != "transpose" else "{axes: [1, 0]}")).run()


@pytest.mark.parametrize("op, shape, problem", [
    ("reshape", "[9223372036854775808, 1]", r"shape \[9223372036854775808, 1\]: size "
                                            r"9223372036854775808 is past int64"),
    ("expand", "[" + ", ".join(["1"] * 65) + "]", r"shape has 65 dims, more than a tensor can "
                                                  r"have \(64\)"),
])
def test_shape_arg_past_int64_or_64_dims_is_refused_by_its_checker(op, shape, problem):
    # Found by scripts/fuzz_cli.py: NumPy's "Python int too large to convert to C long"
    text = ("version: 1\ntensors:\n  a: {shape: [2, 2], requires_grad: true}\nops:\n"
            f"  - {{op: {op}, inputs: [a], output: b, args: {{shape: {shape}}}}}\n"
            "  - {op: sum, inputs: [b], output: loss}\nbackward: {roots: [loss]}\n")
    with pytest.raises(GraphError, match=rf"<graph>:5: ops\[0\] \({op}\): bad arg 'shape': {problem}"):
        loads(text)
    loads(text.replace(shape, "[4, 1]" if op == "reshape" else "[3, 2, 2]")).run()
