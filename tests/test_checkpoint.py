"""`checkpoint` in graph files: scoping rules, errors, nesting, reentrant backward."""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.errors import BackwardError, GraphError
from gradcli.loader import loads

HEAD = """version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
  w: {value: [3.0, -1.0], requires_grad: true}
ops:
"""
TAIL = """backward:
  roots: [loss]
"""


def graph(ops):
    return loads(HEAD + ops + TAIL, name="ckpt")


def test_checkpoint_gradient_equals_plain_graph():
    g = graph("""  - op: checkpoint
    id: block
    inputs: [x, w]
    outputs: [y]
    body:
      - {op: mul, inputs: [x, w], output: h}
      - {op: exp, inputs: [h], output: y}
  - {op: sum, inputs: [y], output: loss}
""")
    result = g.run()
    x, w = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    np.testing.assert_allclose(result.grads["x"], np.exp(x * w) * w)
    np.testing.assert_allclose(result.grads["w"], np.exp(x * w) * x)
    names = [r.node for r in result.order]
    assert names[1] == "CheckpointFunctionBackward"
    # The body's nodes ran in a nested graph task, one level deeper.
    assert {r.depth for r in result.order if r.node in ("MulBackward0", "ExpBackward0")} == {1}
    assert {r.op for r in result.order if r.depth == 1} >= {"ops[0].body[0]", "ops[0].body[1]"}


def test_body_names_stay_inside_and_may_repeat_outer_names():
    g = graph("""  - {op: mul, inputs: [x, x], output: h}
  - op: checkpoint
    inputs: [h]
    outputs: [out]
    body:
      - {op: mul, inputs: [h, h], output: x}     # `x` is the body's own name
      - {op: clone, inputs: [x], output: out}
  - {op: sum, inputs: [out], output: loss}
""")
    result = g.run()
    np.testing.assert_allclose(result.grads["x"], 4 * np.array([1.0, 2.0]) ** 3)


@pytest.mark.parametrize("ops, message", [
    ("""  - op: checkpoint
    inputs: [x]
    outputs: [y]
    body:
      - {op: mul, inputs: [x, w], output: y}
  - {op: sum, inputs: [y], output: loss}
""", "input 'w' is not defined above this op (a checkpoint body sees only the checkpoint's inputs"),
    ("""  - op: checkpoint
    inputs: [x]
    outputs: [y]
    body:
      - {op: exp, inputs: [x], output: z}
  - {op: sum, inputs: [y], output: loss}
""", "output 'y' is not defined by the body"),
    ("""  - op: checkpoint
    inputs: [x]
    outputs: [y]
  - {op: sum, inputs: [y], output: loss}
""", "body must be a non-empty list of ops"),
    ("""  - op: checkpoint
    inputs: [x]
    output: y
    body:
      - {op: exp, inputs: [x], output: y}
  - {op: sum, inputs: [y], output: loss}
""", "a checkpoint names its results with outputs"),
    ("""  - op: checkpoint
    inputs: [x]
    outputs: [y]
    body:
      - {op: exp, inputs: [x], output: y, bogus: 1}
  - {op: sum, inputs: [y], output: loss}
""", "ops[0].body[0] (exp): unknown key 'bogus'"),
])
def test_checkpoint_errors_are_one_line_and_name_the_body_op(ops, message):
    with pytest.raises(GraphError) as info:
        graph(ops).run()
    text = str(info.value)
    assert message in text and "\n" not in text


def test_body_op_line_numbers_point_into_the_body():
    with pytest.raises(GraphError) as info:
        graph("""  - op: checkpoint
    inputs: [x]
    outputs: [y]
    body:
      - {op: exp, inputs: [x], output: z}
      - {op: matmul, inputs: [z, z2], output: y}
  - {op: sum, inputs: [y], output: loss}
""").run()
    assert info.value.line == 11 and "ops[0].body[1]" in str(info.value)


@pytest.mark.timeout(60)
def test_failure_inside_a_checkpoint_body_reaches_the_caller():
    g = graph("""  - op: checkpoint
    inputs: [x]
    outputs: [y]
    body:
      - {op: exp, inputs: [x], output: e}
      - {op: fail, inputs: [e], output: y, id: inner, args: {message: boom inside}}
  - {op: sum, inputs: [y], output: loss}
""")
    with pytest.raises(BackwardError) as info:
        g.run()
    assert info.value.node.name == "FailBackward0" and info.value.node.metadata["op_id"] == "inner"
    assert "boom inside" in str(info.value)
    # The message says which body op made the failing node, and where.
    assert "(node created by op 'inner' at <ckpt>:" in str(info.value)


@pytest.mark.timeout(120)
def test_hundred_nested_checkpoints_in_a_file():
    import gradcli

    g = gradcli.load("graphs/nested_checkpoints.yaml")
    result = g.run()
    for name, expected in g.expect.grads.items():
        np.testing.assert_allclose(result.grads[name], expected.array(), rtol=1e-12)
    assert max(r.depth for r in result.order) == 100


# -- the core's checkpoint takes a Python callable -----------------------------------------
def test_checkpoint_takes_a_callable_like_torch_utils_checkpoint():
    import gradcli.ops as O
    from gradcli.autograd import Tensor, backward
    from gradcli.ops.reentrant import checkpoint

    calls = []

    def block(a, b):
        calls.append(a.requires_grad)
        return O.exp(O.mul(a, b))

    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    w = Tensor(np.array([3.0, -1.0]), requires_grad=True)
    y = checkpoint(block, x, w)               # one Tensor in, one Tensor out
    assert y.grad_fn.name == "CheckpointFunctionBackward"
    assert calls == [True]                    # the forward ran once, without recording
    backward([O.sum(y)])
    assert len(calls) == 2                    # and again inside the backward
    np.testing.assert_allclose(x.grad, np.exp(x.data * w.data) * w.data)
    np.testing.assert_allclose(w.grad, np.exp(x.data * w.data) * x.data)
    pair = checkpoint(lambda a: (O.exp(a), O.mul(a, a)), x)
    assert isinstance(pair, tuple) and len(pair) == 2


def test_loader_stamps_op_ids_and_lines_in_node_metadata():
    g = graph("""  - op: checkpoint
    id: block
    inputs: [x, w]
    outputs: [y]
    body:
      - {op: mul, inputs: [x, w], output: y, id: inner}
  - {op: sum, inputs: [y], output: loss}
""")
    values = g.forward()
    node = values["loss"].grad_fn
    assert node.metadata == {"op_id": "ops[1]", "line": 12}
    assert values["y"].grad_fn.metadata["op_id"] == "block"
    acc = values["x"].grad_accumulator
    assert acc.metadata["op_id"] == "x" and acc.metadata["leaf"] is True
    # The autograd core never stamps anything itself.
    from gradcli.autograd import Tensor

    assert Tensor(np.ones(1), requires_grad=True).grad_accumulator.metadata == {}
    assert g.describe_node(acc) == " (node accumulates into tensor 'x' at <ckpt>:3)"
    assert g.describe_node(node) == " (node created by op ops[1] at <ckpt>:12)"


def test_graph_backward_and_run_options_are_keyword_only():
    g = graph("""  - {op: mul, inputs: [x, w], output: h}
  - {op: sum, inputs: [h], output: loss}
""")
    with pytest.raises(TypeError):
        g.run(None)
    with pytest.raises(TypeError):
        g.backward(None, True)
    grads, _, _ = g.backward(retain_graph=True, multithreading=False)
    np.testing.assert_allclose(grads["x"], [3.0, -1.0])


# -- grad() reachability per output ------------------------------------
SPLIT = """version: 1
tensors:
  x: {value: [1.0, 2.0, 3.0, 4.0], requires_grad: true}
ops:
  - {op: split, inputs: [x], outputs: [p, q], args: {sections: 2}}
  - {op: sum, inputs: [q], output: loss}
backward:
  roots: [loss]
  inputs: [p]
"""


def test_unused_output_of_a_used_node_is_refused_like_pytorch():
    """p and q come from one SplitBackward0 node, reached through q only: p is
    unused. PyTorch refuses grad(loss, p); so does the loader's check, per output."""
    with pytest.raises(GraphError) as info:
        loads(SPLIT, name="split").run()
    assert "input 'p' is not used to compute any root: One of the differentiated Tensors " \
           "appears to not have been used in the graph" in str(info.value)
    result = loads(SPLIT.replace("  inputs: [p]\n", "  inputs: [p]\n  allow_unused: true\n"),
                   name="split").run()
    assert result.grads == {"p": None}
    both = loads(SPLIT.replace("inputs: [p]", "inputs: [q]"), name="split").run()
    np.testing.assert_allclose(both.grads["q"], [1.0, 1.0])


def test_autograd_grad_checks_each_output():
    import gradcli.ops as O
    from gradcli.autograd import Tensor, grad

    x = Tensor(np.arange(4.0), requires_grad=True)
    p, q = O.OPS["split"](x, sections=2)
    loss = O.sum(q)
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors appears to not "
                                           "have been used in the graph"):
        grad([loss], [p], retain_graph=True)
    assert grad([loss], [p], allow_unused=True) == (None,)


# -- deep nesting -------------------------------------------------------
def nested_checkpoints_yaml(levels):
    lines = ["version: 1", "tensors:", "  x: {value: [1.0, 2.0], requires_grad: true}", "ops:",
             "  - op: checkpoint", "    inputs: [x]", "    outputs: [y]", "    body:",
             "      - {op: clone, inputs: [x], output: a}"]
    indent = 6
    for _ in range(levels - 1):
        pad = " " * indent
        lines += [pad + "- op: checkpoint", pad + "  inputs: [a]", pad + "  outputs: [b]",
                  pad + "  body:"]
        indent += 4
    lines += [" " * indent + "- {op: mul, inputs: [a, a], output: b}",
              "      - {op: clone, inputs: [b], output: y}",
              "  - {op: sum, inputs: [y], output: loss}", "backward:", "  roots: [loss]"]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(120)
def test_deepest_supported_checkpoint_nesting_runs():
    from gradcli.loader.check_ops import MAX_CHECKPOINT_NESTING

    result = loads(nested_checkpoints_yaml(MAX_CHECKPOINT_NESTING), name="deep").run()
    np.testing.assert_allclose(result.grads["x"], [2.0, 4.0])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("levels", [129, 350, 480])
def test_deeper_checkpoint_nesting_is_a_one_line_error(levels, tmp_path):
    """Formerly a RecursionError in the loader (350-480 levels) or exit 3 at
    backward (260-320): now refused at load, exit 2, one line, no traceback."""
    import subprocess
    import sys

    path = tmp_path / "deep.yaml"
    path.write_text(nested_checkpoints_yaml(levels))
    proc = subprocess.run([sys.executable, "-m", "gradcli", "run", str(path)],
                          capture_output=True, text=True, timeout=100)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "checkpoints nest 129 deep here; at most 128 levels" in lines[0]


# The reviewer's files: a grad op through a checkpoint (create_graph on, and a
# root that also adds a term not through it). The re-run's backward() cannot
# serve grad() (exec_info) nor record itself; PyTorch's reentrant checkpoint
# refuses (torch.autograd._is_checkpoint_valid), so gradcli refuses, exit 3,
# naming the checkpoint's node and op, instead of a gradient missing its part.
GRAD_THROUGH_CHECKPOINT = """version: 1
tensors:
  x: {value: [0.5, -1.0, 2.0], requires_grad: true}
  w: {value: [1.5, 0.5, -0.25], requires_grad: true}
ops:
  - op: checkpoint
    inputs: [x, w]
    outputs: [y]
    body:
      - {op: mul, inputs: [x, w], output: m}
      - {op: sin, inputs: [m], output: y}
  - {op: sum, inputs: [y], output: f}
  - {op: grad, inputs: [f, x], outputs: [g]%s}
  - {op: sum, inputs: [g], output: s0}
%sbackward: {roots: [s]}
"""
ALSO_XX = """  - {op: mul, inputs: [x, x], output: xx}
  - {op: sum, inputs: [xx], output: s1}
  - {op: add, inputs: [s0, s1], output: s}
"""
ONLY_S0 = "  - {op: sum, inputs: [s0], output: s}\n"


@pytest.mark.parametrize("args, rest", [
    ("", ONLY_S0),                                   # /tmp/rv/ckpt.yaml's shape
    ("", ALSO_XX),                                   # /tmp/rv/ckpt2.yaml's shape (was exit 0)
    (", args: {create_graph: false}", ALSO_XX),      # a plain grad() through it
])
def test_grad_op_through_a_checkpoint_is_refused_like_pytorch(args, rest, tmp_path, gradcli_cli):
    path = tmp_path / "ckpt.yaml"
    path.write_text(GRAD_THROUGH_CHECKPOINT % (args, rest))
    result = gradcli_cli("run", path)
    assert result.exit_code == 3, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "ops[2] (grad)" in lines[0] and "CheckpointFunctionBackward" in lines[0]
    assert "torch.utils.checkpoint is incompatible with .grad()" in lines[0]
    assert "node created by op ops[0]" in lines[0]


def test_torch_refuses_grad_through_a_reentrant_checkpoint():
    """The behaviour the test above follows."""
    torch = pytest.importorskip("torch")
    import torch.utils.checkpoint as tc

    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([1.5, 0.5, -0.25], dtype=torch.float64, requires_grad=True)
    y = tc.checkpoint(lambda a, b: torch.sin(a * b), x, w, use_reentrant=True)
    with pytest.raises(RuntimeError, match="incompatible with .grad()"):
        torch.autograd.grad(y.sum(), [x], create_graph=True)


def test_plain_backward_through_a_checkpoint_still_runs():
    g = graph("""  - op: checkpoint
    inputs: [x, w]
    outputs: [y]
    body:
      - {op: mul, inputs: [x, w], output: y}
  - {op: sum, inputs: [y], output: loss}
""")
    np.testing.assert_allclose(g.run().grads["x"], [3.0, -1.0])
