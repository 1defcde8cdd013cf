"""``aten.as_strided`` views and ``aten.as_strided_`` in graph files, against PyTorch on
the same file (Note [as_strided_], Note [Memory owners], Note [CopySlices]): gradients,
node names and node order as PyTorch's replay of the file gives them."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from gradcli.autograd import Tensor
from gradcli.errors import GraphError
from gradcli.loader import loads
from gradcli.ops import OPS

HEAD = """version: 1
tensors:
  a: {value: [0.5, 1.0, 2.0, 3.0, 4.0, 5.0], requires_grad: true}
ops:
"""
TAIL = """backward:
  roots: [loss]
"""


def both(ops):
    """gradcli's (grads, order) and PyTorch's replay of the same file."""
    from gradcli.bridges.torch.compare import replay

    doc = HEAD + ops + TAIL
    ours = loads(doc, name="as_strided").run()
    theirs = replay(yaml.safe_load(doc))
    return ours, theirs


def assert_same(ours, theirs):
    assert [o.node for o in ours.order] == theirs.order
    assert set(ours.grads) == set(theirs.grads)
    for name, g in theirs.grads.items():
        np.testing.assert_allclose(ours.grads[name], g, rtol=1e-12)


def test_as_strided_inplace_records_as_strided_backward1():
    """Mirrors PyTorch's ``y.as_strided_(size, stride, offset)`` on a non-leaf: the same
    tensor reads the new geometry, its node is AsStridedBackward1, both names see it."""
    pytest.importorskip("torch")
    ours, theirs = both("""  - {op: aten.mul.Tensor, inputs: [a, a], output: x}
  - {op: aten.as_strided_.default, inputs: [x], output: v, args: {size: [2, 2], stride: [1, 2], storage_offset: 1}}
  - {op: aten.mul.Tensor, inputs: [x, v], output: y}
  - {op: aten.sum.default, inputs: [y], output: loss}
""")
    assert "AsStridedBackward1" in theirs.order
    assert_same(ours, theirs)


def test_as_strided_inplace_is_the_same_tensor_and_bumps_its_version():
    """PyTorch: ``as_strided_`` returns self, bumps its version, refuses a leaf that
    requires grad ("a leaf Variable that requires grad is being used in an in-place
    operation.") and on a leaf that does not, just restrides it."""
    op = OPS["aten.as_strided_.default"]
    a = Tensor(np.arange(6.0), requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
        op(a, size=[2], stride=[2])
    x = OPS["aten.mul.Tensor"](a, 1.0)
    out = op(x, size=[2, 2], stride=[1, 2], storage_offset=1)
    assert out is x and x._version == 1 and x.grad_fn.name == "AsStridedBackward1"
    np.testing.assert_array_equal(x.data, [[1.0, 3.0], [2.0, 4.0]])
    plain = Tensor(np.arange(6.0))
    op(plain, size=[3], stride=[2])
    np.testing.assert_array_equal(plain.data, [0.0, 2.0, 4.0])
    assert plain._version == 1 and plain.grad_fn is None


def test_inplace_op_on_as_strided_view_goes_through_copy_slices():
    """An in-place op on an as_strided view of an activation rebases the activation's
    history (CopySlices), as PyTorch's; without it the base's values change behind its
    recorded history and its gradient is silently wrong ([0, 6, 12, ...] instead of
    PyTorch's [0, 18, 36, ...] for this file)."""
    pytest.importorskip("torch")
    ours, theirs = both("""  - {op: aten.mul.Tensor, inputs: [a, 1.0], output: x}
  - {op: aten.as_strided.default, inputs: [x], output: v, args: {size: [2, 2], stride: [1, 2], storage_offset: 1}}
  - {op: aten.mul_.Tensor, inputs: [v, 3.0], output: v2}
  - {op: aten.mul.Tensor, inputs: [x, x], output: y}
  - {op: aten.sum.default, inputs: [y], output: loss}
""")
    assert "CopySlices" in theirs.order
    assert_same(ours, theirs)


def test_overlapping_as_strided_view_then_inplace_relu():
    """Overlapping windows (each element read twice), relu_ on them, then both the view
    and the base read: CopySlices and the view's regenerated AsStridedBackward0."""
    pytest.importorskip("torch")
    ours, theirs = both("""  - {op: aten.sub.Tensor, inputs: [a, 2.5], output: x}
  - {op: aten.as_strided.default, inputs: [x], output: v, args: {size: [3, 2], stride: [2, 1]}}
  - {op: aten.relu_.default, inputs: [v], output: v2}
  - {op: aten.mul.Tensor, inputs: [x, a], output: y1}
  - {op: aten.sum.default, inputs: [y1], output: s1}
  - {op: aten.sum.default, inputs: [v2], output: s2}
  - {op: aten.add.Tensor, inputs: [s1, s2], output: loss}
""")
    assert_same(ours, theirs)


def test_as_strided_inplace_keeps_the_loaders_shape_for_self():
    """After ``as_strided_`` the old name has the new shape (PyTorch: the same tensor), so
    an op mixing it with a [2, 2] tensor loads; one needing the old [6] is refused with the
    loader's one-line error."""
    ok = HEAD + """  - {op: aten.mul.Tensor, inputs: [a, 1.0], output: x}
  - {op: aten.as_strided_.default, inputs: [x], output: v, args: {size: [2, 2], stride: [2, 1]}}
  - {op: aten.mul.Tensor, inputs: [x, v], output: y}
  - {op: aten.sum.default, inputs: [y], output: loss}
""" + TAIL
    r = loads(ok, name="restride").run()
    np.testing.assert_allclose(r.grads["a"], [1.0, 2.0, 4.0, 6.0, 0.0, 0.0])   # 2 * x
    bad = ok.replace("inputs: [x, v], output: y}", "inputs: [x, a], output: y}")
    with pytest.raises(GraphError, match=r"aten\.mul\.Tensor.*x \[2, 2\], a \[6\]"):
        loads(bad, name="restride")
