"""``gradcli.autograd.Function``: user-defined functions, as ``torch.autograd.Function``.

Each test names the PyTorch test (``test/test_autograd.py``) or the PyTorch
source whose behaviour it mirrors. gradcli's one convention on top (Note
[Function arrays and Tensors] in gradcli/autograd/function.py): ``forward``
receives raw arrays, ``backward`` raw gradients unless the backward runs
with grad mode on (``create_graph``), where it gets Tensors.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradcli.autograd as autograd
import gradcli.ops as O
from gradcli.autograd import (Function, Tensor, backward, enable_grad, grad, is_grad_enabled,
                              no_grad)
from gradcli.autograd.node import ERR_BACKWARD_TWICE
from gradcli.devices import device, device_of, to_device


def leaf(*shape, seed=0):
    return Tensor(np.random.default_rng(seed).standard_normal(shape), requires_grad=True)


class MyFunction(Function):
    """test_autograd.py::TestAutograd::test_function's function."""

    @staticmethod
    def forward(ctx, tensor1, pyscalar, tensor2):
        ctx.pyscalar = pyscalar
        ctx.save_for_backward(tensor1, tensor2)
        return tensor1 + pyscalar * tensor2 + tensor1 * tensor2

    @staticmethod
    def backward(ctx, grad_output):
        var1, var2 = ctx.saved_tensors
        return (grad_output + grad_output * var2, None,
                grad_output * ctx.pyscalar + grad_output * var1)


def test_function():
    """Mirrors test_autograd.py::TestAutograd::test_function (and _function_test):
    a create_graph backward through a custom function, seeded with a Tensor that
    requires grad, gives gradients that carry grad_fns."""
    x, y = leaf(5, 5), leaf(5, 5, seed=1)
    result = MyFunction.apply(x, 2, y)
    assert result.grad_fn.name == "MyFunctionBackward"
    assert type(result.grad_fn).__name__ == "MyFunctionBackward"
    go = Tensor(np.ones(()), requires_grad=True)
    result.sum().backward(go, create_graph=True)
    np.testing.assert_allclose(x.grad.data, y.data + 1)
    np.testing.assert_allclose(y.grad.data, x.data + 2)
    assert x.grad.grad_fn is not None
    assert y.grad.grad_fn is not None
    # and they are right: d(sum x.grad)/dy = 1 per element, d/dgo = x.grad's values
    gy, ggo = grad([x.grad.sum()], [y, go])
    np.testing.assert_allclose(gy, np.ones((5, 5)))
    np.testing.assert_allclose(ggo, (y.data + 1).sum())


def test_function_without_create_graph_sees_raw_arrays():
    """Without create_graph, backward and saved_tensors are raw arrays (the hot path)."""
    seen = {}

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen["forward"] = (type(x), is_grad_enabled())
            ctx.save_for_backward(x)
            return x * 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            seen["backward"] = (type(g), type(x), is_grad_enabled())
            return g * 3

    x = leaf(4)
    Probe.apply(x).sum().backward()
    assert seen["forward"] == (np.ndarray, False)
    assert seen["backward"] == (np.ndarray, np.ndarray, False)
    np.testing.assert_array_equal(x.grad, np.full(4, 3.0))
    x.grad = None
    Probe.apply(x).sum().backward(create_graph=True)
    assert seen["backward"][1:] == (Tensor, True)


def test_needs_input_grad():
    """ctx.needs_input_grad (torch.autograd.function.FunctionCtx): one bool per input,
    keyword arguments counted after the positional ones, as PyTorch 2.13's apply."""
    seen = []

    class Scale(Function):
        @staticmethod
        def forward(ctx, x, w, k=1.0):
            seen.append(ctx.needs_input_grad)
            return x * w * k

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    x, w = leaf(3), Tensor(np.ones(3))
    out = Scale.apply(x, w, k=2.0)
    np.testing.assert_array_equal(out.data, x.data * 2)
    Scale.apply(w, x)
    with no_grad():
        y = Scale.apply(x, w)
    assert seen == [(True, False, False), (False, True), (True, False)]
    assert not y.requires_grad and y.grad_fn is None
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, np.ones(3))


def test_incorrect_number_of_gradients():
    """PyTorch's PyNode::apply errors (python_function.cpp), word for word."""
    class Two(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g

    x = leaf(3)
    with pytest.raises(RuntimeError) as err:
        Two.apply(x, x).sum().backward()
    assert str(err.value) == ("function TwoBackward returned an incorrect number of gradients "
                              "(expected 2, got 1)")

    class TooMany(Function):
        @staticmethod
        def forward(ctx, a):
            return a.copy()

        @staticmethod
        def backward(ctx, g):
            return g, None, None          # extra Nones are dropped

    TooMany.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad, np.ones(3))

    class NonTensor(Function):
        @staticmethod
        def forward(ctx, a, k):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g * 2, g

    with pytest.raises(RuntimeError) as err:
        NonTensor.apply(x, 2).sum().backward()
    assert str(err.value) == (
        "function NonTensorBackward returned a gradient different than None at position 2, "
        "but the corresponding forward input was not a Variable")


def test_materialize_grads():
    """Mirrors test_autograd.py::TestAutograd::test_materialize_grads: an output with no
    gradient reaches backward as zeros."""
    seen = []

    class TwoOut(Function):
        @staticmethod
        def forward(ctx, x):
            return x.copy(), x * 2

        @staticmethod
        def backward(ctx, ga, gb):
            seen.append(gb)
            return ga + 2 * gb

    x = leaf(3)
    a, _ = TwoOut.apply(x)
    a.sum().backward()
    np.testing.assert_array_equal(seen[0], np.zeros(3))
    np.testing.assert_array_equal(x.grad, np.ones(3))


def test_dont_materialize_grads():
    """Mirrors test_autograd.py::TestAutograd::test_dont_materialize_grads."""
    seen = []

    class TwoOut(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x.copy(), x * 2

        @staticmethod
        def backward(ctx, ga, gb):
            seen.append(gb)
            return ga

    x = leaf(3)
    a, _ = TwoOut.apply(x)
    a.sum().backward()
    assert seen == [None]


def test_mark_non_differentiable():
    """Mirrors test_autograd.py::TestAutograd::test_mark_non_differentiable."""
    class Mask(Function):
        @staticmethod
        def forward(ctx, x):
            output = x > 0
            ctx.mark_non_differentiable(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * 0

    x = leaf(5, 5)
    mask = Mask.apply(x)
    assert not mask.requires_grad and mask.grad_fn is None
    y = O.where(mask, np.zeros((), x.dtype), x)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, (x.data <= 0).astype(float))


def test_mark_non_differentiable_mixed():
    """Mirrors test_autograd.py::TestAutograd::test_mark_non_differentiable_mixed."""
    seen = []

    class MyFn(Function):
        @staticmethod
        def forward(ctx, x):
            a = x + 1
            b = x + 2
            ctx.mark_non_differentiable(a)
            return a, b

        @staticmethod
        def backward(ctx, grad_a, grad_b):
            seen.append(((grad_a == 0).all(), (grad_b == 1).all()))
            return grad_b

    x = leaf(5, 5)
    a, b = MyFn.apply(x)
    assert not a.requires_grad
    assert b.requires_grad
    b.sum().backward()
    assert seen == [(True, True)]
    np.testing.assert_array_equal(x.grad, np.ones((5, 5)))


def test_mark_non_differentiable_none():
    """Mirrors test_autograd.py::TestAutograd::test_mark_non_differentiable_none."""
    class MyFn(Function):
        @staticmethod
        def forward(ctx, x):
            output = x.copy()
            ctx.mark_non_differentiable(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            return None

    x = leaf(5, 5)
    r = MyFn.apply(x * x)
    (r * x).sum().backward()
    np.testing.assert_array_equal(x.grad, x.data * x.data)


def test_ctx_attributes_and_saved_tensors_released():
    """Attributes stored on ctx reach backward; saved tensors are freed with the graph
    (test_autograd.py::TestAutograd::test_backward_twice_with_saved_values for a Function),
    and a Function that saved nothing can run its backward twice."""
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.power = 3
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * ctx.power * x ** (ctx.power - 1)

    x = leaf(3)
    y = Cube.apply(x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad, 3 * x.data ** 2)
    with pytest.raises(RuntimeError) as err:
        y.backward()
    assert str(err.value) == ERR_BACKWARD_TWICE

    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x.grad = None
    y = Double.apply(x).sum()
    y.backward()
    y.backward()
    np.testing.assert_array_equal(x.grad, np.full(3, 4.0))


def test_saved_output_unpacks_with_this_node_as_grad_fn():
    """An output given to save_for_backward is unpacked (with create_graph) as a Tensor
    whose grad_fn is the function's own node (SavedVariable's is_output), so the second
    derivative of exp written with its saved result is right."""
    class Exp(Function):
        @staticmethod
        def forward(ctx, x):
            y = np.exp(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            if is_grad_enabled():
                assert y.grad_fn is ctx
            return O.mul(g, y)

    x = leaf(4)
    out = Exp.apply(x)
    (g,) = grad([out.sum()], [x], create_graph=True)
    np.testing.assert_allclose(g.data, np.exp(x.data))
    (gg,) = grad([g.sum()], [x])
    np.testing.assert_allclose(gg, np.exp(x.data))


def test_custom_function_exception():
    """Mirrors test_autograd.py::TestAutograd::test_custom_function_exception: errors in
    forward and backward reach the caller as they were raised, with a note naming the
    function; the engine tags the failing node."""
    class SimulateError(Exception):
        pass

    class FailForward(Function):
        @staticmethod
        def forward(ctx, x):
            raise SimulateError("Simulate error on forward pass")

        @staticmethod
        def backward(ctx, g):
            return g

    class FailBackward(Function):
        @staticmethod
        def forward(ctx, x):
            return x.copy()

        @staticmethod
        def backward(ctx, g):
            raise SimulateError("Simulate error on backward pass")

    x = leaf(3)
    with pytest.raises(SimulateError, match="Simulate error on forward pass") as err:
        FailForward.apply(x)
    assert any("FailForward.forward" in n for n in err.value.__notes__)
    out = FailBackward.apply(x)
    with pytest.raises(SimulateError, match="Simulate error on backward pass") as err:
        out.sum().backward()
    assert any("FailBackwardBackward" in n for n in err.value.__notes__)
    assert err.value.gradcli_node is out.grad_fn


def test_grad_mode_restored_reentrant():
    """Mirrors test_autograd.py::TestAutograd::test_grad_mode_restored_reentrant."""
    checks = []

    class MyFn(Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.copy()

        @staticmethod
        def backward(ctx, go):
            original = is_grad_enabled()
            with enable_grad():
                checks.append(is_grad_enabled())
                foo = Tensor(np.random.default_rng(0).random(go.shape), requires_grad=True)
                (g,) = grad([foo ** 3], [foo], grad_outputs=[go])
                checks.append(is_grad_enabled())
            checks.append(is_grad_enabled() == original)
            return g

    inp = leaf(3)
    MyFn.apply(inp).sum().backward()                    # original == False
    MyFn.apply(inp).sum().backward(create_graph=True)   # original == True
    assert checks == [True] * 6
    assert is_grad_enabled()


def test_simple_reentrant():
    """Mirrors test_autograd.py::TestAutograd::test_simple_reentrant."""
    y_data = np.random.default_rng(1).standard_normal((2, 2))

    class Reenter(Function):
        @staticmethod
        def forward(ctx, x):
            with enable_grad():
                ctx.x = Tensor(x.copy(), requires_grad=True)
                ctx.y = Tensor(y_data, requires_grad=True)
                ctx.output_var = ctx.x * ctx.y
            return ctx.output_var.data.copy()

        @staticmethod
        def backward(ctx, grad_output):
            with enable_grad():
                ctx.output_var.sum().backward()
            return ctx.x.grad * grad_output

    x = leaf(2, 2)
    out = Reenter.apply(x)
    out.sum().backward()
    np.testing.assert_allclose(x.grad, y_data)


def test_reentrant_child_error():
    """Mirrors test_autograd.py::TestAutograd::test_reentrant_child_error: an error in a
    reentrant backward reaches the parent's caller."""
    class ReentrantFunc(Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.copy()

        @staticmethod
        def backward(ctx, go):
            with enable_grad():
                t = Tensor(np.ones(3), requires_grad=True)
                O.fail(t, message="Simulate error").sum().backward()
            return go

    a = leaf(3)
    d = ReentrantFunc.apply(a) * 2
    with pytest.raises(RuntimeError, match="Simulate error"):
        d.sum().backward()


def test_deep_reentrant():
    """Mirrors test_autograd.py::TestAutograd::test_deep_reentrant (shallower: 300
    levels, past the engine's 60-level limit, so the reentrant pool takes over)."""
    class DeepReentrant(Function):
        @staticmethod
        def forward(ctx, x):
            with enable_grad():
                ctx.x = Tensor(x.copy(), requires_grad=True) - 1
            return ctx.x.data.copy()

        @staticmethod
        def backward(ctx, x):
            if ctx.x.data < 0:
                return x
            with enable_grad():
                DeepReentrant.apply(ctx.x).sum().backward()
            return x

    v = Tensor(np.array(300.0), requires_grad=True)
    DeepReentrant.apply(v).sum().backward()
    np.testing.assert_array_equal(v.grad, 1.0)
    v2 = Tensor(np.array(70.0), requires_grad=True)
    DeepReentrant.apply(v2).sum().backward()
    np.testing.assert_array_equal(v2.grad, 1.0)


def test_reentrant_higher_order_in_backward():
    """A backward that calls grad(..., create_graph=True) (reentrant and higher order):
    its gradient is the Hessian-vector product of an inner function."""
    class HessVec(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.copy()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            with enable_grad():
                xt = Tensor(np.array(x.data if isinstance(x, Tensor) else x), requires_grad=True)
                (gx,) = grad([O.sin(xt).sum()], [xt], create_graph=True)
                assert gx.grad_fn is not None
                (hv,) = grad([gx], [xt], grad_outputs=[g.data if isinstance(g, Tensor) else g])
            return hv

    x = leaf(4)
    HessVec.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad, -np.sin(x.data))


@pytest.mark.timeout(60)
def test_function_on_device_thread_reentrant():
    """A Function whose output lives on sim:0 runs its backward on that device's thread,
    and a reentrant backward from there works (its gradient 2 * g comes from it)."""
    threads = []

    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            threads.append(threading.current_thread().name)
            with enable_grad():
                t = Tensor(g.copy(), requires_grad=True)
                (inner,) = grad([O.mul(t, t).sum()], [t], grad_outputs=[np.ones(())])
            return inner          # d/dt sum(t * t) = 2 * t = 2 * g

    x = Tensor(to_device(np.arange(3.0), device("sim:0")), requires_grad=True)
    out = Double.apply(x)
    assert str(out.device) == "sim:0" and str(out.grad_fn.device) == "sim:0"
    out.sum().backward()
    assert threads and threads[0].startswith("gradcli-device")
    assert str(device_of(x.grad)) == "sim:0"
    np.testing.assert_allclose(np.asarray(x.grad), np.full(3, 2.0))


def test_function_base_class_errors():
    """Function itself cannot be applied; a subclass without backward says so."""
    with pytest.raises(RuntimeError, match="subclass"):
        Function.apply(leaf(2))

    class NoBackward(Function):
        @staticmethod
        def forward(ctx, x):
            return x.copy()

    with pytest.raises(NotImplementedError, match="backward"):
        NoBackward.apply(leaf(2)).sum().backward()


def test_function_is_exported():
    assert autograd.Function is Function
    assert "Function" in autograd.__all__


def test_as_function_wraps_a_plain_class():
    """A class shaped like torch.autograd.Function that does not subclass gradcli's
    (what a graph file's custom op names) runs through as_function, keeping its name."""
    class Square:
        @staticmethod
        def forward(ctx, x, scale=1.0):
            ctx.save_for_backward(x)
            ctx.scale = scale
            return x * x * scale

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x * ctx.scale, None

    fn = autograd.as_function(Square)
    assert issubclass(fn, Function) and fn.__name__ == "Square"
    assert autograd.as_function(MyFunction) is MyFunction
    x = leaf(3)
    out = fn.apply(x, scale=3.0)
    assert out.grad_fn.name == "SquareBackward"
    (g,) = grad([out.sum()], [x], create_graph=True)
    np.testing.assert_allclose(g.data, 6 * x.data)
    (gg,) = grad([g.sum()], [x])
    np.testing.assert_allclose(gg, np.full(3, 6.0))

    class NotAFunction:
        @staticmethod
        def forward(ctx, x):
            return x

    with pytest.raises(TypeError, match="no backward method"):
        autograd.as_function(NotAFunction)


def test_reentrant_create_graph_inside_create_graph_backward():
    """The outer backward runs with create_graph and the node's backward calls
    grad(..., create_graph=True) on the saved input (a Tensor here): the gradient it
    returns carries that inner graph, so a second derivative goes through both."""
    class SinViaGrad(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return np.sin(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            assert isinstance(x, Tensor) and is_grad_enabled()
            (gx,) = grad([O.sin(x)], [x], grad_outputs=[g], create_graph=True)
            return gx

    x = leaf(4)
    (g,) = grad([SinViaGrad.apply(x).sum()], [x], create_graph=True)
    np.testing.assert_allclose(g.data, np.cos(x.data))
    assert g.grad_fn is not None
    (gg,) = grad([g.sum()], [x])
    np.testing.assert_allclose(gg, -np.sin(x.data))
