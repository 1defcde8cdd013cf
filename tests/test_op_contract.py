"""Ops carry their own contract (Note [Ops carry their contract] in gradcli/ops/core.py).

The loader, gradcheck and the CLI ask the op object (args and their rules,
output counts, output shapes/dtypes, public, moves_device, body/code ops),
never an op's name; the `gradcli ops` command and the docs' op table come
from the registry.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gradcli.cli import main
from gradcli.errors import GraphError, OpBugError
from gradcli.loader import loads
from gradcli.ops import OPS, Arg, ShapeMismatch, defvjp, primitive
from gradcli.ops import args as A
from gradcli.ops.catalog import describe_ops, markdown_table, replace_section

ROOT = Path(__file__).resolve().parents[1]

GRAPH = """\
version: 1
tensors:
  x: {{shape: {xs}, init: normal, requires_grad: true}}
  y: {{shape: {ys}, init: normal}}
ops:
  - {{op: {op}, inputs: [x, y], output: h, id: first}}
  - {{op: sum, inputs: [h], output: loss}}
backward:
  roots: [loss]
"""


@pytest.fixture
def scratch_ops():
    """Ops registered by a test are removed after it."""
    before = dict(OPS)
    yield
    OPS.clear()
    OPS.update(before)


# -- no op names outside gradcli/ops -----------------------------------------------------------
def _op_name_literals(tree, names):
    """String constants naming ops where code would dispatch on them: in comparisons,
    as a subscript of OPS, or in literals made only of op names."""
    found = []

    def is_name(node):
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += [n.value for n in [node.left, *node.comparators] if is_name(n)]
        elif isinstance(node, ast.Subscript) and "OPS" in ast.unparse(node.value) and is_name(node.slice):
            found.append(node.slice.value)
        elif isinstance(node, (ast.Set, ast.List, ast.Tuple)) and node.elts \
                and all(is_name(e) for e in node.elts) and len(node.elts) >= 2:
            found += [e.value for e in node.elts]
        elif isinstance(node, ast.Dict) and node.keys and all(k is not None and is_name(k) for k in node.keys):
            found += [k.value for k in node.keys]
    return found


def test_no_op_name_literals_outside_the_op_library():
    names = set(OPS)
    offenders = {}
    for path in sorted((ROOT / "gradcli").rglob("*.py")):
        if (ROOT / "gradcli" / "ops") in path.parents:
            continue
        found = _op_name_literals(ast.parse(path.read_text()), names)
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert not offenders


def test_the_scan_finds_the_patterns_it_forbids():
    code = ('if name == "checkpoint": pass\n'
            'if op.name != "to": pass\n'
            'BROADCASTING = {"add", "mul"}\n'
            'LATER = {"custom": "later"}\n'
            'f = OPS["reenter"]\n'
            'INIT_KEYS = {"dist", "mean"}\n'         # not only op names: not flagged
            'x = float("nan")\n')                    # not a comparison: not flagged
    assert sorted(_op_name_literals(ast.parse(code), set(OPS))) == sorted(
        ["checkpoint", "to", "add", "mul", "custom", "reenter"])


# -- the contract on the Op ---------------------------------------------------------------------
def test_primitive_calls_of_before_keep_working(scratch_ops):
    @primitive("scratch_double", "ScratchDoubleBackward0", saves=False)
    def double(x):
        """2 x"""
        return x * 2

    assert OPS["scratch_double"] is double
    assert double.public and not double.moves_device and not double.broadcasts
    assert not double.has_body and not double.needs_code and double.supported
    assert double.infer is None and double.infer_outputs([(2,)], ["float64"], {}) is None
    assert double.num_outputs({}) == 1 and not double.multi_output
    assert double.doc == "2 x"
    np.testing.assert_array_equal(double(np.ones(2)), [2.0, 2.0])


@pytest.mark.parametrize("name, how", [("checkpoint", "from its body of ops"),
                                       ("custom", "from user code")])
def test_declared_ops_have_no_forward_of_their_own(name, how):
    op = OPS[name]
    assert op.fn is None and op.public and op.infer is None and op.multi_output
    assert op.has_body == (name == "checkpoint") and op.needs_code == (name == "custom")
    with pytest.raises(TypeError, match=f"op {name!r} has no forward of its own: the loader "
                                        f"builds it {how}"):
        op(np.ones(2))


def test_rules_across_args():
    with pytest.raises(ValueError, match="clamp needs at least one of the args min and max"):
        OPS["clamp"].check_args({})
    OPS["clamp"].check_args({"max": 1.0})
    with pytest.raises(ValueError, match="split needs the arg sections"):
        OPS["split"].check_args({"axis": 0})
    assert OPS["split"].num_outputs({"sections": 3}) == 3
    assert OPS["split"].num_outputs({"indices": (1, 4)}) == 3
    assert OPS["add"].num_outputs({}) == 1


def test_delay_bounds_are_the_args_own_check():
    ms = OPS["delay"].args["ms"]
    assert ms.check(60_000) == 60_000
    for bad in (60_001, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="must be between 0 and 60000 milliseconds"):
            ms.check(bad)


def test_shape_mismatch_names_the_inputs_it_is_given():
    with pytest.raises(ShapeMismatch) as info:
        OPS["matmul"].infer_outputs([(2, 3), (4, 5)], ["float64", "float64"], {})
    assert str(info.value) == ("matmul shapes do not match: input 0 [2, 3] @ input 1 [4, 5] "
                               "(inner dimensions 3 and 4 differ)")
    assert info.value.message(["x", "W"]).startswith("matmul shapes do not match: x [2, 3] @ W [4, 5]")
    with pytest.raises(ShapeMismatch, match=r"broadcast together: input 0 \[2\], input 1 \[3\]"):
        OPS["add"].infer_outputs([(2,), (3,)], ["float64", "float64"], {})


@pytest.mark.parametrize("op_name, shapes, args", [
    ("reshape", [(4, 5)], {"shape": (7, 3)}),
    ("reshape", [(4, 5)], {"shape": (7, -1)}),
    ("reshape", [(4, 5)], {"shape": (-1, -1)}),
    ("concat", [(2, 3), (2, 2)], {"axis": 0}),
    ("concat", [(2, 3), (2,)], {"axis": 0}),
    ("concat", [(), ()], {"axis": 0}),
    ("concat", [(2, 3), (2, 3)], {"axis": 2}),
    ("stack", [(2,), (3,)], {"axis": 0}),
    ("sum", [(2, 3)], {"axis": 5}),
    ("squeeze", [(2, 3)], {"axis": 0}),
    ("transpose", [(2, 3)], {"axes": (0,)}),
    ("slice", [(2, 3)], {"index": A.parse_index("1, 2, 3")}),
    ("expand", [(2, 3)], {"shape": (4, 3)}),
    ("softmax", [(2, 3)], {"axis": 2}),
])
def test_infer_refuses_what_the_forward_refuses_with_its_message(op_name, shapes, args):
    op = OPS[op_name]
    arrays = [np.zeros(s) for s in shapes]
    with pytest.raises((ValueError, IndexError)) as forward:
        op.fn(*arrays, **args)
    with pytest.raises((ValueError, IndexError)) as inferred:
        op.infer_outputs(shapes, ["float64"] * len(shapes), args)
    assert str(inferred.value) == str(forward.value)


def test_huge_views_are_inferred_without_memory():
    (shape, dtype), = OPS["expand"].infer_outputs([(1, 1)], ["float64"], {"shape": (10**6, 10**6)})
    assert shape == (10**6, 10**6) and dtype == np.float64
    (shape, _), = OPS["slice"].infer_outputs([(10**6, 10**6)], ["float32"],
                                             {"index": A.parse_index("::2, 5")})
    assert shape == (5 * 10**5,)


# -- the loader asks the op ---------------------------------------------------------------------
def test_shapes_are_checked_when_loading_before_anything_runs():
    with pytest.raises(GraphError) as info:
        loads(GRAPH.format(op="add", xs=[2, 3], ys=[4]), name="g")
    assert str(info.value) == ("<g>:6: ops[0] 'first' (add): input shapes cannot be broadcast "
                               "together: x [2, 3], y [4]")
    with pytest.raises(GraphError, match=r"<g>:6: ops\[0\] 'first' \(matmul\): matmul shapes do not"):
        loads(GRAPH.format(op="matmul", xs=[2, 3], ys=[4, 5]), name="g")


def test_results_over_the_budget_are_refused_when_loading():
    text = GRAPH.format(op="matmul", xs=[100, 3], ys=[3, 100])
    loads(text, max_tensor_bytes=80_000)          # x, y and h (100 x 100 float64) fit
    with pytest.raises(GraphError, match=r"ops\[0\] 'first' \(matmul\): the result of shape "
                                         r"\[100, 100\] needs 80000 bytes, over the memory budget"):
        loads(text, max_tensor_bytes=79_999)


def test_an_op_without_infer_is_checked_when_it_runs(scratch_ops):
    @primitive("scratch_twice", saves=False)
    def twice(x):
        """x twice along a new first axis"""
        return np.stack([x, x])

    defvjp(twice, lambda g, ans, x: OPS["sum"](g, axis=0))
    text = GRAPH.format(op="scratch_twice", xs=[2, 3], ys=[3]).replace(
        "inputs: [x, y], output: h, id: first}",
        "inputs: [x], output: t, id: first}\n  - {op: add, inputs: [t, y], output: u}\n"
        "  - {op: sum, inputs: [u], output: h}")
    loads(text).run()                                   # (2, 2, 3) + (3,) broadcasts
    bad = text.replace("y: {shape: [3]", "y: {shape: [2]")
    graph = loads(bad, name="g")                        # unknown shapes: nothing to check yet
    with pytest.raises(GraphError, match=r"<g>:7: ops\[1\] \(add\): input shapes cannot be "
                                         r"broadcast together: t \[2, 2, 3\], y \[2\]"):
        graph.run()


def test_internal_ops_are_not_loadable():
    text = GRAPH.format(op="slice_backward", xs=[2, 3], ys=[3])
    with pytest.raises(GraphError, match="unknown op 'slice_backward'"):
        loads(text)


def test_keys_of_body_and_code_ops_are_refused_elsewhere():
    text = GRAPH.format(op="add", xs=[3], ys=[3])
    with pytest.raises(GraphError, match="key 'body' is only valid for op checkpoint"):
        loads(text.replace("id: first}", "id: first, body: []}"))
    with pytest.raises(GraphError, match="key 'function' is only valid for op custom"):
        loads(text.replace("id: first}", "id: first, function: 'm:F'}"))
    with pytest.raises(GraphError, match="key 'device' is only valid for op 'to'"):
        loads(text.replace("id: first}", "id: first, device: cpu}"))


# -- an op library failure is a bug, not invalid input -----------------------------------------
def _register_broken(where):
    def infer(shapes, dtypes):
        if where == "infer":
            raise RuntimeError("infer went wrong")
        return [(shapes[0], dtypes[0])]

    @primitive("scratch_broken", arity=2, infer=infer)
    def broken(x, y):
        """raises in its forward"""
        if where == "forward":
            raise AttributeError("'NoneType' object has no attribute 'shape'")
        return x


@pytest.mark.parametrize("where", ["forward", "infer"])
def test_an_op_library_bug_is_an_op_bug_error(scratch_ops, where):
    _register_broken(where)
    text = GRAPH.format(op="scratch_broken", xs=[3], ys=[3])
    with pytest.raises(OpBugError) as info:
        loads(text, name="g").run()
    msg = str(info.value)
    assert msg.startswith("<g>:6: ops[0] 'first' (scratch_broken): internal error in op "
                          "'scratch_broken' (a bug in gradcli")
    assert ("AttributeError" if where == "forward" else "RuntimeError: infer went wrong") in msg
    assert not isinstance(info.value, GraphError)


@pytest.mark.parametrize("where", ["forward", "infer"])
def test_the_cli_exits_3_naming_the_op_on_a_library_bug(scratch_ops, tmp_path, where):
    _register_broken(where)
    path = tmp_path / "g.yaml"
    path.write_text(GRAPH.format(op="scratch_broken", xs=[3], ys=[3]))
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 3, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0].startswith(f"gradcli: error: {path}:6: ops[0] 'first' (scratch_broken): "
                               "internal error in op 'scratch_broken'")


def test_user_errors_in_the_forward_stay_exit_2(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(GRAPH.format(op="cross_entropy", xs=[2, 3], ys=[2]).replace(
        "y: {shape: [2], init: normal}", "y: {value: [0, 7], dtype: int64}"))
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2
    assert "target class out of range" in result.stderr


# -- gradcheck asks the op ----------------------------------------------------------------------
def test_gradcheck_computes_casts_to_lower_precision_in_float64():
    from gradcli.gradcheck import gradcheck, promoted

    text = """\
version: 1
tensors:
  x: {shape: [3], init: normal, requires_grad: true}
ops:
  - {op: cast, inputs: [x], output: h, args: {dtype: float32}}
  - {op: tanh, inputs: [h], output: t}
  - {op: sum, inputs: [t], output: loss}
backward: {roots: [loss]}
"""
    graph = loads(text)
    assert promoted(graph).ops[0].args["dtype"] == "float64"
    assert graph.ops[0].args["dtype"] == "float32"
    assert gradcheck(graph) == []


# -- the catalog, the docs and `gradcli ops` ----------------------------------------------------
def test_describe_ops_lists_the_public_ops():
    rows = describe_ops()
    assert [r["name"] for r in rows] == sorted(n for n, op in OPS.items() if op.public)
    assert "slice_backward" not in {r["name"] for r in rows}
    by_name = {r["name"]: r for r in rows}
    assert by_name["matmul"]["inputs"] == "2" and by_name["concat"]["inputs"] == "1+"
    assert by_name["split"]["outputs"] == "several"
    assert by_name["clamp"]["args"] == [
        {"name": "min", "required": False, "default": None, "key": False},
        {"name": "max", "required": False, "default": None, "key": False}]
    assert by_name["reshape"]["args"][0]["required"]
    assert by_name["to"]["args"][0]["key"]
    assert by_name["add"]["node_name"] == "AddBackward0" and by_name["add"]["broadcasts"]
    assert by_name["relu"]["doc"] == OPS["relu"].doc and "\n" not in by_name["relu"]["doc"]
    assert all(r["doc"] for r in rows), [r["name"] for r in rows if not r["doc"]]


def test_docs_op_table_is_generated_from_the_registry():
    text = (ROOT / "docs" / "graph-format.md").read_text(encoding="utf-8")
    assert replace_section(text) == text, "docs drifted: run python scripts/gen_op_docs.py"
    table = markdown_table()
    for name, op in OPS.items():
        assert (f"| `{name}` |" in table) == op.public


def test_replace_section_needs_the_markers():
    with pytest.raises(ValueError, match="markers"):
        replace_section("# no table here\n")


def test_cli_ops_table_and_json():
    runner = CliRunner()
    result = runner.invoke(main, ["ops"])
    assert result.exit_code == 0, result.output
    listed = {line.split()[0] for line in result.output.splitlines()[1:]}
    assert listed == {n for n, op in OPS.items() if op.public}
    assert "sections = null" in result.output
    result = runner.invoke(main, ["ops", "--format", "json"])
    assert result.exit_code == 0
    assert json.loads(result.output) == describe_ops()
    result = runner.invoke(main, ["ops", "--format", "xml"])
    assert result.exit_code == 2


def test_arg_defaults_are_given_to_rules_and_outputs():
    assert OPS["split"].defaults() == {"sections": None, "indices": None, "axis": 0}
    assert Arg(check=A.shape).required


def test_public_op_functions_are_named_as_in_files_and_listed_in_all():
    """gradcli.ops.sum, .pow, .abs, ... (no trailing underscore, which
    reads as in-place in PyTorch's convention), every one listed in __all__."""
    import gradcli.ops as O

    for name, op in OPS.items():
        if op.public and op.fn is not None and name.isidentifier():
            assert getattr(O, name) is op and name in O.__all__, name
    # a trailing underscore means in place, as in PyTorch: only the in-place variants
    from gradcli.ops.inplace import INPLACE_FUNCTIONS

    assert sorted(n for n in O.__all__ if n.endswith("_")) == sorted(INPLACE_FUNCTIONS)
    assert all(getattr(O, n) is INPLACE_FUNCTIONS[n] for n in INPLACE_FUNCTIONS)
    assert not any(hasattr(O, n) for n in ("sum_", "max_", "min_", "slice_"))
    assert O.sum(np.array([1.0, 2.0])) == 3.0 and O.max(np.array([1.0, 5.0])) == 5.0
