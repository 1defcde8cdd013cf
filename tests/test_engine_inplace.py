"""In-place ops and version counters, mirrored from PyTorch's test/test_autograd.py.

Each test names the PyTorch test it mirrors; the expected numbers were computed with
PyTorch 2.13 on the same code. gradcli's message names dtypes and devices its own way
("[cpu float64 [3]]" where PyTorch says "[torch.DoubleTensor [3]]") and ends with the
node that saved the tensor instead of PyTorch's anomaly-mode hint.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import Tensor, backward, grad, no_grad

MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"


def t(values, requires_grad=False):
    return Tensor(np.array(values, dtype=np.float64), requires_grad=requires_grad)


def test_version_counter():
    """Mirrors test_autograd.py::TestAutograd::test_version_counter: every in-place op
    bumps the version; views and detached tensors share their base's counter."""
    x = t(np.ones((2, 2)))
    assert x._version == 0
    x.add_(1.0)
    x.mul_(2.0)
    assert x._version == 2
    v = O.slice(x, index=(slice(1, None),))
    assert v._version == 2
    v.add_(1.0)
    assert x._version == 3 and v._version == 3
    d = x.detach()
    d.sub_(1.0)
    assert x._version == 4
    np.testing.assert_array_equal(x.data, [[3.0, 3.0], [4.0, 4.0]])


def test_inplace_on_leaf_requiring_grad_raises():
    """Mirrors test_autograd.py::TestAutograd::test_leaf_assignment (PyTorch's
    check_inplace): a leaf that requires grad, or a view of one."""
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad is being "
                                           "used in an in-place operation.$"):
        x.add_(1.0)
    v = O.slice(x, index=(slice(None, 2),))
    with pytest.raises(RuntimeError, match="^a view of a leaf Variable that requires grad "
                                           "is being used in an in-place operation.$"):
        v.mul_(2.0)
    assert x._version == 0
    with no_grad():                   # allowed without grad mode: the optimizer's update
        x.sub_(1.0)
    assert x._version == 1 and x.grad_fn is None
    np.testing.assert_array_equal(x.data, [0.0, 1.0, 2.0])


def test_saved_output_modified_raises():
    """Mirrors test_autograd.py::TestAutograd::test_saved_variable_version_counter (the
    exp case): ExpBackward0 saved its result."""
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    y = O.exp(x)
    y.add_(1.0)
    assert y.grad_fn.name == "AddBackward0" and y._version == 1
    with pytest.raises(RuntimeError) as info:
        y.sum().backward()
    assert str(info.value).startswith(
        MODIFIED + ": [cpu float64 [3]], which is output 0 of Exp, is at version 1; "
                   "expected version 0 instead.")
    assert "ExpBackward0" in str(info.value)


def test_saved_input_modified_raises():
    """Mirrors test_autograd.py::TestAutograd::test_inplace (its 'modified by an inplace
    operation' check on a saved input): MulBackward0 saved y for y * y."""
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    z = y * y
    y.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"which is output 0 of Mul, is at version 1; "
                                           r"expected version 0 instead"):
        z.sum().backward()


def test_saved_leaf_input_modified_raises():
    """A saved tensor that needs no grad (a leaf): no 'which is output' part."""
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    w = t([1.0, 1.0, 1.0])
    z = x * w
    w.add_(1.0)
    with pytest.raises(RuntimeError, match=r"\[cpu float64 \[3\]\] is at version 1; "
                                           r"expected version 0 instead"):
        z.sum().backward()


def test_modifying_unsaved_input_is_fine():
    """PyTorch saves only what a formula reads (Note [What a node saved]): y = h * w with
    w constant saves w, not h, so changing h in place later is fine."""
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 1
    w = t([2.0, 3.0, 4.0])
    z = h * w
    h.add_(1.0)
    z.sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0, 3.0, 4.0])


def test_chain_of_inplace_ops_node_names_and_versions():
    """Mirrors test_autograd.py::TestAutograd::test_inplace (chains of relu_, sub_, div_,
    clamp_): each op rebases the history; ReluBackward0 saved its result at version 1,
    so the later ops make its backward fail, at version 4 (PyTorch's numbers)."""
    x = t([1.0, -1.0, 2.0], requires_grad=True)
    y = x * 1
    y.relu_()
    assert y.grad_fn.name == "ReluBackward0"
    assert y.grad_fn.next_functions()[0][0].name == "MulBackward0"
    y.sub_(1.0)
    y.div_(2.0)
    y.clamp_(0.0, 1.0)
    assert y.grad_fn.name == "ClampBackward1"
    with pytest.raises(RuntimeError, match="output 0 of Relu, is at version 4; expected "
                                           "version 1 instead"):
        y.sum().backward()


def test_inplace_gradients_match_pytorch():
    """Mirrors test_autograd.py::TestAutograd::test_inplace (gradients through mul_
    and add_ with alpha); numbers from PyTorch 2.13."""
    x = t([1.0, -2.0, 3.0], requires_grad=True)
    w = t([2.0, 3.0, 4.0], requires_grad=True)
    y = x * 1
    y.mul_(w)
    y.add_(w, alpha=2)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(w.grad, [3.0, 0.0, 5.0])

    a = t([1.0, 1.0, 1.0], requires_grad=True)
    b = a * 1
    b.mul_(b)                           # self as other: the old values for both
    b.sum().backward()
    np.testing.assert_array_equal(a.grad, [2.0, 2.0, 2.0])


def test_inplace_functions_of_ops_module():
    """gradcli.ops.relu_ and friends are the Tensor methods; Python's ``*=`` is ``mul_``."""
    x = t([1.0, -2.0], requires_grad=True)
    y = x * 1
    y *= 3.0
    assert y.grad_fn.name == "MulBackward0" and y._version == 1
    same = O.relu_(y)
    assert same is y and y.grad_fn.name == "ReluBackward0" and y._version == 2
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 0.0])


def test_inplace_cast_rules():
    """PyTorch's in-place cast rule: a float result cannot go into an int tensor."""
    i = Tensor(np.array([1, 2], dtype=np.int64))
    with pytest.raises(RuntimeError, match="^result type Double can't be cast to the desired "
                                           "output type Long$"):
        i.mul_(np.array(1.5))
    f = Tensor(np.ones(2, dtype=np.float32))
    f.add_(np.ones(2, dtype=np.float64))
    assert f.dtype == np.float32 and f._version == 1


def test_inplace_on_view_copy_slices():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_of_view / test_
    inplace_on_view_backward: an in-place op on a slice of a non-leaf rebases the
    base's history onto CopySlices; gradients as PyTorch's (x.grad = [1, 3, 3])."""
    x = t([1.0, 1.0, 1.0], requires_grad=True)
    y = x * 1
    v = O.slice(y, index=(slice(1, None),))
    v.mul_(3.0)
    assert y.grad_fn.name == "CopySlices" and v.grad_fn.name == "AsStridedBackward0"
    assert y._version == 1 and v._version == 1
    np.testing.assert_array_equal(y.data, [1.0, 3.0, 3.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [1.0, 3.0, 3.0])


def test_inplace_on_transposed_view_copy_slices():
    """Mirrors test_autograd.py::TestAutograd::test_inplace_on_view_python (a transpose
    view): gradients for the base and for ``other`` as PyTorch 2.13 computes them."""
    xv = np.arange(6.0).reshape(2, 3) - 2.0
    wv = np.arange(6.0).reshape(3, 2)
    x = t(xv, requires_grad=True)
    w = t(wv, requires_grad=True)
    y = x * 1
    v = O.transpose(y)
    v.mul_(w)
    (y * 2).sum().backward()
    np.testing.assert_array_equal(x.grad, 2 * wv.T)
    np.testing.assert_array_equal(w.grad, 2 * xv.T)


def test_view_saved_output_modified_raises():
    """An in-place op on a view whose node saved its result, then another in-place op:
    PyTorch's 'output 0 of Relu, is at version 2; expected version 1'."""
    x = t(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = x * 1
    v = O.transpose(y)
    v.relu_()
    v.mul_(t(np.ones((3, 2))))
    with pytest.raises(RuntimeError, match="output 0 of Relu, is at version 2; expected "
                                           "version 1 instead"):
        (y * y).sum().backward()


@pytest.mark.timeout(60)
def test_inplace_on_separate_graphs_concurrently():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_simple_backward (each
    thread its own graph) with in-place ops in each graph: versions are per tensor."""
    errors = []

    def work(seed):
        try:
            for _ in range(20):
                x = t(np.full(4, float(seed)), requires_grad=True)
                y = x * 2
                y.mul_(3.0)
                y.add_(1.0)
                y.relu_()
                y.sum().backward()
                np.testing.assert_array_equal(x.grad, np.full(4, 6.0))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads)
    assert not errors, errors[0]


@pytest.mark.timeout(60)
def test_version_check_fails_in_each_concurrent_backward():
    """Mirrors test_autograd.py::TestMultithreadAutograd::test_simple_backward_same_input
    with a saved tensor modified in place: every thread's backward of the shared graph
    fails with the version error, none computes a wrong gradient."""
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    y = O.exp(x)
    z = y.sum()
    y.mul_(2.0)
    messages = []
    lock = threading.Lock()

    def work():
        try:
            grad(z, x, retain_graph=True)
        except RuntimeError as exc:
            with lock:
                messages.append(str(exc))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads)
    assert len(messages) == 6 and all(m.startswith(MODIFIED) for m in messages)


def test_view_of_base_changed_in_place_regenerates_its_history():
    """PyTorch regenerates a view's grad_fn when its base changed (the grad_fn of a view
    in variable.cpp; torch 2.13 on the same code gives these numbers): a view made
    before an in-place op on its base reads the new values, and its gradient goes
    through the in-place op (AsStridedBackward0): a.grad = [2, 2, 0], not [1, 1, 0]."""
    a = t([1.0, 2.0, 3.0], requires_grad=True)
    x = a * 1
    v = O.slice(x, index=(slice(0, 2),))
    x.mul_(2.0)
    np.testing.assert_array_equal(v.data, [2.0, 4.0])
    s = v.sum()
    assert v.grad_fn.name == "AsStridedBackward0"
    s.backward()
    np.testing.assert_array_equal(a.grad, [2.0, 2.0, 0.0])


def test_sibling_view_sees_copy_slices():
    """An in-place op on one view rebases the base (CopySlices); a sibling view made
    before it regenerates its history from the new one (PyTorch: a.grad = [2, 6, 3])."""
    a = t([1.0, 2.0, 3.0], requires_grad=True)
    x = a * 1
    v = O.slice(x, index=(slice(0, 2),))
    w = O.slice(x, index=(slice(1, 3),))
    w.mul_(3.0)
    (v.sum() + x.sum()).backward()
    np.testing.assert_array_equal(a.grad, [2.0, 6.0, 3.0])
