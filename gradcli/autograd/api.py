"""``backward()`` and ``grad()``: build root edges and call the engine."""
from __future__ import annotations

import numpy as np

from ..devices import device_of, to_device, xp_of_array
from . import dispatch
from .engine import Engine, current_engine


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _make_grads(outputs, grad_outputs, create_graph=False):
    """Default each missing root gradient to ones, for single-element roots only.

    With ``create_graph`` a Tensor root gradient is kept as it is, so the
    gradients computed from it are differentiable w.r.t. it too.
    """
    grads = []
    for i, out in enumerate(outputs):
        g = grad_outputs[i] if grad_outputs is not None else None
        if hasattr(g, "gradient_edge") and not create_graph:   # a Tensor (api.py sits below tensor.py)
            g = g.data
        if g is not None and hasattr(g, "shape") and tuple(g.shape) != tuple(out.shape):
            # Note [Root gradient shapes]: as PyTorch's _make_grads, a given root gradient
            # has exactly its output's shape: never broadcast or summed to it.
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                               f"{_size(g.shape)} and output[{i}] has a shape of "
                               f"{_size(out.shape)}.")
        if g is None:
            if out.requires_grad:
                if out.data.size != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                g = xp_of_array(out.data).ones_like(out.data)
        elif not hasattr(g, "shape"):
            g = np.full(out.shape, g, dtype=out.dtype)
            g = to_device(g, device_of(out.data))
        grads.append(g)
    return grads


def _size(shape) -> str:
    return f"[{', '.join(str(int(n)) for n in shape)}]"


def _root_edges(outputs):
    edges = []
    for i, out in enumerate(outputs):
        edge = out.gradient_edge() if out.requires_grad else None
        if edge is None:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               f"have a grad_fn")
        edges.append(edge)
    return edges


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None,
             engine=None, **options):
    """Accumulate gradients of ``tensors`` into ``.grad`` of the leaves (or ``inputs``).

    ``retain_graph`` defaults to ``create_graph``. With ``create_graph`` the
    backward records itself: ``.grad`` becomes a Tensor that carries a
    ``grad_fn`` (Note [Differentiable .grad]), so it can be differentiated.
    """
    tensors = _as_list(tensors)
    grads = _make_grads(tensors, _as_list(grad_tensors), create_graph)
    if retain_graph is None:
        retain_graph = create_graph
    outputs = []
    inputs = _as_list(inputs)
    if inputs is not None and not inputs:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    for t in inputs or ():
        edge = t.gradient_edge()
        if edge is None:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        if t.grad_fn is not None:
            t.retain_grad()          # a non-leaf input accumulates into its .grad
        outputs.append(edge)
    engine = engine or current_engine()
    engine.execute(_root_edges(tensors), grads, retain_graph, create_graph, True, outputs,
                   **options)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, engine=None, materialize_grads=False, **options):
    """Return the gradients of ``outputs`` w.r.t. ``inputs`` without touching ``.grad``.

    Raw arrays, or with ``create_graph`` Tensors that carry the graph of the
    backward (their ``grad_fn``), for higher-order gradients.
    ``retain_graph`` defaults to ``create_graph``. ``allow_unused`` (default:
    ``materialize_grads``) lets an input the outputs do not depend on get None,
    or zeros with ``materialize_grads``.

    Example::

        x = Tensor(np.ones(3), requires_grad=True)
        (gx,) = grad((x * x).sum(), x)        # 2 * x
    """
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs = _as_list(outputs)
    inputs = _as_list(inputs)
    grads = _make_grads(outputs, _as_list(grad_outputs), create_graph)
    if retain_graph is None:
        retain_graph = create_graph
    edges = []
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        edges.append(t.gradient_edge())
    engine = engine or current_engine()
    result = engine.execute(_root_edges(outputs), grads, retain_graph, create_graph, False,
                            edges, **options)
    if not allow_unused and any(g is None for g in result):
        raise RuntimeError("One of the differentiated Tensors appears to not have been used in "
                           "the graph. Set allow_unused=True if this is the desired behavior.")
    if materialize_grads:
        result = [xp_of_array(t.data).zeros_like(t.data) if g is None else g
                  for g, t in zip(result, inputs)]
    if create_graph:
        Tensor = dispatch.Tensor     # Note [Core dispatch]
        if Tensor is not None:       # (None: no Tensor was ever made, the graph is raw Nodes)
            result = [g if g is None or type(g) is Tensor else Tensor(g) for g in result]
    return tuple(result)


def queue_callback(callback):
    """Run ``callback()`` once the current backward has finished (final callback)."""
    Engine.queue_callback(callback)
