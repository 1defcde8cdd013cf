"""Non-reentrant checkpoint (gradcli.autograd.checkpoint, use_reentrant=False), as
PyTorch's torch.utils.checkpoint: each test names the test of test/test_autograd.py it
mirrors, or the rule of PyTorch's it checks. Also ``use_reentrant: false`` in graph files."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import Tensor, backward, checkpoint, grad
from gradcli.loader import loads

RNG = np.random.default_rng(0)


def leaf(*shape):
    return Tensor(RNG.standard_normal(shape), requires_grad=True)


W = leaf(4, 4)


def block(x):
    return O.tanh(O.matmul(x, W)) * 2.0


def reference(fn, x):
    """The gradients w.r.t. x and W of fn(x) without a checkpoint."""
    return grad(fn(x).sum(), [x, W])


def test_matches_plain_gradients_and_recomputes_once():
    """Mirrors test_autograd.py::TestAutograd::test_checkpointing_without_reentrant_
    correct_grad (the gradients are the plain graph's; the forward runs once and the
    backward recomputes once)."""
    calls = []

    def counted(x):
        calls.append(1)
        return block(x)

    x = leaf(3, 4)
    ref = reference(block, x)
    y = checkpoint(counted, x, use_reentrant=False)
    assert len(calls) == 1
    got = grad(y.sum(), [x, W])
    assert len(calls) == 2
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b)


def test_works_with_backward_inputs():
    """The non-reentrant checkpoint under backward(inputs=...), which the reentrant one
    refuses (test_autograd.py::TestAutograd::test_checkpoint_valid_reset's error)."""
    x = leaf(3, 4)
    ref = reference(block, x)
    W.grad = None
    y = checkpoint(block, x, use_reentrant=False)
    y.sum().backward(inputs=[W])
    np.testing.assert_allclose(W.grad, ref[1])
    assert x.grad is None
    W.grad = None


@pytest.mark.parametrize("early_stop", [True, False])
def test_nested_checkpoints(early_stop):
    """Mirrors test_autograd.py::TestNestedCheckpoint::test_nested_checkpoint (checkpoints
    nest freely; the gradients equal the plain graph's)."""
    def outer(x):
        h = checkpoint(block, x, use_reentrant=False, early_stop=early_stop)
        return checkpoint(block, h, use_reentrant=False, early_stop=early_stop)

    x = leaf(3, 4)
    ref = reference(lambda a: block(block(a)), x)
    y = checkpoint(outer, x, use_reentrant=False, early_stop=early_stop)
    got = grad(y.sum(), [x, W])
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b)


def test_early_stop():
    """torch/utils/checkpoint.py's early_stop (torch 2.13 on the same code): the
    recomputation stops once every saved tensor is back; without early_stop the whole
    function runs again."""
    def fn(x, log):
        h = O.exp(x)                 # saves its result
        log.append("after exp")
        return h + 1.0               # add saves nothing

    for early_stop, expected in ((True, ["after exp"]), (False, ["after exp"] * 2)):
        log = []
        x = leaf(3)
        y = checkpoint(fn, x, log, use_reentrant=False, early_stop=early_stop)
        y.sum().backward()
        assert log == expected
        np.testing.assert_allclose(x.grad, np.exp(x.data))


def test_create_graph_through_checkpoint():
    """Mirrors test_autograd.py::TestNestedCheckpoint::test_nested_checkpoint_two_children
    (double backward through a non-reentrant checkpoint)."""
    x = leaf(3)
    y = checkpoint(lambda t: t * t * t, x, use_reentrant=False)
    (gx,) = grad(y.sum(), x, create_graph=True)
    (ggx,) = grad(gx.sum(), x)
    np.testing.assert_allclose(ggx, 6 * x.data)


def test_retain_graph_recomputes_per_backward():
    """Each backward of a retained graph recomputes (one recomputation per graph task)."""
    calls = []

    def fn(x):
        calls.append(1)
        return O.exp(x)

    x = leaf(3)
    y = checkpoint(fn, x, use_reentrant=False)
    y.sum().backward(retain_graph=True)
    y.sum().backward()
    assert len(calls) == 3
    np.testing.assert_allclose(x.grad, 2 * np.exp(x.data))


def test_input_changed_in_place_fails_backward():
    """The recomputation reads the inputs: one changed in place is refused, never a
    wrong gradient (PyTorch checks the saved inputs' versions the same way)."""
    w = Tensor(np.array([1.0, 2.0]))
    x = leaf(2)
    y = checkpoint(lambda a, b: O.exp(a * b), x, w, use_reentrant=False)
    w.mul_(3.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_different_number_of_saved_tensors():
    """torch/utils/checkpoint.py's check that the recomputation saves what the forward
    saved (a function that saves more during recomputation)."""
    state = {"n": 1}

    def fn(x):
        for _ in range(state["n"]):
            x = O.exp(x)
        return x

    x = leaf(2)
    y = checkpoint(fn, x, use_reentrant=False, early_stop=False)
    state["n"] = 2
    with pytest.raises(RuntimeError, match="trying to save more tensors during recomputation"):
        y.sum().backward()


def test_reentrant_stays_with_its_errors_and_default_warns():
    """Mirrors test_autograd.py::TestAutograd::test_checkpoint_valid_reset's premise: the
    reentrant checkpoint refuses grad(); leaving use_reentrant out warns (PyTorch 2.13)."""
    x = leaf(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = checkpoint(block, x)
    assert any("use_reentrant" in str(w.message) for w in caught)
    assert y.grad_fn.name == "CheckpointFunctionBackward"
    with pytest.raises(RuntimeError, match="incompatible with .grad()"):
        grad(y.sum(), x)
    y2 = checkpoint(block, x, use_reentrant=True)
    backward(y2.sum())
    np.testing.assert_allclose(x.grad, reference(block, x)[0])


GRAPH = """version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
  w: {value: [3.0, -1.0], requires_grad: true}
ops:
  - op: checkpoint
    use_reentrant: %s
    inputs: [x, w]
    outputs: [y]
    body:
      - {op: mul, inputs: [x, w], output: h}
      - {op: exp, inputs: [h], output: y}
  - {op: sum, inputs: [y], output: loss}
backward:
  roots: [loss]
"""


def test_graph_file_use_reentrant_false():
    """``use_reentrant: false`` in a graph file: the body's own nodes (no
    CheckpointFunctionBackward, no nested graph task), PyTorch's gradients."""
    result = loads(GRAPH % "false", name="ckpt").run()
    x, w = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    np.testing.assert_allclose(result.grads["x"], np.exp(x * w) * w)
    np.testing.assert_allclose(result.grads["w"], np.exp(x * w) * x)
    names = [r.node for r in result.order]
    assert "CheckpointFunctionBackward" not in names and "ExpBackward0" in names
    assert {r.depth for r in result.order} == {0}


def test_graph_file_use_reentrant_must_be_bool():
    from gradcli.errors import GraphError

    with pytest.raises(GraphError, match="use_reentrant must be true or false"):
        loads(GRAPH % "maybe", name="ckpt")
