"""Hook results and grad-mode switches behave as PyTorch 2.13's (python_hook.cpp,
torch/autograd/grad_mode.py, torch/autograd/__init__.py). Each test names the PyTorch
test it mirrors, or says that it checks a behaviour PyTorch's code has (no test of its own).
Messages are PyTorch's; where gradcli names a dtype or device its own way, the test says so.
"""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import (Tensor, backward, enable_grad, grad, is_grad_enabled,
                              is_multithreading_enabled, no_grad, set_grad_enabled,
                              set_multithreading_enabled)


def leaf(shape=(3,), dtype=np.float64):
    return Tensor(np.ones(shape, dtype=dtype), requires_grad=True)


# -- tensor hooks ------------------------------------------------------------------
def test_hook_changes_size_raises():
    """Mirrors test_autograd.py::TestAutograd::test_hooks (the 'has changed the size
    of value' check of python_hook.cpp's check_single_result)."""
    a = leaf()
    b = a * 2

    def myhook(g):
        return np.ones(4)

    b.register_hook(myhook)
    with pytest.raises(RuntimeError, match="^hook 'myhook' has changed the size of value$"):
        b.sum().backward()
    assert a.grad is None


def test_hook_changes_dtype_raises_never_a_wrong_grad():
    """python_hook.cpp's check_variable_result: a float32 gradient for a float64 leaf
    is refused (gradcli names the dtype and device its own way: 'cpu float64')."""
    a = leaf()

    def myhook(g):
        return g.astype(np.float32)

    a.register_hook(myhook)
    with pytest.raises(RuntimeError, match=r"^hook 'myhook' has changed the type of value "
                                           r"\(was cpu float64 got cpu float32\)$"):
        (a * 2).sum().backward()
    assert a.grad is None


@pytest.mark.parametrize("value, kind", [((1.0, 2.0), "tuple"), (3, "int"), ([1.0], "list")])
def test_hook_returns_non_tensor_type_error(value, kind):
    """Mirrors test_autograd.py::TestAutograd::test_hook_none / python_hook.cpp: a tensor
    hook returns None or a Tensor; anything else is a TypeError naming what it was."""
    a = leaf()
    a.register_hook(lambda g: value)
    with pytest.raises(TypeError, match=f"^expected Variable, but hook returned '{kind}'$"):
        (a * 2).sum().backward()


def test_hook_returning_gradcli_tensor_is_its_array():
    """Mirrors test_autograd.py::TestAutograd::test_hooks (a hook returns ``grad * 2``
    as a Tensor): the leaf gets the Tensor's values as its gradient."""
    a = leaf()
    a.register_hook(lambda g: Tensor(g * 3))
    (a * 2).sum().backward()
    assert type(a.grad) is np.ndarray
    np.testing.assert_array_equal(a.grad, np.full(3, 6.0))


def test_hook_name_unknown_for_callable_object():
    """python_hook.cpp's hook_name: an object without ``__name__`` is '<unknown>'."""
    class Hook:
        def __call__(self, g):
            return np.ones(5)

    a = leaf()
    b = a * 2
    b.register_hook(Hook())
    with pytest.raises(RuntimeError, match="^hook '<unknown>' has changed the size of value$"):
        b.sum().backward()


# -- node hooks --------------------------------------------------------------------
def test_prehook_wrong_number_of_values():
    """Mirrors test_autograd.py::TestAutograd::test_hooks_cpp / python_hook.cpp's
    check_result: a node pre-hook returns as many values as it was given."""
    a = leaf()
    b = a * 2
    b.grad_fn.register_prehook(lambda gs: (gs[0], gs[0]))
    with pytest.raises(RuntimeError, match=r"^hook '<lambda>' has returned an incorrect "
                                           r"number of values \(got 2, but expected 1\)$"):
        b.sum().backward()


def test_posthook_one_value_for_two_inputs_raises():
    """python_hook.cpp's check_result: a post-hook returning one gradient for two inputs
    is refused (it used to drop the second input's gradient silently)."""
    a, c = leaf(), leaf()
    b = a * c
    b.grad_fn.register_hook(lambda gi, go: (gi[0],))
    with pytest.raises(RuntimeError, match=r"^hook '<lambda>' has returned an incorrect "
                                           r"number of values \(got 1, but expected 2\)$"):
        b.sum().backward()
    assert c.grad is None


def test_posthook_cannot_fill_none_gradient():
    """python_hook.cpp's check_result: "can't replace a None gradient"."""
    a = leaf()
    c = Tensor(np.ones(3))
    b = a * c
    b.grad_fn.register_hook(lambda gi, go: (gi[0], np.ones(3)))
    with pytest.raises(RuntimeError, match="^can't replace a None gradient with a non-None "
                                           "value$"):
        b.sum().backward()


def test_posthook_may_drop_a_gradient():
    """python_hook.cpp: a post-hook may replace a gradient with None."""
    a, c = leaf(), leaf()
    b = a * c
    b.grad_fn.register_hook(lambda gi, go: (gi[0], None))
    b.sum().backward()
    np.testing.assert_array_equal(a.grad, np.ones(3))
    assert c.grad is None


@pytest.mark.parametrize("value, kind", [(lambda gs: gs[0], "ndarray"),
                                         (lambda gs: list(gs), "list")])
def test_prehook_must_return_tuple(value, kind):
    """python_hook.cpp's check_result: 'expected tuple, but hook returned ...'."""
    a = leaf()
    b = a * 2
    b.grad_fn.register_prehook(value)
    with pytest.raises(TypeError, match=f"^expected tuple, but hook returned '{kind}'$"):
        b.sum().backward()


def test_node_hooks_check_size_and_dtype():
    """python_hook.cpp: node pre- and post-hook values get check_variable_result."""
    a = leaf()
    b = a * 2

    def ph(gs):
        return (np.ones(4),)

    b.grad_fn.register_prehook(ph)
    with pytest.raises(RuntimeError, match="^hook 'ph' has changed the size of value$"):
        b.sum().backward()

    a2, c2 = leaf(), leaf()
    d = a2 * c2

    def post(gi, go):
        return (gi[0].astype(np.float32), gi[1])

    d.grad_fn.register_hook(post)
    with pytest.raises(RuntimeError, match="^hook 'post' has changed the type of value"):
        d.sum().backward()


# -- grad modes -------------------------------------------------------------------
def test_set_grad_enabled_as_function():
    """torch/autograd/grad_mode.py's set_grad_enabled (a plain call changes the mode;
    as a context manager it restores the previous one); no test of its own in
    test_autograd.py."""
    x = leaf()
    try:
        set_grad_enabled(False)
        assert not is_grad_enabled()
        assert not (x * 2).requires_grad
        with set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not is_grad_enabled()
    finally:
        set_grad_enabled(True)
    assert is_grad_enabled()


def test_grad_mode_decorators():
    """Mirrors test_autograd.py::TestAutograd::test_no_grad and
    test_enable_grad_decorator_no_paren (the decorators), and set_grad_enabled's
    decorator use from grad_mode.py."""
    x = leaf()

    @no_grad()
    def f(t):
        return t * 2

    @enable_grad()
    def g(t):
        return t * 2

    @set_grad_enabled(False)
    def h(t):
        return t * 2

    assert is_grad_enabled()          # making the decorator changed nothing
    assert not f(x).requires_grad
    with no_grad():
        assert g(x).requires_grad
    assert not h(x).requires_grad
    assert is_grad_enabled()
    ng = no_grad()                    # no_grad acts when its block is entered
    assert is_grad_enabled()
    with ng:
        assert not is_grad_enabled()
    assert is_grad_enabled()


def test_set_multithreading_enabled_as_function():
    """torch/autograd/grad_mode.py's set_multithreading_enabled (no test of its own in
    test_autograd.py): it acts when called, restores after a ``with`` block, and
    is_multithreading_enabled reports it."""
    assert is_multithreading_enabled()
    try:
        set_multithreading_enabled(False)
        assert not is_multithreading_enabled()
        with set_multithreading_enabled(True):
            assert is_multithreading_enabled()
        assert not is_multithreading_enabled()
    finally:
        set_multithreading_enabled(True)
    assert is_multithreading_enabled()


@pytest.mark.timeout(30)
def test_grad_mode_is_thread_local():
    """Grad mode is thread-local state, as PyTorch's GradMode (the premise of
    test_autograd.py::TestMultithreadAutograd's tests)."""
    seen = []
    set_grad_enabled(False)
    try:
        t = threading.Thread(target=lambda: seen.append(is_grad_enabled()))
        t.start()
        t.join(10)
    finally:
        set_grad_enabled(True)
    assert seen == [True]


# -- grad() / backward() -----------------------------------------------------------
def test_grad_materialize_grads():
    """Mirrors test_autograd.py::TestAutograd::test_grad_materialize_grads."""
    x = leaf()
    y = leaf()
    z = x * 2
    gx, gy = grad(z.sum(), [x, y], materialize_grads=True)
    np.testing.assert_array_equal(gx, np.full(3, 2.0))
    np.testing.assert_array_equal(gy, np.zeros(3))
    with pytest.raises(ValueError, match="Expected allow_unused to be True or not passed "
                                         "when materialize_grads=True"):
        grad((x * 2).sum(), [x, y], allow_unused=False, materialize_grads=True)


def test_grad_mismatch_in_shape():
    """Mirrors the shape-mismatch part of test_autograd.py::TestAutograd::
    test_grad_batched_grad (gradcli writes shapes as lists, PyTorch as torch.Size)."""
    a = leaf()
    b = a * 2
    msg = (r"^Mismatch in shape: grad_output\[0\] has a shape of \[4\] and output\[0\] has "
           r"a shape of \[3\]\.$")
    with pytest.raises(RuntimeError, match=msg):
        grad(b, a, np.ones(4), retain_graph=True)
    with pytest.raises(RuntimeError, match=msg):
        b.backward(np.ones(4), retain_graph=True)
    with pytest.raises(RuntimeError, match=r"grad_output\[0\] has a shape of \[2, 3\]"):
        b.backward(np.ones((2, 3)))       # never summed down to the output's shape


def test_retain_grad_cycle():
    """Mirrors test_autograd.py::TestAutograd::test_retain_grad_cycle. gradcli differs:
    a node that saves its input keeps that Tensor object itself (Note [Saved tensors]),
    so the graph here is built with ``add`` (which saves nothing); the retain_grad hook
    itself holds the tensor weakly."""
    x = Tensor(np.ones((5, 5)), requires_grad=True)

    def run_test():
        y = x * 2
        y.retain_grad()
        return y + 1, weakref.ref(y)

    z, ref = run_test()
    gc.collect()
    assert ref() is None
    z.sum().backward()
    np.testing.assert_array_equal(x.grad, np.full((5, 5), 2.0))
