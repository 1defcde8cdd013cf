"""Second derivatives against finite differences, as ``torch.autograd.gradgradcheck``.

A graph that uses ``grad`` ops or ``backward.create_graph`` promises
gradients that can be differentiated again. ``check_gradgrad`` checks them
the way PyTorch's gradgradcheck does: with random upstream gradients ``v``
(one per root, fixed by ``seed``), the first-order gradient

    G(x, v) = grad(roots, inputs, grad_outputs=v)

is itself a function of the inputs ``x`` and of ``v``; its Jacobian is
built numerically, by central differences of ``G`` (each evaluation a
forward and a backward through the engine, in float64), and analytically,
by backwards through the graph that ``G`` recorded with ``create_graph``
(the backward of the backward). Full mode compares the whole Jacobians,
``fast`` the projections ``w^T J u`` on random unit vectors (the comparison
and its reporting are gradcheck's: ``gradcheck._full`` / ``gradcheck._fast``).
Outputs are named ``grad(x)`` and the ``v`` inputs ``grad_outputs(root)``.

Note [Replaying on Tensors]: gradcheck replays a graph as a pure function of
arrays (every op's ``fn``). A graph with an op whose forward runs a backward
(``runs_backward``: ``grad``) cannot be replayed that way: the gradient needs
the recorded graph. Such graphs are replayed on Tensors with recording on
(``replay``), which is also what the first-order check of them uses.
"""
from __future__ import annotations

import numpy as np

from .devices import to_host


def uses_higher_order(graph) -> bool:
    """The graph runs a backward in its forward (``grad`` ops) or asks for create_graph."""
    return bool(graph.backward_spec.create_graph) or needs_tensor_replay(graph)


def needs_tensor_replay(graph) -> bool:
    return any(getattr(spec.op, "runs_backward", False) for spec in graph.ops)


def replay(graph, leaves, overrides=None):
    """The graph's forward on Tensors (host arrays; ``to`` is the identity) from the
    leaf arrays ``leaves``; ``overrides`` replace leaves or op outputs by name (an
    overridden op output becomes a leaf that requires grad). Returns name -> Tensor."""
    from .autograd import Tensor, set_grad_enabled

    overrides = overrides or {}
    values = {}
    for name, leaf in graph.leaves.items():
        data = overrides.get(name, leaves[name])
        values[name] = Tensor(np.array(data, copy=True), requires_grad=leaf.requires_grad)
    with set_grad_enabled(True), np.errstate(all="ignore"):
        for spec in graph.ops:
            inputs = [values[n] for n in spec.inputs]
            if getattr(spec.op, "moves_device", False):
                outs = [inputs[0]]
            else:
                out = spec.op(*inputs, **spec.args)
                outs = list(out) if isinstance(out, (list, tuple)) else [out]
            for name, t in zip(spec.outputs, outs):
                if name in overrides:
                    t = Tensor(np.array(overrides[name], dtype=np.float64), requires_grad=True)
                values[name] = t
    return values


def replay_values(graph, leaves, overrides=None):
    """``replay`` as host arrays (gradcheck's ``_Function.values``)."""
    return {name: to_host(t.data) for name, t in replay(graph, leaves, overrides).items()}


class _FirstOrder:
    """``G(x, v)``: the first-order gradients at given inputs and root gradients."""

    def __init__(self, graph, leaves, inputs, v_names):
        self.graph = graph
        self.leaves = leaves
        self.inputs = inputs
        self.v_names = v_names
        self.v0 = {}

    def __call__(self, overrides=None):
        from .autograd import grad, set_multithreading_enabled

        overrides = dict(overrides or {})
        values = replay(self.graph, self.leaves, {k: v for k, v in overrides.items()
                                                  if k not in self.v0})
        roots = [values[r] for r in self.graph.backward_spec.roots]
        vs = [np.asarray(overrides.get(n, self.v0[n])) for n in self.v_names]
        with set_multithreading_enabled(False):
            result = grad(roots, [values[n] for n in self.inputs], vs, allow_unused=True)
        return [np.zeros(values[n].shape) if g is None else np.asarray(to_host(g), np.float64)
                for n, g in zip(self.inputs, result)]


class _SecondOrder:
    """``w^T J`` of ``G`` through the recorded backward of the backward."""

    def __init__(self, graph, leaves, inputs, v_names, v0):
        from .autograd import Tensor, grad, set_multithreading_enabled

        values = replay(graph, leaves)
        roots = [values[r] for r in graph.backward_spec.roots]
        for r, name in zip(roots, graph.backward_spec.roots):
            if not r.requires_grad:
                graph.fail(f"root {name!r} does not require grad", graph.backward_spec.line,
                           "backward")
        self.xs = [values[n] for n in inputs]
        self.vs = [Tensor(np.array(v0[n], copy=True), requires_grad=True) for n in v_names]
        with set_multithreading_enabled(False):
            first = grad(roots, self.xs, self.vs, create_graph=True, allow_unused=True)
        self.first = list(first)

    def vjp(self, i, w):
        from .autograd import grad, set_multithreading_enabled

        wrt = self.xs + self.vs
        g = self.first[i]
        if g is None or not g.requires_grad:       # G_i does not depend on anything
            return [np.zeros(t.shape) for t in wrt]
        w = np.asarray(w, dtype=np.float64).reshape(g.shape)
        with set_multithreading_enabled(False):
            result = grad([g], wrt, [w], retain_graph=True, allow_unused=True)
        return [np.zeros(t.shape) if r is None else np.asarray(to_host(r), np.float64)
                for t, r in zip(wrt, result)]


def check_gradgrad(graph, eps=1e-6, atol=1e-5, rtol=1e-3, fast=False, seed=0) -> list:
    """Check the Jacobian of the first-order gradient; one ``gradcheck.Mismatch``
    per (gradient, input) pair, passing or not (see the module's docstring)."""
    from .errors import BackwardError, GraphError
    from .gradcheck import Mismatch, _fast, _full, differentiable_inputs, promoted

    g64 = promoted(graph)
    inputs = differentiable_inputs(g64)
    if not inputs:
        raise GraphError("nothing to check: no tensor requires grad", graph.file,
                         graph.backward_spec.line, "backward")
    leaves = {name: np.asarray(leaf.make(leaf.shape)) for name, leaf in g64.leaves.items()}
    base = replay(g64, leaves)
    rng = np.random.default_rng(seed)
    roots = list(g64.backward_spec.roots)
    v_names = [f"grad_outputs({r})" for r in roots]
    v0 = {n: rng.standard_normal(base[r].shape) for n, r in zip(v_names, roots)}
    f = _FirstOrder(g64, leaves, inputs, v_names)
    f.v0 = v0
    outputs = [f"grad({n})" for n in inputs]
    wrt = inputs + v_names
    try:
        analytical = _SecondOrder(g64, leaves, inputs, v_names, v0)
        f0 = f()
    except (GraphError, BackwardError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported as the check's error
        return [Mismatch(i, j, out, name, "error", fast=fast,
                         message=f"second-derivative check for {out!r} w.r.t. {name!r} could "
                                 f"not run: the backward with create_graph raised "
                                 f"{type(exc).__name__}: {exc}")
                for i, out in enumerate(outputs) for j, name in enumerate(wrt)]
    x0 = {n: np.asarray(to_host(base[n].data), np.float64) for n in inputs}
    x0.update(v0)
    if fast:
        return _fast(f, f0, x0, analytical, outputs, wrt, eps, atol, rtol, seed)
    return _full(f, f0, x0, analytical, outputs, wrt, eps, atol, rtol)
