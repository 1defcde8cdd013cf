"""User-defined functions for graphs/custom_op/graph.yaml (run with --allow-code).

Each class is shaped like ``torch.autograd.Function``: static ``forward(ctx,
*arrays, **args)`` and ``backward(ctx, *grads)``. ``forward`` gets raw arrays;
``backward`` gets raw arrays too, or Tensors under ``create_graph`` (then
writing it with operators, or gradcli.ops, makes it differentiable again).
"""
import numpy as np

from gradcli.autograd import Tensor, enable_grad, grad


class ScaledTanh:
    """y = scale * tanh(x); dy/dx = scale - y ** 2 / scale (from the saved output)."""

    @staticmethod
    def forward(ctx, x, scale=1.0):
        y = scale * np.tanh(x)
        ctx.scale = scale                 # an attribute on ctx, for backward
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (ctx.scale - y * y / ctx.scale)


class ReentrantSquare:
    """y = x ** 2, whose backward asks the engine for the gradient (a reentrant backward)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        data = x.data if isinstance(x, Tensor) else x
        leaf = Tensor(np.array(data), requires_grad=True)
        with enable_grad():
            y = leaf * leaf
        (gx,) = grad([y], [leaf], [g])
        return gx


class WeightedSum:
    """y = a * w + b for two inputs; gradients only where needs_input_grad says."""

    @staticmethod
    def forward(ctx, a, b, w=1.0):
        ctx.w = w
        return a * w + b

    @staticmethod
    def backward(ctx, g):
        ga = g * ctx.w if ctx.needs_input_grad[0] else None
        gb = g if ctx.needs_input_grad[1] else None
        return ga, gb
