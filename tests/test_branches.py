"""Note [Kinks] (gradcli/verdict.py): a float32 gradient whose run put an element on
another piece of a kinked op than float64 did, by rounding, is judged against the float64
gradient on the float32 run's branches (gradcli.branches)."""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.branches import branch_reference
from gradcli.loader import loads
from gradcli.ops import OPS
from gradcli.validate import Options, validate_graph

# x*w + b rounds to exactly 0 in float32 at element 0 (b is minus float32's x*w) and is
# +9.5e-8 in float64: relu passes w's gradient there in float64, not in float32.
# PyTorch's float32 gradient (expect.grads) is written on float64's branch, as a run
# whose rounding fell the other way would give it.
KINK = """
version: 1
name: kink
tensors:
  x: {value: [1.7199054, 1.0, 2.0, 0.5], dtype: float32}
  w: {value: [1.8691334, 1.5, -0.25, 3.0], dtype: float32, requires_grad: true}
  b: {value: [-3.2147324, -1.0, 1.0, -0.5], dtype: float32}
ops:
  - {op: mul, inputs: [x, w], output: h}
  - {op: add, inputs: [h, b], output: z}
  - {op: RELU, inputs: [z], output: r}
  - {op: sum, inputs: [r], output: loss}
backward: {roots: [loss]}
expect:
  grads: {w: {value: [1.7199054, 1.0, 2.0, 0.5], dtype: float32}}
  reference:
    grads: {w: {value: [1.7199054, 1.0, 2.0, 0.5]}}
    distance: {w: 0.0}
"""


def _check_w(text):
    graph = loads(text, name="kink")
    report = validate_graph(graph, "kink", Options())
    return next(c for c in report.checks if c.tensor == "w"), graph


@pytest.mark.parametrize("op", ["relu", "aten.relu.default"])
def test_a_flip_by_rounding_is_judged_on_float32s_branch(op):
    check, graph = _check_w(KINK.replace("RELU", op))
    assert check.status == "pass", check.message
    assert "1 element(s) at 1 op(s)" in check.message and "line 11" in check.message
    assert "9.5e-08 from its kink in float64" in check.message
    assert "on its own branches" in check.message and check.kinks == 1
    assert check.to_json()["kinks"] == 1
    kinks = branch_reference(graph)
    assert [(f.count, f.nearest) for f in kinks.flips] == [(1, pytest.approx(9.4975e-8, rel=1e-3))]
    # the float64 gradient on float32's branch: element 0 no longer passes through relu
    np.testing.assert_allclose(kinks.correction["w"], [-1.7199054, 0, 0, 0], rtol=1e-7)


def test_without_the_branch_the_same_gradient_fails(monkeypatch):
    """An op that declares no branch leaves the verdict as it was: the flip costs gradient
    'w' 0.6 of its norm, and it fails."""
    monkeypatch.setattr(OPS["relu"], "branch", None)
    check, _ = _check_w(KINK.replace("RELU", "relu"))
    assert check.status == "fail" and "farther from the float64 reference" in check.message
    assert "kinked" not in check.message


def test_a_flip_that_rounding_does_not_explain_is_not_followed():
    """(x + 1e8) - 1e8 in float32 loses x: the elements it moves across relu's kink moved by
    the size of x, not by rounding, and the verdict stays a failure that says why."""
    text = """
version: 1
name: lost
tensors:
  x: {value: [0.3, -0.2, 0.7, 1.5], dtype: float32, requires_grad: true}
  c: {value: 1.0e8, dtype: float32}
ops:
  - {op: add, inputs: [x, c], output: u}
  - {op: sub, inputs: [u, c], output: v}
  - {op: relu, inputs: [v], output: r}
  - {op: sum, inputs: [r], output: loss}
backward: {roots: [loss]}
expect:
  grads: {x: {value: [1.0, 0.0, 1.0, 1.0], dtype: float32}}
  reference:
    grads: {x: {value: [1.0, 0.0, 1.0, 1.0]}}
    distance: {x: 0.0}
"""
    graph = loads(text, name="lost")
    check = next(c for c in validate_graph(graph, "lost", Options()).checks if c.tensor == "x")
    assert check.status == "fail"
    assert "not judged on float32's branches" in check.message and "not rounding" in check.message
    assert branch_reference(graph).unexplained is not None


@pytest.mark.parametrize("name, args, x, pieces", [
    ("aten.relu.default", {}, [-1.0, 0.0, 2.0], [False, False, True]),
    ("aten.leaky_relu.default", {"negative_slope": 0.1}, [-1.0, 0.0, 2.0], [False, False, True]),
    ("aten.hardtanh.default", {"min_val": -1.0, "max_val": 1.0}, [-1.0, 0.5, 1.0],
     [False, True, False]),
    ("aten.hardsigmoid.default", {}, [-3.0, 0.0, 3.0], [False, True, False]),
    ("aten.hardswish.default", {}, [-3.0, 0.0, 3.0], [0, 1, 2]),
    ("aten.clamp.default", {"min": 0.0, "max": 1.0}, [-0.5, 0.0, 1.5], [False, True, False]),
    ("aten.abs.default", {}, [-2.0, 0.0, 2.0], [-1, 0, 1]),
])
def test_kinked_ops_say_where_their_pieces_are(name, args, x, pieces):
    """The pieces follow the VJP's own boundaries (relu's gradient is 0 at 0, hardtanh's
    at its bounds, clamp's passes at them)."""
    op = OPS[name]
    np.testing.assert_array_equal(op.branch(np.array(x), **args), pieces)


# Max pooling's kink is a near tie: x*w rounds to 3.2147324 at both elements in float32 (a
# tie: the first wins) while float64 puts the second 9.5e-8 higher (it wins there).
POOL = """
version: 1
name: tie
tensors:
  x: {value: [[[[1.0, 1.7199054]]]], dtype: float32}
  w: {value: [[[[3.2147324, 1.8691334]]]], dtype: float32, requires_grad: true}
ops:
  - {op: mul, inputs: [x, w], output: h}
  - {op: aten.max_pool2d_with_indices.default, inputs: [h], outputs: [p, i],
     args: {kernel_size: [1, 2]}}
  - {op: sum, inputs: [p], output: loss}
backward: {roots: [loss]}
expect:
  grads: {w: {value: [[[[0.0, 1.7199054]]]], dtype: float32}}
  reference:
    grads: {w: {value: [[[[0.0, 1.7199054]]]]}}
    distance: {w: 0.0}
"""


def test_a_near_tie_in_max_pooling_is_judged_on_float32s_choice():
    graph = loads(POOL, name="tie")
    check = next(c for c in validate_graph(graph, "tie", Options()).checks if c.tensor == "w")
    assert check.status == "pass", check.message
    assert "max_pool2d_with_indices" in check.message and "9.5e-08 from its kink" in check.message
    kinks = branch_reference(graph)
    np.testing.assert_allclose(kinks.correction["w"], [[[[1.0, -1.7199054]]]], rtol=1e-7)


def test_without_its_choice_declared_the_tie_fails(monkeypatch):
    monkeypatch.setattr(OPS["aten.max_pool2d_with_indices.default"], "branch", None)
    graph = loads(POOL, name="tie")
    check = next(c for c in validate_graph(graph, "tie", Options()).checks if c.tensor == "w")
    assert check.status == "fail"
