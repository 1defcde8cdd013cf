"""Higher-order gradients in graph files: `backward.create_graph`, the `grad` op,
and validate's second-derivative check (PyTorch's gradgradcheck).

The engine and API side (create_graph, differentiable VJPs, saved tensors) is
tested in tests/test_higher_order.py; here: what graph files and the CLI add.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import gradcli
from gradcli.autograd import Tensor
from gradcli.cli import main
from gradcli.errors import BackwardError, GraphError
from gradcli.loader import loads

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = ROOT / "graphs"
HIGHER = ["gradient_penalty.yaml", "hessian_vector.yaml", "second_derivative.yaml"]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_line(result, code, *fragments):
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradcli: error:"), result.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def graph_text(ops, tensors="x: {value: [0.5, -1.0, 2.0], requires_grad: true}",
               backward="roots: [loss]"):
    return (f"version: 1\ntensors:\n  {tensors}\nops:\n" + "".join(f"  - {o}\n" for o in ops)
            + f"backward:\n  {backward}\n")


def write(tmp_path, text, name="g.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


TANH = ["{op: matmul, inputs: [x, W], output: h}", "{op: tanh, inputs: [h], output: t}",
        "{op: sum, inputs: [t], output: loss}"]
TANH_TENSORS = ("x: {shape: [4, 3], init: normal}\n"
                "  W: {shape: [3, 2], init: normal, requires_grad: true}")


# -- backward.create_graph in files ------------------------------------------------------------
def test_create_graph_in_file_reports_arrays_and_keeps_grad_differentiable():
    plain = loads(graph_text(TANH, TANH_TENSORS)).run()
    graph = loads(graph_text(TANH, TANH_TENSORS, "roots: [loss]\n  create_graph: true"))
    assert graph.backward_spec.create_graph and graph.backward_spec.retain_graph
    result = graph.run()
    assert type(result.grads["W"]) is np.ndarray
    np.testing.assert_allclose(result.grads["W"], plain.grads["W"], rtol=1e-14)
    w_grad = graph.values["W"].grad
    assert type(w_grad) is Tensor and w_grad.grad_fn is not None     # differentiable .grad
    doc = result.to_json()
    np.testing.assert_allclose(doc["grads"]["W"]["data"], plain.grads["W"], rtol=1e-14)


def test_create_graph_file_runs_from_the_cli(tmp_path):
    path = write(tmp_path, graph_text(TANH, TANH_TENSORS, "roots: [loss]\n  create_graph: true"))
    result = cli("run", path, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["grads"]["W"]["shape"] == [3, 2]


def test_retain_graph_defaults_to_create_graph_in_files():
    """As PyTorch: retain_graph=None means retain_graph=create_graph."""
    graph = loads(graph_text(TANH, TANH_TENSORS, "roots: [loss]\n  create_graph: true"))
    first, _, _ = graph.backward()
    second, _, _ = graph.backward()        # the graph was kept
    np.testing.assert_allclose(second["W"], 2 * first["W"])
    graph = loads(graph_text(TANH, TANH_TENSORS,
                             "roots: [loss]\n  create_graph: true\n  retain_graph: false"))
    assert not graph.backward_spec.retain_graph
    graph.backward()
    with pytest.raises(BackwardError, match="backward through the graph a second time"):
        graph.backward()


# -- the grad op: examples ------------------------------------------------------------------------
@pytest.mark.parametrize("name", HIGHER)
def test_higher_order_examples_validate_with_gradgrad(name):
    result = cli("validate", GRAPHS / name, "--numeric", "--format", "json")
    assert result.exit_code == 0, result.stdout
    checks = json.loads(result.stdout)["files"][0]["checks"]
    kinds = {c["kind"] for c in checks}
    assert {"backward", "numeric", "gradgrad"} <= kinds
    assert all(c["status"] == "pass" for c in checks), [c for c in checks if c["status"] != "pass"]
    fast = cli("validate", GRAPHS / name, "--fast", "--format", "json")
    assert fast.exit_code == 0, fast.stdout
    assert any(c["kind"] == "gradgrad" for c in json.loads(fast.stdout)["files"][0]["checks"])


def test_gradient_penalty_matches_pytorch():
    torch = pytest.importorskip("torch")
    graph = gradcli.load(GRAPHS / "gradient_penalty.yaml")
    result = graph.run()
    leaves = {n: torch.tensor(leaf.make(leaf.shape), requires_grad=leaf.requires_grad)
              for n, leaf in graph.leaves.items()}
    x, W1, b1, W2, b2 = (leaves[n] for n in ("x", "W1", "b1", "W2", "b2"))
    score = torch.relu(x @ W1 + b1) @ W2 + b2
    (gx,) = torch.autograd.grad(score.sum(), x, create_graph=True)
    gp = ((gx.pow(2).sum(1).sqrt() - 1) ** 2).mean()
    loss = score.mean() + 10.0 * gp
    want = torch.autograd.grad(loss, [W1, b1, W2, b2])
    for name, w in zip(("W1", "b1", "W2", "b2"), want):
        np.testing.assert_allclose(result.grads[name], w.numpy(), rtol=1e-10, atol=1e-12)


def test_hessian_vector_product_closed_form_from_the_cli():
    """test_autograd.py test_hessian_vector, as a graph file."""
    result = cli("run", GRAPHS / "hessian_vector.yaml", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["grads"]["x"]["data"] == [8.5, 8.5, -19.0]


def test_third_derivative_with_two_grad_ops():
    ops = ["{op: pow, inputs: [x, four], output: x4}", "{op: sum, inputs: [x4], output: f}",
           "{op: grad, inputs: [f, x], outputs: [d1]}", "{op: sum, inputs: [d1], output: s1}",
           "{op: grad, inputs: [s1, x], outputs: [d2]}", "{op: sum, inputs: [d2], output: loss}"]
    graph = loads(graph_text(ops, "x: {value: [0.5, -1.0, 2.0], requires_grad: true}\n"
                                  "  four: {value: 4.0}"))
    result = graph.run()
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(graph.values["d1"].data, 4 * x ** 3)
    np.testing.assert_allclose(graph.values["d2"].data, 12 * x ** 2)
    np.testing.assert_allclose(result.grads["x"], 24 * x)


# -- the grad op: args ----------------------------------------------------------------------------
SIN = ["{op: sin, inputs: [x], output: s}"]


def test_grad_outputs_names_a_tensor_for_non_scalar_roots():
    ops = SIN + ["{op: grad, inputs: [s, x], outputs: [vjp], args: {grad_outputs: v}, id: g}",
                 "{op: sum, inputs: [vjp], output: loss}"]
    graph = loads(graph_text(ops, "x: {value: [0.5, -1.0, 2.0], requires_grad: true}\n"
                                  "  v: {value: [1.0, 2.0, 3.0], requires_grad: true}"))
    assert graph.ops[1].inputs == ["s", "x", "v"]          # grad_outputs: one more input
    result = graph.run()
    x, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(graph.values["vjp"].data, v * np.cos(x))
    np.testing.assert_allclose(result.grads["x"], -v * np.sin(x))
    np.testing.assert_allclose(result.grads["v"], np.cos(x))   # differentiable w.r.t. v too


@pytest.mark.parametrize("op, message", [
    ("{op: grad, inputs: [s, x], outputs: [g]}",
     "grad can be implicitly created only for scalar outputs (give grad_outputs, a tensor name)"),
    ("{op: grad, inputs: [s, x], outputs: [g], args: {grad_outputs: nope}}",
     "arg 'grad_outputs' names 'nope', which is not defined above this op"),
    ("{op: grad, inputs: [s, x], outputs: [g], args: {grad_outputs: w}}",
     "grad_outputs w has shape [2] but s has shape [3] (they must match)"),
    ("{op: grad, inputs: [s, x], outputs: [g, h], args: {grad_outputs: v}}",
     "produces 1 outputs but 2 names are given"),
    ("{op: grad, inputs: [s, x], outputs: [g], args: {grad_outputs: 3}}",
     "bad arg 'grad_outputs': grad_outputs must be the name of a tensor"),
    ("{op: grad, inputs: [s, x], outputs: [g], args: {create_graph: 1}}",
     "bad arg 'create_graph'"),
    ("{op: grad, inputs: [s], outputs: [g]}", "takes at least 2 inputs, got 1"),
])
def test_grad_op_bad_args_are_refused_at_load(tmp_path, op, message):
    text = graph_text(SIN + [op, "{op: sum, inputs: [g], output: loss}"],
                      "x: {value: [0.5, -1.0, 2.0], requires_grad: true}\n"
                      "  v: {value: [1.0, 2.0, 3.0]}\n  w: {value: [1.0, 2.0]}")
    one_line(cli("run", write(tmp_path, text)), 2, "g.yaml:8:", "ops[1] (grad)", message)


def test_grad_op_inputs_that_do_not_require_grad_or_are_unused(tmp_path):
    tensors = ("x: {value: [0.5, -1.0, 2.0], requires_grad: true}\n"
               "  z: {value: [1.0, 1.0, 1.0], requires_grad: true}\n  c: {value: [1.0, 1.0, 1.0]}\n"
               "  k: {value: 2.0}")
    base = SIN + ["{op: sum, inputs: [s], output: f}"]
    cases = [("{op: grad, inputs: [f, c], outputs: [g]}",
              "inputs[1]: one of the differentiated Tensors does not require grad"),
             ("{op: grad, inputs: [f, z], outputs: [g]}",
              "appears to not have been used in the graph (set allow_unused: true"),
             ("{op: grad, inputs: [k, x], outputs: [g]}", "inputs[0] does not require grad")]
    for op, message in cases:
        text = graph_text(base + [op, "{op: sum, inputs: [g], output: loss}"], tensors)
        one_line(cli("run", write(tmp_path, text)), 2, "g.yaml:10:", "ops[2] (grad)", message)
    text = graph_text(base + ["{op: grad, inputs: [f, x, z], outputs: [gx, gz], args: {allow_unused: true}}",
                              "{op: add, inputs: [gx, gz], output: h}",
                              "{op: sum, inputs: [h], output: loss}"], tensors)
    graph = loads(text)
    graph.run()
    np.testing.assert_array_equal(graph.values["gz"].data, np.zeros(3))   # materialized
    assert not graph.values["gz"].requires_grad


def test_create_graph_false_gives_constants_and_frees_the_graph(tmp_path):
    ops = SIN + ["{op: sum, inputs: [s], output: f}",
                 "{op: grad, inputs: [f, x], outputs: [g], args: {create_graph: false}}",
                 "{op: mul, inputs: [g, s], output: gs}", "{op: sum, inputs: [gs], output: loss}"]
    text = graph_text(ops)
    # retain_graph defaults to create_graph (false): the backward through s fails as in PyTorch
    one_line(cli("run", write(tmp_path, text)), 3, "backward through the graph a second time")
    graph = loads(text.replace("create_graph: false", "create_graph: false, retain_graph: true"))
    result = graph.run()
    x = np.array([0.5, -1.0, 2.0])
    assert not graph.values["g"].requires_grad
    np.testing.assert_allclose(result.grads["x"], np.cos(x) * np.cos(x))   # g is a constant


def test_backward_failing_inside_a_grad_op_exits_3(tmp_path):
    ops = ["{op: fail, inputs: [x], output: y, args: {message: boom}, id: boom}",
           "{op: sum, inputs: [y], output: f}",
           "{op: grad, inputs: [f, x], outputs: [g], id: penalty}",
           "{op: sum, inputs: [g], output: loss}"]
    one_line(cli("run", write(tmp_path, graph_text(ops))), 3, "g.yaml:7:", "ops[2] 'penalty' (grad)",
             "the backward run by grad failed in FailBackward0", "boom", "node created by op boom")


def test_nodes_recorded_by_a_grad_op_carry_its_id():
    result = gradcli.load(GRAPHS / "gradient_penalty.yaml").run()
    ops = [r.op for r in result.order]
    assert "dD_dx" in ops                                    # nodes of the backward of the backward
    assert "fc2_bias" in ops and "fc1" in ops                 # the forward's nodes keep theirs
    assert None not in ops and "" not in ops


@pytest.mark.timeout(60)
def test_grad_op_on_simulated_devices():
    text = graph_text(["{op: sin, inputs: [x], output: s}", "{op: sum, inputs: [s], output: f}",
                       "{op: grad, inputs: [f, x], outputs: [g]}",
                       "{op: to, inputs: [g], output: gc, device: cpu}",
                       "{op: sum, inputs: [gc], output: loss}"],
                      "x: {value: [0.5, -1.0, 2.0], requires_grad: true, device: 'sim:0'}")
    result = loads(text).run()
    np.testing.assert_allclose(np.asarray(result.grads["x"]), -np.sin([0.5, -1.0, 2.0]))
    assert any(r.device == "sim:0" for r in result.order)


# -- gradgradcheck: a planted wrong second derivative -------------------------------------------
DETACHED = """
    from gradcli.autograd import Tensor

    class Cube:
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            {body}
"""
RIGHT = "return g * 3 * x * x"
# right values, wrong graph: the saved x is detached, so d(backward)/dx is lost
PLANTED = "xd = x.data if isinstance(x, Tensor) else x\n        return g * 3 * xd * xd"


def _cube_graph(tmp_path, body, module, backward="roots: [loss]\n  create_graph: true"):
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(DETACHED).replace("{body}", body))
    ops = [f'{{op: custom, function: "{module}:Cube", inputs: [x], outputs: [y]}}',
           "{op: sum, inputs: [y], output: loss}"]
    return write(tmp_path, graph_text(ops, backward=backward))


@pytest.mark.parametrize("mode", ["--numeric", "--fast"])
def test_validate_catches_a_planted_wrong_second_derivative(tmp_path, mode):
    path = _cube_graph(tmp_path, PLANTED, f"planted_{mode[2:]}")
    result = cli("validate", path, "--allow-code", mode, "--format", "json")
    assert result.exit_code == 1, result.stdout
    checks = {c["name"]: c for c in json.loads(result.stdout)["files"][0]["checks"]}
    assert checks["numeric[loss/x]"]["status"] == "pass"          # first order is right
    assert checks["gradgrad[grad(x)/x]"]["status"] == "fail"       # second order is not
    assert "mismatch" in checks["gradgrad[grad(x)/x]"]["message"]
    assert checks["gradgrad[grad(x)/grad_outputs(loss)]"]["status"] == "pass"


def test_validate_passes_the_right_second_derivative(tmp_path):
    path = _cube_graph(tmp_path, RIGHT, "right_cube")
    result = cli("validate", path, "--allow-code", "--numeric", "--format", "json")
    assert result.exit_code == 0, result.stdout
    names = {c["name"] for c in json.loads(result.stdout)["files"][0]["checks"]}
    assert {"gradgrad[grad(x)/x]", "gradgrad[grad(x)/grad_outputs(loss)]"} <= names


def test_no_gradgrad_check_without_grad_ops_or_create_graph(tmp_path):
    path = _cube_graph(tmp_path, PLANTED, "plain_cube", backward="roots: [loss]")
    result = cli("validate", path, "--allow-code", "--numeric", "--format", "json")
    assert result.exit_code == 0, result.stdout
    assert not any(c["kind"] == "gradgrad" for c in json.loads(result.stdout)["files"][0]["checks"])


def test_check_gradgrad_on_a_scratch_op_with_a_wrong_double_backward():
    """The API: check_gradgrad finds an op whose VJP is right on arrays and wrong when
    recorded (it drops the dependence on x)."""
    from gradcli.gradcheck import check_gradgrad
    from gradcli.ops import OPS, defvjp, mul, primitive

    before = dict(OPS)
    try:
        @primitive("scratch_cube", "ScratchCubeBackward0")
        def cube(x):
            """x ** 3"""
            return x * x * x

        defvjp(cube, lambda g, ans, x: mul(g, 3 * (x.data if type(x) is Tensor else x) ** 2))
        graph = loads(graph_text(["{op: scratch_cube, inputs: [x], output: y}",
                                  "{op: sum, inputs: [y], output: loss}"],
                                 backward="roots: [loss]\n  create_graph: true"))
        pairs = {(m.output_name, m.input_name): m for m in check_gradgrad(graph)}
        assert pairs["grad(x)", "x"].status == "mismatch"
        assert pairs["grad(x)", "grad_outputs(loss)"].status == "ok"
        defvjp(cube, lambda g, ans, x: mul(g, 3 * x * x))
        assert all(m.status == "ok" for m in check_gradgrad(graph))
        assert all(m.status == "ok" for m in check_gradgrad(graph, fast=True))
    finally:
        OPS.clear()
        OPS.update(before)


def test_gradgrad_check_reports_a_backward_that_cannot_record():
    """An op whose backward raises when recorded: the check says so (status error),
    it does not abort validate."""
    from gradcli.gradcheck import check_gradgrad
    from gradcli.ops import OPS, defvjp, primitive

    def refuse(g, ans, x):
        if type(g) is Tensor or type(x) is Tensor:
            raise RuntimeError("this backward cannot be differentiated")
        return g * 2 * x

    before = dict(OPS)
    try:
        @primitive("scratch_sq", "ScratchSqBackward0")
        def sq(x):
            """x ** 2"""
            return x * x

        defvjp(sq, refuse)
        graph = loads(graph_text(["{op: scratch_sq, inputs: [x], output: y}",
                                  "{op: sum, inputs: [y], output: loss}"],
                                 backward="roots: [loss]\n  create_graph: true"))
        pairs = check_gradgrad(graph)
        assert pairs and all(m.status == "error" for m in pairs)
        assert "cannot be differentiated" in pairs[0].message
    finally:
        OPS.clear()
        OPS.update(before)
