"""`gradcli validate` and `gradcli.gradcheck` (click's CliRunner on gradcli.cli.main)."""
from __future__ import annotations

import json
import pathlib
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from click.testing import CliRunner

from gradcli import loader
from gradcli.cli import main
from gradcli.gradcheck import check_jacobians, gradcheck

ROOT = pathlib.Path(__file__).resolve().parent.parent
GRAPHS = pathlib.Path(__file__).resolve().parent / "graphs"
MLP = ROOT / "graphs" / "mlp.yaml"

def cli(*args):
    return CliRunner().invoke(main, ["validate", *[str(a) for a in args]], catch_exceptions=False)


def validate_json(*args, code=None):
    result = cli(*args, "--format", "json")
    if code is not None:
        assert result.exit_code == code, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def checks_of(doc, i=0):
    return {c["name"]: c for c in doc["files"][i]["checks"]}


def line_of(path, text):
    for n, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if text in line:
            return n
    raise AssertionError(f"{text!r} not in {path}")


@pytest.fixture
def bad_square():
    """A test-only op whose backward is off by a factor 2 (g * x instead of 2 g x)."""
    from gradcli.ops.core import OPS, defvjp, primitive
    from gradcli.ops.library import mul

    @primitive("bad_square", "BadSquareBackward0")
    def op(x):
        """x ** 2 with a planted wrong gradient"""
        return np.square(x)

    defvjp(op, lambda g, ans, x: mul(g, x))
    try:
        yield op
    finally:
        OPS.pop("bad_square", None)


# -- passing graphs ----------------------------------------------------------------------------
def test_mlp_passes_every_check():
    result = cli(MLP, "--numeric", "--check-order", "--repeat", "3")
    assert result.exit_code == 0, result.stdout
    assert "PASS" in result.stdout
    doc = validate_json(MLP, "--numeric", "--check-order", "--repeat", "3", code=0)
    checks = checks_of(doc)
    assert {"backward", "order", "check-order", "repeat", "numeric[loss/W1]", "numeric[loss/b1]",
            "numeric[loss/W2]", "numeric[loss/b2]"} <= set(checks)
    assert all(c["status"] == "pass" for c in checks.values())
    assert checks["numeric[loss/W1]"]["max_abs_err"] < 1e-6


def test_mlp_fast_numeric_passes():
    doc = validate_json(MLP, "--fast", code=0)
    numeric = [c for c in doc["files"][0]["checks"] if c["kind"] == "numeric"]
    assert len(numeric) == 4 and all(c["status"] == "pass" for c in numeric)
    assert all("v^T J u" in c["message"] for c in numeric)


def test_expected_grads_and_order_pass():
    doc = validate_json(GRAPHS / "good_grads.yaml", code=0)
    checks = checks_of(doc)
    assert checks["grads[x]"]["status"] == "pass" and checks["grads[x]"]["max_abs_err"] == 0.0
    assert checks["order"]["status"] == "pass"
    # expect.numeric: true turns the numeric check on without --numeric.
    assert checks["numeric[loss/w]"]["status"] == "pass"


# -- failing checks ----------------------------------------------------------------------------
def test_wrong_expected_grads_fail_with_errors_and_worst_index():
    result = cli(GRAPHS / "wrong_grads.yaml")
    assert result.exit_code == 1
    out = result.stdout
    assert "grads[x]" in out and "fail" in out and "FAIL" in out
    assert "x[1, 1]" in out and "0.5" in out and "0.0588" in out
    doc = validate_json(GRAPHS / "wrong_grads.yaml", code=1)
    check = checks_of(doc)["grads[x]"]
    assert check["status"] == "fail"
    assert check["max_abs_err"] == pytest.approx(0.5)
    assert check["max_rel_err"] == pytest.approx(0.5 / 8.5)
    assert check["worst_index"] == [1, 1]
    assert "got 8, expected 8.5" in check["message"]


def test_wrong_expected_order_fails(tmp_path):
    text = (GRAPHS / "good_grads.yaml").read_text().replace(
        "order: [SumBackward0, MulBackward0, AccumulateGrad, AccumulateGrad]",
        "order: [SumBackward0, AccumulateGrad, MulBackward0, AccumulateGrad]")
    path = tmp_path / "bad_order.yaml"
    path.write_text(text)
    doc = validate_json(path, code=1)
    check = checks_of(doc)["order"]
    assert check["status"] == "fail" and "position 1" in check["message"]


def test_planted_wrong_backward_is_caught(bad_square):
    path = GRAPHS / "bad_square.yaml"
    result = cli(path, "--numeric")
    assert result.exit_code == 1, result.stdout
    assert "Jacobian mismatch for output 0 with respect to input 0" in result.stdout
    assert "numerical:" in result.stdout and "analytical:" in result.stdout
    doc = validate_json(path, "--numeric", code=1)
    check = checks_of(doc)["numeric[loss/x]"]
    assert check["status"] == "fail"
    assert check["max_abs_err"] == pytest.approx(2.0, rel=1e-4)    # |x| at x = 2.0
    assert check["worst_index"] == {"output": [], "input": [0, 2]}
    # The library function gives the numerical and analytical Jacobians.
    [m] = gradcheck(loader.load(path))
    assert m.status == "mismatch" and m.output == 0 and m.input == 0
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    np.testing.assert_allclose(m.numerical.ravel(), 2 * x.ravel(), rtol=1e-6)
    np.testing.assert_allclose(m.analytical.ravel(), x.ravel())


def test_planted_wrong_backward_is_caught_in_fast_mode(bad_square):
    result = cli(GRAPHS / "bad_square.yaml", "--fast")
    assert result.exit_code == 1, result.stdout
    assert "Jacobian mismatch for output 0 with respect to input 0" in result.stdout
    [m] = gradcheck(loader.load(GRAPHS / "bad_square.yaml"), fast=True)
    assert m.fast and m.status == "mismatch"
    assert m.numerical == pytest.approx(2 * m.analytical, rel=1e-5)


# -- expect.error ------------------------------------------------------------------------------
def test_expect_error_passes_when_backward_fails_with_it():
    doc = validate_json(GRAPHS / "expect_error.yaml", code=0)
    check = checks_of(doc)["error"]
    assert check["status"] == "pass"
    assert "kaboom in the backward" in check["message"]
    assert "(node created by op ops[0] 'boom'" in check["message"]


def test_expect_error_fails_on_other_message_or_success(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text((GRAPHS / "expect_error.yaml").read_text().replace(
        'error: "kaboom"', 'error: "something else"'))
    doc = validate_json(other, code=1)
    assert "not with 'something else'" in checks_of(doc)["error"]["message"]
    ok = tmp_path / "ok.yaml"
    ok.write_text((GRAPHS / "good_grads.yaml").read_text().replace(
        "  numeric: true", '  error: "kaboom"'))
    doc = validate_json(ok, code=1)
    assert "the backward succeeded" in checks_of(doc)["error"]["message"]


def test_expect_error_about_nan_implies_anomaly_mode(tmp_path):
    path = tmp_path / "nan_expected.yaml"
    path.write_text((GRAPHS / "nan_op.yaml").read_text()
                    + 'expect:\n  error: "returned nan values"\n')
    doc = validate_json(path, code=0)
    assert "NanBackward0" in checks_of(doc)["error"]["message"]


# -- anomaly mode ------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name, node, label, marker", [
    ("nan_log.yaml", "LogBackward0", "ops[1] 'mylog'", "id: mylog"),
    ("nan_op.yaml", "NanBackward0", "ops[1] 'poison'", "id: poison"),
])
def test_detect_anomaly_names_file_line_and_op(name, node, label, marker):
    path = GRAPHS / name
    line = line_of(path, marker)
    where = f"{path}:{line}"
    expected = (f"{where}: Function '{node}' returned nan values in its 0th output. "
                f"(node created by op {label} at {where})")
    doc = validate_json(path, "--detect-anomaly", code=1)
    check = checks_of(doc)["backward"]
    assert check["status"] == "fail"
    assert check["message"] == expected
    result = cli(path, "--detect-anomaly")
    assert result.exit_code == 1
    assert f"backward: {expected}\n" in result.stdout


def test_without_detect_anomaly_nan_passes_the_run():
    doc = validate_json(GRAPHS / "nan_op.yaml", code=0)
    assert checks_of(doc)["backward"]["status"] == "pass"


# -- non-differentiable points and precision ---------------------------------------------------
@pytest.mark.parametrize("fast", [False, True])
def test_relu_at_zero_is_non_differentiable_not_a_failure(fast):
    args = [GRAPHS / "relu_zero.yaml"] + (["--fast"] if fast else [])
    doc = validate_json(*args, code=0)
    check = checks_of(doc)["numeric[loss/x]"]
    assert check["status"] == "nondiff"
    assert "non-differentiable point" in check["message"]
    assert doc["files"][0]["summary"]["nondiff"] == 1
    assert doc["files"][0]["summary"]["fail"] == 0
    if not fast:
        assert check["worst_index"] == {"output": [], "input": [1]}
        assert "central difference 0.5, analytical 0" in check["message"]


def test_max_ties_are_reported_as_non_differentiable():
    doc = validate_json(GRAPHS / "max_tie.yaml", code=0)
    check = checks_of(doc)["numeric[m/x]"]
    assert check["status"] == "nondiff" and "2 element(s)" in check["message"]


@pytest.mark.parametrize("fast", [False, True])
def test_float32_graph_is_promoted_for_the_numeric_check(fast):
    graph = loader.load(GRAPHS / "float32.yaml")
    assert graph.leaves["W"].dtype == np.float32
    pairs = check_jacobians(graph, fast=fast)
    assert [(m.output_name, m.input_name) for m in pairs] == [("s", "W"), ("s", "b")]
    assert all(m.status == "ok" for m in pairs), [m.message for m in pairs]
    if not fast:
        # The full Jacobian of softmax(tanh(x W + b)): 8 outputs by 12 (W) inputs, in float64.
        assert pairs[0].analytical.shape == (8, 12)
        assert pairs[0].max_abs_err < 1e-7
    doc = validate_json(GRAPHS / "float32.yaml", *(["--fast"] if fast else []), code=0)
    assert doc["status"] == "pass"


def test_numeric_check_of_grad_wrt_intermediate(tmp_path):
    path = tmp_path / "intermediate.yaml"
    path.write_text("""version: 1
tensors:
  x: {value: [0.3, -0.7, 1.1], requires_grad: true}
ops:
  - {op: exp, inputs: [x], output: e}
  - {op: mul, inputs: [e, e], output: y}
  - {op: sum, inputs: [y], output: loss}
backward:
  roots: [loss]
  inputs: [e, x]
""")
    pairs = check_jacobians(loader.load(path))
    assert [m.input_name for m in pairs] == ["e", "x"]
    assert all(m.status == "ok" for m in pairs)
    doc = validate_json(path, "--numeric", "--repeat", "3", "--check-order", code=0)
    assert "summed over grad() calls" in checks_of(doc)["repeat"]["message"]


# -- output formats and exit codes -------------------------------------------------------------
def test_json_structure():
    doc = validate_json(GRAPHS / "wrong_grads.yaml", MLP, "--numeric", code=1)
    assert set(doc) == {"status", "exit_code", "files"}
    assert doc["status"] == "fail" and doc["exit_code"] == 1
    assert [f["file"] for f in doc["files"]] == [str(GRAPHS / "wrong_grads.yaml"), str(MLP)]
    assert [f["status"] for f in doc["files"]] == ["fail", "pass"]
    for f in doc["files"]:
        assert set(f) == {"file", "graph", "status", "error", "checks", "summary"}
        assert f["summary"]["checks"] == len(f["checks"])
        for c in f["checks"]:
            assert set(c) == {"name", "kind", "status", "tensor", "max_abs_err", "max_rel_err",
                              "worst_index", "message", "time_s", "distance", "torch_distance",
                              "precision", "kinks"}
            assert c["status"] in ("pass", "fail", "nondiff", "skipped")


def test_invalid_input_exits_2():
    result = cli(GRAPHS / "invalid.yaml")
    assert result.exit_code == 2
    assert result.stderr.startswith("gradcli: error:") and "version 2" in result.stderr
    doc = validate_json(GRAPHS / "invalid.yaml", GRAPHS / "wrong_grads.yaml", code=2)
    assert doc["files"][0]["status"] == "invalid" and "version" in doc["files"][0]["error"]
    assert doc["files"][1]["status"] == "fail"


def test_unknown_op_is_invalid_input():
    # Without the bad_square fixture the op does not exist: the file is invalid.
    result = cli(GRAPHS / "bad_square.yaml", "--numeric")
    assert result.exit_code == 2 and "unknown op 'bad_square'" in result.stderr


def test_junit_xml(tmp_path):
    junit = tmp_path / "report.xml"
    result = cli(MLP, GRAPHS / "wrong_grads.yaml", GRAPHS / "invalid.yaml", GRAPHS / "relu_zero.yaml",
                 "--numeric", "--junit", junit)
    assert result.exit_code == 2
    doc = validate_json(MLP, GRAPHS / "wrong_grads.yaml", GRAPHS / "invalid.yaml",
                        GRAPHS / "relu_zero.yaml", "--numeric")
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 4
    for suite, f in zip(suites, doc["files"]):
        cases = suite.findall("testcase")
        if f["status"] == "invalid":
            assert len(cases) == 1 and cases[0].find("error") is not None
            assert suite.get("errors") == "1"
            continue
        assert [c.get("name") for c in cases] == [c["name"] for c in f["checks"]]
        failed = [c.get("name") for c in cases if c.find("failure") is not None]
        assert failed == [c["name"] for c in f["checks"] if c["status"] == "fail"]
        assert suite.get("tests") == str(len(cases))
        assert suite.get("failures") == str(len(failed))
    wrong = suites[1]
    failure = [c for c in wrong.findall("testcase") if c.get("name") == "grads[x]"][0].find("failure")
    assert "max abs error 0.5" in failure.get("message")
    assert root.get("failures") == "1" and root.get("errors") == "1"


def test_repeat_and_check_order_failures_are_reported():
    from gradcli.validate import Options, validate_graph

    graph = loader.load(GRAPHS / "good_grads.yaml")
    backward, predicted = graph.backward, graph.predicted_order

    def no_accumulation(*args, **kwargs):       # a broken engine: .grad is overwritten
        for t in graph.values.values():
            t.grad = None
        return backward(*args, **kwargs)

    graph.backward = no_accumulation
    graph.predicted_order = lambda: list(reversed(predicted()))
    report = validate_graph(graph, "good_grads.yaml", Options(repeat=3, check_order=True))
    checks = {c.name: c for c in report.checks}
    from gradcli.cli.cmd_validate import exit_code_of

    assert report.status == "fail" and exit_code_of(report) == 1
    assert checks["repeat"].status == "fail"
    assert "not 3 times that of one" in checks["repeat"].message
    assert checks["repeat"].max_rel_err == pytest.approx(2 / 3)
    assert checks["check-order"].status == "fail"
    assert "differs from the predicted order at position 0" in checks["check-order"].message


def test_order_failure_lists_at_most_ten_nodes(tmp_path):
    """One message never lists a whole graph: the first ten, then how many more."""
    n = 30
    ops = "".join(f"  - {{op: exp, inputs: [v{i}], output: v{i + 1}}}\n" for i in range(n))
    path = tmp_path / "chain.yaml"
    path.write_text(f"version: 1\ntensors:\n  v0: {{value: 0.0, requires_grad: true}}\nops:\n{ops}"
                    f"  - {{op: sum, inputs: [v{n}], output: loss}}\nbackward: {{roots: [loss]}}\n"
                    "expect:\n  order: [AccumulateGrad]\n")
    doc = validate_json(path, code=1)
    message = checks_of(doc)["order"]["message"]
    assert "at position 0: got SumBackward0, expected AccumulateGrad" in message
    assert message.endswith("ExpBackward0, ... and 22 more]")
    assert message.count("ExpBackward0") == 9


# Note [The float64 floor]: b's exact gradient is 0 (b - b); gradcli computes 0, the
# expectation holds 1e-9 of rounding, as PyTorch's sums leave in a model whose gradients
# are large. w's gradient is x: its size is the graph's scale.
FLOOR64 = """
version: 1
name: floor64
tensors:
  x: {{value: [{x0}, {x1}, {x2}]}}
  w: {{value: [1.0, -2.0, 3.0], requires_grad: true}}
  b: {{value: [0.5, 0.5], requires_grad: true}}
ops:
  - {{op: mul, inputs: [w, x], output: m}}
  - {{op: sum, inputs: [m], output: s1}}
  - {{op: sub, inputs: [b, b], output: d}}
  - {{op: sum, inputs: [d], output: s2}}
  - {{op: add, inputs: [s1, s2], output: loss}}
backward:
  roots: [loss]
expect:
  rtol: 1.0e-7
  atol: 1.0e-10
  grads:
    w: {{value: [{w0}, {w1}, {w2}]}}
    b: {{value: [1.0e-9, -1.0e-9]}}
"""


def _floor64(tmp_path, x, w=None):
    path = tmp_path / "floor64.yaml"
    w = w or x
    path.write_text(FLOOR64.format(x0=x[0], x1=x[1], x2=x[2], w0=w[0], w1=w[1], w2=w[2]))
    return path


def test_a_float64_gradient_of_rounding_noise_passes_against_the_graphs_scale(tmp_path):
    doc = validate_json(_floor64(tmp_path, [1.0e7, 2.0e7, 3.0e7]), code=0)
    check = checks_of(doc)["grads[b]"]
    assert check["status"] == "pass"
    assert "within float64 rounding of the graph's gradients" in check["message"]
    assert "rtol=1e-07, atol=1e-10" in check["message"]        # the element-wise failure, said
    assert checks_of(doc)["grads[w]"]["status"] == "pass"


def test_the_float64_floor_accepts_no_more_than_the_rounding_of_the_graphs_scale(tmp_path):
    # gradients about 1: 1e-9 is a million times float64's rounding of them, an error
    doc = validate_json(_floor64(tmp_path, [1.0, 2.0, 3.0]), code=1)
    assert checks_of(doc)["grads[b]"]["status"] == "fail"
    # the largest gradient off by 1e-7 relative: far above its rounding, an error
    doc = validate_json(_floor64(tmp_path, [1.0e7, 2.0e7, 3.0e7],
                                 w=[1.000001e7, 2.0e7, 3.0e7]), code=1)
    assert checks_of(doc)["grads[w]"]["status"] == "fail"


def test_elementwise_on_request_has_no_float64_floor(tmp_path):
    doc = validate_json(_floor64(tmp_path, [1.0e7, 2.0e7, 3.0e7]), "--elementwise", code=1)
    assert checks_of(doc)["grads[b]"]["status"] == "fail"


# Note [The float64 yardstick]: w's gradient is c = [1, 1e-3]; the expectation holds the
# small element off by 1e-9 (1e-6 of itself: an element-wise failure, and far over the
# floor of a graph whose gradients are about 1), 1e-9 norm-wise. PyTorch's own float64
# spread, as an export measures it, decides.
YARDSTICK = """
version: 1
name: yardstick
tensors:
  w: {{value: [2.0, 3.0], requires_grad: true}}
  c: {{value: [1.0, 1.0e-3]}}
ops:
  - {{op: mul, inputs: [w, c], output: m}}
  - {{op: sum, inputs: [m], output: loss}}
backward:
  roots: [loss]
expect:
  rtol: 1.0e-7
  atol: 1.0e-10
  grads:
    w: {{value: [1.0, {w1}]}}
{rounding}"""


def _yardstick(tmp_path, spread=None, w1=1.000001e-3):
    path = tmp_path / "yardstick.yaml"
    rounding = "" if spread is None else f"  rounding: {{distance: {{w: {spread}}}}}\n"
    path.write_text(YARDSTICK.format(w1=w1, rounding=rounding))
    return path


@pytest.mark.parametrize("spread, code", [(None, 1), (1.0e-10, 1), (1.0e-9, 0)])
def test_a_float64_gradient_within_pytorchs_own_spread_passes(tmp_path, spread, code):
    doc = validate_json(_yardstick(tmp_path, spread), code=code)
    check = checks_of(doc)["grads[w]"]
    if code == 0:
        assert check["status"] == "pass"
        assert "within PyTorch's own float64 rounding" in check["message"]
        assert "1e-09" in check["message"] and "4e-09" in check["message"]   # spread, bound
    else:
        assert check["status"] == "fail"
        if spread is not None:
            assert "over 4e-10" in check["message"]


def test_a_files_float64_spread_counts_for_at_most_the_cap(tmp_path):
    # an error of 1e-7 norm-wise is no rounding, whatever spread the file claims
    doc = validate_json(_yardstick(tmp_path, 1.0, w1=0.1001), code=1)
    assert "over 4e-08" in checks_of(doc)["grads[w]"]["message"]
    doc = validate_json(_yardstick(tmp_path, 1.0, w1=0.1001), "--elementwise", code=1)
    assert checks_of(doc)["grads[w]"]["status"] == "fail"


@pytest.mark.parametrize("rounding, message", [
    ("{distance: {v: 1.0e-9}}", "which expect.grads does not name"),
    ("{distance: {w: -1.0}}", "must be a non-negative number"),
    ("{spread: 1}", "rounding must be a mapping with a distance mapping")])
def test_bad_expect_rounding_is_one_line(tmp_path, rounding, message):
    path = tmp_path / "bad.yaml"
    path.write_text(YARDSTICK.format(w1=1.0e-3, rounding=f"  rounding: {rounding}\n"))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
