"""Composite ops (spec: "Composite ops"): an ATen op gradcli has no kernel for, written
as a body of ops it has, records ONE node under PyTorch's name for the op; that node runs
the body's VJPs inside itself, so orders and gradients are PyTorch's for the op."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from gradcli import loader
from gradcli.errors import GraphError

BODY = """\
      body:
        - {op: aten.mul.Scalar, inputs: [x], output: bx, args: {other: 2.0}}
        - {op: aten.exp.default, inputs: [bx], output: e}
        - {op: aten.add.Scalar, inputs: [e], output: e1, args: {other: 1.0}}
        - {op: aten.log.default, inputs: [e1], output: l}
        - {op: aten.div.Scalar, inputs: [l], output: y, args: {other: 2.0}}
"""
SOFTPLUS = """\
version: 1
tensors:
  x: {value: [[0.5, -1.0, 2.0], [0.0, 1.5, -0.25]], requires_grad: true}
ops:
  - op: aten.softplus.default
    id: softplus
    inputs: [x]
    output: y
    args: {beta: 2.0}
    composite:
      node: SoftplusBackward0
%s  - {op: aten.mul.Tensor, inputs: [y, x], output: z}
  - {op: aten.sum.default, inputs: [z], output: loss}
backward: {roots: [loss]}
"""


def softplus2(x):
    return np.log1p(np.exp(2 * x)) / 2


def test_composite_records_one_node_named_as_pytorch_and_runs_the_body_vjps():
    r = loader.loads(SOFTPLUS % BODY).run()
    x = np.array([[0.5, -1.0, 2.0], [0.0, 1.5, -0.25]])
    sig = 1 / (1 + np.exp(-2 * x))          # d softplus_2 / dx
    np.testing.assert_allclose(r.grads["x"], softplus2(x) + x * sig, rtol=1e-12)
    # the body's five nodes never reach the engine: one node for the op, as in PyTorch
    assert [n.node for n in r.order] == ["SumBackward0", "MulBackward0", "SoftplusBackward0",
                                         "AccumulateGrad"]
    assert r.order[2].op == "softplus"


def test_composite_matches_pytorch_running_the_op_itself():
    pytest.importorskip("torch")
    from gradcli.bridges.torch import compare

    g = loader.loads(SOFTPLUS % BODY)
    ours = g.run()
    theirs = compare.replay(yaml.safe_load(SOFTPLUS % BODY))   # PyTorch runs softplus itself
    assert theirs.order == [n.node for n in ours.order]
    np.testing.assert_allclose(ours.grads["x"], theirs.grads["x"], rtol=1e-12)


def test_composite_keeps_its_body_graph_only_while_the_graph_is_retained():
    g = loader.loads(SOFTPLUS % BODY)
    first = g.backward(retain_graph=True)[0]["x"].copy()
    again = g.backward(retain_graph=False)[0]["x"]      # the body's graph is still held
    np.testing.assert_allclose(again, 2 * first, rtol=1e-12)   # accumulated into x.grad
    with pytest.raises(Exception, match="backward through the graph a second time"):
        g.backward()


@pytest.mark.parametrize("change, message", [
    (lambda t: t.replace("output: y, args", "output: w, args"),
     r"output 'y' is not defined by the composite's body"),
    (lambda t: t.replace("node: SoftplusBackward0", "node: 'Soft plus'"),
     r"composite.node must be the backward node's name"),
    (lambda t: t.replace("op: aten.softplus.default", "op: softplus"),
     r"a composite stands for an ATen op named aten.NAME.OVERLOAD"),
    (lambda t: t.replace("inputs: [bx], output: e}", "inputs: [nowhere], output: e}"),
     r"ops\[0\].composite\[1\].*input 'nowhere' is not defined above this op"),
    (lambda t: t.replace("node: SoftplusBackward0", "node: SoftplusBackward0\n      extra: 1"),
     r"unknown key 'extra' in composite"),
])
def test_bad_composites_are_one_line_load_errors(change, message):
    with pytest.raises(GraphError, match=message) as info:
        loader.loads(change(SOFTPLUS % BODY))
    assert "\n" not in str(info.value)


def test_composite_backward_refuses_to_record_a_graph():
    g = loader.loads(SOFTPLUS % BODY)
    from gradcli.autograd import backward

    values = g.forward()
    with pytest.raises(RuntimeError, match="SoftplusBackward0: a composite op's backward cannot "
                                           "record a graph"):
        backward([values["loss"]], create_graph=True)


def test_composite_jacobian_matches_finite_differences(tmp_path):
    from click.testing import CliRunner

    from gradcli.cli import main

    path = tmp_path / "softplus.yaml"
    path.write_text(SOFTPLUS % BODY)
    result = CliRunner().invoke(main, ["validate", "--numeric", str(path)])
    assert result.exit_code == 0, result.output
    assert "numeric" in result.output
