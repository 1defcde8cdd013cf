"""Saved-tensor hooks (gradcli.autograd.graph), as PyTorch's torch.autograd.graph: each
test names the test of test/test_autograd.py it mirrors, or the rule of PyTorch's it
checks. What is packed, in which order, and the messages were checked with torch 2.13
on the same code."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import Function, Tensor, grad
from gradcli.autograd.graph import disable_saved_tensors_hooks, saved_tensors_hooks


def leaf(values):
    return Tensor(np.array(values, dtype=np.float64), requires_grad=True)


def test_pack_only_what_pytorch_saves_in_order():
    """PyTorch's packing order, checked with torch 2.13 on the same code: MulBackward0 saves self and other (in that order),
    ExpBackward0 only its result; unpack runs once per saved tensor in the backward."""
    a = leaf([1.0, 1.0, 1.0])
    log = []

    def pack(x):
        log.append(("pack", x is a))
        return ("p", x)

    def unpack(p):
        log.append("unpack")
        return p[1]

    with saved_tensors_hooks(pack, unpack):
        y = a * a
        z = O.exp(y)
    assert log == [("pack", True), ("pack", True), ("pack", False)]
    z.sum().backward()
    assert log[3:] == ["unpack"] * 3
    np.testing.assert_allclose(a.grad, np.full(3, 2 * np.e))


def test_unpack_result_is_what_backward_uses():
    """torch/autograd/graph.py's rule (what pack returns is what unpack gets; unpack's
    value is what the backward uses), checked with torch 2.13: a.grad == 4."""
    a = leaf([1.0, 1.0, 1.0])
    with saved_tensors_hooks(lambda x: x * 2, lambda p: p):
        y = a * a
    y.sum().backward()
    np.testing.assert_array_equal(a.grad, [4.0, 4.0, 4.0])


def test_offload_to_float16_and_back():
    """An offloading pair of hooks: the node keeps only the packed copy."""
    x = leaf([0.5, 1.0, 2.0])
    packed = []

    def pack(t):
        packed.append(t.data.astype(np.float16))
        return len(packed) - 1

    def unpack(i):
        return Tensor(packed[i].astype(np.float64))

    with saved_tensors_hooks(pack, unpack):
        y = O.exp(x)
    assert type(y.grad_fn.saved) is not tuple        # nothing but the packed handle
    y.sum().backward()
    np.testing.assert_allclose(x.grad, np.exp([0.5, 1.0, 2.0]), rtol=1e-3)


def test_unpack_must_return_tensor():
    """PyTorch's TypeError for an unpack hook that returns no Tensor (torch 2.13's
    message on the same code)."""
    a = leaf([1.0, 2.0])
    with saved_tensors_hooks(lambda x: x, lambda p: 5):
        y = a * a
    with pytest.raises(TypeError, match="^Output of saved tensor unpack_hook expected to be "
                                        "a Tensor but got result of type int$"):
        y.sum().backward()


def test_pack_hook_modifying_input_in_place_raises():
    """Mirrors test_autograd.py::TestAutograd::test_pack_hook_with_inplace_modification_
    should_fail."""
    a = leaf([1.0, 2.0])

    def pack(x):
        x.add_(1.0)
        return x

    with saved_tensors_hooks(pack, lambda p: p):
        with pytest.raises(RuntimeError, match="^A saved tensor pack hook is modifying its "
                                               "input in place"):
            O.exp(a)


def test_disable_saved_tensors_hooks():
    """torch/autograd/graph.py's disable_saved_tensors_hooks (torch 2.13 on the same
    code): entering hooks, or saving under hooks, inside it raises its message."""
    with disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="^no hooks here$"):
            with saved_tensors_hooks(lambda x: x, lambda x: x):
                pass
        a = leaf([1.0])
        (a * a).sum().backward()                 # no hooks: saving is fine
    with saved_tensors_hooks(lambda x: x, lambda x: x):
        # entered while hooks are active, it raises its message at once (torch 2.13:
        # SavedTensorDefaultHooks::disable with fail_if_non_empty)
        with pytest.raises(RuntimeError, match="^not while offloading$"):
            with disable_saved_tensors_hooks("not while offloading"):
                pass
    b = leaf([3.0])                              # restored on exit
    with saved_tensors_hooks(lambda x: x, lambda x: x):
        (b * b).sum().backward()
    np.testing.assert_array_equal(b.grad, [6.0])


def test_nested_hooks_innermost_applies():
    """Mirrors test_autograd.py::TestAutograd::test_setting_default_saved_variable_hooks_
    twice_should_use_inner."""
    a = leaf([1.0, 2.0])
    seen = []
    with saved_tensors_hooks(lambda x: ("outer", x), lambda p: p[1]):
        with saved_tensors_hooks(lambda x: ("inner", x), lambda p: (seen.append(p[0]), p[1])[1]):
            y = a * a
        z = y * 3.0
    (y.sum() + z.sum()).backward()
    assert seen == ["inner", "inner"]
    np.testing.assert_array_equal(a.grad, 2 * np.array([1.0, 2.0]) * 4)


def test_hooks_with_create_graph():
    """Mirrors test_autograd.py::TestAutograd::test_default_saved_variable_hooks_double_
    backward: a pack hook that detaches still gives the double backward,
    the unpacked values keep the saved tensor's place in the graph (6 * a)."""
    a = leaf([1.0, 2.0, 3.0])
    with saved_tensors_hooks(lambda x: x.detach(), lambda p: p):
        y = a * a * a
    (g,) = grad(y.sum(), a, create_graph=True)
    assert g.requires_grad
    g.sum().backward()
    np.testing.assert_array_equal(a.grad, 6 * np.array([1.0, 2.0, 3.0]))


def test_hooks_on_custom_function_saved_tensors():
    """ctx.save_for_backward goes through the hooks, as in PyTorch (torch 2.13 packs
    and unpacks once on the same code)."""
    log = []

    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x

    a = leaf([1.0, 3.0])
    with saved_tensors_hooks(lambda x: (log.append("pack"), x)[1],
                             lambda p: (log.append("unpack"), p)[1]):
        y = Square.apply(a)
    y.sum().backward()
    assert log == ["pack", "unpack"]
    np.testing.assert_array_equal(a.grad, [2.0, 6.0])


def test_custom_function_saved_tensor_version_check():
    """Mirrors test_autograd.py::TestAutograd::test_saved_variable_version_counter for a
    custom Function's saved input."""
    class Mul2(Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(w)
            return x * w

        @staticmethod
        def backward(ctx, g):
            (w,) = ctx.saved_tensors
            return g * w, None

    a = leaf([1.0, 3.0])
    w = Tensor(np.array([2.0, 2.0]))
    y = Mul2.apply(a, w)
    w.mul_(3.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation: "
                                           r"\[cpu float64 \[2\]\] is at version 1"):
        y.sum().backward()


@pytest.mark.timeout(60)
def test_hooks_are_per_thread():
    """PyTorch's saved-tensor hooks live in thread-local state (SavedTensorDefaultHooks):
    another thread's saves are not packed."""
    packed_here = []
    barrier = threading.Barrier(2)
    results = {}

    def other():
        barrier.wait(10)
        x = leaf([2.0])
        y = x * x
        y.sum().backward()
        results["other"] = x.grad.copy()

    th = threading.Thread(target=other)
    with saved_tensors_hooks(lambda x: (packed_here.append(1), x)[1], lambda p: p):
        th.start()
        barrier.wait(10)
        th.join(30)
    assert not th.is_alive()
    assert packed_here == []                     # the other thread's saves were not packed
    np.testing.assert_array_equal(results["other"], [4.0])


def test_topk_packs_its_indices_alone():
    """TopkBackward0 saves ``indices`` (derivatives.yaml: value_selecting_reduction_backward
    reads the indices and self's sizes), so PyTorch 2.13 packs one tensor, the int64
    indices, and relu_ may then change the values in place (Note [What a node saved])."""
    from gradcli.ops.aten import ATEN_OPS

    a = leaf([[3.0, -1.0, 2.0, 5.0]])
    packed = []

    def pack(x):
        packed.append((str(x.data.dtype), tuple(x.data.shape)))
        return x

    with saved_tensors_hooks(pack, lambda x: x):
        values, indices = ATEN_OPS["aten.topk.default"](a * 1.0, k=2)
    assert packed == [("int64", (1, 2))]
    values.relu_()
    (values * 2.0).sum().backward()
    np.testing.assert_array_equal(a.grad, [[2.0, 0.0, 0.0, 2.0]])
