"""In-place ATen overloads in graph files (Note [In-place ATen ops]): PyTorch's node
names, gradients and version errors on the same calls (torch 2.13 run on the same
calls gave the numbers here)."""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.errors import BackwardError, GraphError
from gradcli.loader import loads

HEAD = """version: 1
tensors:
  x: {value: [1.0, -2.0, 3.0], requires_grad: true}
  w: {value: [2.0, 3.0, 4.0], requires_grad: true}
ops:
"""
TAIL = """backward:
  roots: [loss]
"""


def run(ops):
    return loads(HEAD + ops + TAIL, name="inplace").run()


def torch_grads(build):
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([2.0, 3.0, 4.0], dtype=torch.float64, requires_grad=True)
    build(torch.ops.aten, x, w).backward()
    return x.grad.numpy(), w.grad.numpy()


def test_inplace_chain_matches_torch_and_keeps_node_names():
    r = run("""  - {op: aten.mul.Tensor, inputs: [x, w], output: h}
  - {op: aten.add_.Tensor, inputs: [h, w], output: h2, args: {alpha: 2}}
  - {op: aten.relu_.default, inputs: [h2], output: h3}
  - {op: aten.mul.Tensor, inputs: [h3, w], output: y}
  - {op: aten.sum.default, inputs: [y], output: loss}
""")

    def build(aten, x, w):
        h = aten.mul.Tensor(x, w)
        h3 = aten.relu_.default(aten.add_.Tensor(h, w, alpha=2))
        return aten.sum.default(aten.mul.Tensor(h3, w))

    gx, gw = torch_grads(build)
    np.testing.assert_allclose(r.grads["x"], gx)
    np.testing.assert_allclose(r.grads["w"], gw)
    names = [o.node for o in r.order]
    assert "ReluBackward0" in names and "AddBackward0" in names


def test_inplace_result_is_the_same_tensor():
    """Both names see the new values: ``y = h * h2`` reads h after relu_ (PyTorch's
    ``h`` is ``h2``)."""
    r = run("""  - {op: aten.mul.Tensor, inputs: [x, w], output: h}
  - {op: aten.relu_.default, inputs: [h], output: h2}
  - {op: aten.add.Tensor, inputs: [h, h2], output: y}
  - {op: aten.sum.default, inputs: [y], output: loss}
""")

    def build(aten, x, w):
        h = aten.mul.Tensor(x, w)
        h2 = aten.relu_.default(h)
        return aten.sum.default(aten.add.Tensor(h, h2))

    gx, gw = torch_grads(build)
    np.testing.assert_allclose(r.grads["x"], gx)
    np.testing.assert_allclose(r.grads["w"], gw)


def test_modified_saved_tensor_fails_with_pytorchs_error():
    g = loads(HEAD + """  - {op: aten.mul.Tensor, inputs: [x, w], output: h}
  - {op: aten.relu_.default, inputs: [h], output: h2}
  - {op: aten.add_.Tensor, inputs: [h2, w], output: h3}
  - {op: aten.sum.default, inputs: [h3], output: loss}
""" + TAIL, name="inplace")
    with pytest.raises(BackwardError, match="which is output 0 of Relu, is at version 2; "
                                            "expected version 1 instead"):
        g.run()


def test_inplace_on_leaf_requiring_grad_is_refused():
    with pytest.raises(GraphError,
                       match="a leaf Variable that requires grad is being used in an in-place "
                             "operation"):
        loads(HEAD + """  - {op: aten.relu_.default, inputs: [x], output: h}
  - {op: aten.sum.default, inputs: [h], output: loss}
""" + TAIL, name="inplace").run()


def test_inplace_other_must_broadcast_to_self():
    text = """version: 1
tensors:
  a: {value: [1.0, 2.0], requires_grad: true}
  b: {value: [[1.0, 2.0], [3.0, 4.0]], requires_grad: true}
ops:
  - {op: aten.mul.Tensor, inputs: [a, a], output: h}
  - {op: aten.add_.Tensor, inputs: [h, b], output: h2}
  - {op: aten.sum.default, inputs: [h2], output: loss}
backward:
  roots: [loss]
"""
    with pytest.raises(GraphError, match=r"output with shape \[2\] doesn't match the broadcast "
                                         r"shape \[2, 2\]"):
        loads(text, name="inplace")
