"""Post-accumulate-grad hooks and multi-grad hooks, mirrored from PyTorch's
test/test_autograd.py (each test names the one it mirrors); call rules and messages as
PyTorch 2.13's on the same code."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from gradcli.autograd import Tensor, grad
from gradcli.autograd.graph import register_multi_grad_hook


def ones(n=3):
    return Tensor(np.ones(n), requires_grad=True)


def test_post_accumulate_grad_hook_e2e():
    """Mirrors test_autograd.py::TestAutograd::test_post_accumulate_grad_hook_e2e (an
    optimizer step inside the backward: the hook sees the accumulated .grad)."""
    w = ones()
    seen = []

    def step(p):
        seen.append(p.grad.copy())
        p.data -= 0.5 * p.grad
        p.grad = None

    h = w.register_post_accumulate_grad_hook(step)
    (w * 2).sum().backward()
    np.testing.assert_array_equal(seen[0], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(w.data, [0.0, 0.0, 0.0])
    assert w.grad is None
    grad((w * 2).sum(), w)                       # grad() accumulates nothing: no call
    assert len(seen) == 1
    h.remove()
    (w * 2).sum().backward()
    assert len(seen) == 1
    np.testing.assert_array_equal(w.grad, [2.0, 2.0, 2.0])


def test_post_accumulate_grad_hook_only_on_leaves():
    """Mirrors test_autograd.py::TestAutograd::test_post_accumulate_grad_hook_on_non_leaf
    (and a tensor that requires no grad)."""
    a = ones()
    with pytest.raises(RuntimeError, match="^post accumulate grad hooks cannot be registered "
                                           "on non-leaf tensors$"):
        (a * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="^cannot register a hook on a tensor that doesn't "
                                           "require gradient$"):
        Tensor(np.ones(2)).register_post_accumulate_grad_hook(lambda t: None)


def test_post_accumulate_grad_hook_returns_none():
    """Mirrors test_autograd.py::TestAutograd::test_post_accumulate_grad_hook_returns_not_
    None."""
    a = ones()
    a.register_post_accumulate_grad_hook(lambda t: np.ones(3))
    with pytest.raises(RuntimeError, match="^Tensor post accumulate grad hooks should return "
                                           "None.$"):
        (a * 2).sum().backward()


def test_post_accumulate_grad_hook_ordering():
    """Mirrors test_autograd.py::TestAutograd::test_post_accumulate_grad_hook_ordering:
    tensor pre-hook, AccumulateGrad pre-hook, post-accumulate hook, AccumulateGrad
    post-hook. gradcli differs in one detail: PyTorch's test reads 3 because its .grad
    *is* the (stolen) gradient the post-hook receives, so the post-accumulate hook's
    in-place ``+= 0.5`` shows in it; gradcli copies a gradient a hook replaced into .grad
    (Note [Stealing gradients]), so the post-hook sees -0.2 and .grad ends at -2."""
    tensor = ones()
    log = []

    def post_acc_grad_hook(t):
        log.append(("post_acc", float(t.grad[0])))
        t.grad += 0.5

    def acc_grad_node_post_hook(grad_in, grad_out):
        log.append(("node_post", float(grad_out[0][0])))
        tensor.grad = grad_out[0] * 10

    acc = tensor.grad_accumulator
    tensor.register_hook(lambda g: (log.append(("tensor_pre", float(g[0]))), g - 2.0)[1])
    acc.register_prehook(lambda gs: (log.append(("node_pre", float(gs[0][0]))),
                                     (gs[0] / 5.0,))[1])
    tensor.register_post_accumulate_grad_hook(post_acc_grad_hook)
    acc.register_hook(acc_grad_node_post_hook)
    tensor.sum().backward()
    assert log == [("tensor_pre", 1.0), ("node_pre", -1.0), ("post_acc", -0.2),
                   ("node_post", -0.2)]
    np.testing.assert_allclose(tensor.grad, [-2.0, -2.0, -2.0])


def test_post_accumulate_grad_hook_multiple_hooks():
    """Mirrors test_autograd.py::TestAutograd::test_post_accumulate_grad_hook_multiple_
    hooks (both run, in order)."""
    t = Tensor(np.array([0.5, 1.5, 2.5]), requires_grad=True)
    ref = t.data.copy()

    def hook1(x):
        x.data -= x.grad

    def hook2(x):
        x.data *= 4.0

    t.register_post_accumulate_grad_hook(hook1)
    t.register_post_accumulate_grad_hook(hook2)
    t.sum().backward()
    np.testing.assert_allclose(t.data, 4.0 * (ref - 1.0))


def test_multi_grad_all_hooks():
    """Mirrors test_autograd.py::TestAutograd::test_multi_grad_all_hooks: one call per
    backward with a gradient per tensor, None for those this backward does not reach;
    removing the handle stops the calls. (PyTorch refuses a leaf under grad() -
    "not supported" in _will_engine_execute_node; gradcli answers for it.)"""
    a, b, c = ones(), ones(), ones()
    log = []

    def fn(grads):
        log.append([None if g is None else float(g.sum()) for g in grads])

    h = register_multi_grad_hook((a, b, c), fn)
    (a * 2 + b * 3).sum().backward()
    assert log == [[6.0, 9.0, None]]
    grad((a * 2).sum(), [a])
    assert log[-1] == [6.0, None, None]
    (c * 5).sum().backward(inputs=[c])
    assert log[-1] == [None, None, 15.0]
    h.remove()
    (a * 2).sum().backward()
    assert len(log) == 3


def test_multi_grad_any_hooks():
    """Mirrors test_autograd.py::TestAutograd::test_multi_grad_any_hooks: called once per
    backward, with the first gradient computed."""
    a, b = ones(), ones()
    log = []
    register_multi_grad_hook((a, b), lambda g: log.append(float(g.sum())), mode="any")
    (a * 2 + b * 3).sum().backward()
    assert len(log) == 1 and log[0] in (6.0, 9.0)
    (a * 2 + b * 3).sum().backward()
    assert len(log) == 2


def test_multi_grad_hook_fires_with_the_last_tensor_hook():
    """Mirrors the ordering of test_autograd.py::TestAutograd::test_multi_grad_all_hooks:
    fn runs inside the last tensor's hooks, before hooks registered after it
    (PyTorch 2.13: ['b', 'multi', 'a'])."""
    a, b = ones(), ones()
    log = []
    register_multi_grad_hook((a, b), lambda gs: log.append("multi"))
    a.register_hook(lambda g: log.append("a"))
    b.register_hook(lambda g: log.append("b"))
    (a * 2 + b * 3).sum().backward()
    assert log == ["b", "multi", "a"]


def test_multi_grad_hook_bad_mode():
    """register_multi_grad_hook's mode check (torch 2.13's message)."""
    with pytest.raises(ValueError, match=r"^Expects mode to be one of \('all', 'any'\) but "
                                         r"got some$"):
        register_multi_grad_hook((ones(),), lambda g: None, mode="some")


@pytest.mark.timeout(60)
def test_multi_grad_hook_concurrent_backwards():
    """test_autograd.py::TestAutograd::test_multi_grad_all_hooks with threads
    (PyTorch keys its state by graph task): each concurrent backward gets one call."""
    a, b = ones(), ones()
    calls = []
    lock = threading.Lock()

    def fn(grads):
        with lock:
            calls.append(tuple(float(g.sum()) for g in grads))

    register_multi_grad_hook((a, b), fn)
    barrier = threading.Barrier(4)
    errors = []

    def work():
        try:
            barrier.wait(10)
            for _ in range(10):
                grad((a * 2 + b * 3).sum(), [a, b])
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads) and not errors
    assert calls == [(6.0, 9.0)] * 40
